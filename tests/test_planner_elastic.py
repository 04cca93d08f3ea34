"""Elastic recovery (issue 15): the shrink rule, the expected loss per lost node, and `trainfleet plan` with it.

Expected values come from outside the code: hand-worked numbers (each step in the comments), an exact series
and a Monte Carlo of the replacement process as cli/planner/capacity.py describes it (a try for capacity at
once and every 900 s, each succeeding with chance q, then 900 s to boot and join), and the shrink rule restated
with fractions."""

from __future__ import annotations

import json
import math
import random
from fractions import Fraction

import pytest

from cli.planner import reliability as rel
from infra.catalog.interruption import aws_bucket_rate
from infra.elastic import accumulation_at, shrink_to, usable_node_counts
from infra.stack_file import read_stack_file
from tests.conftest import REPO, assert_one_line_error, run_trainfleet

# ---------------------------------------------------------------- the shrink rule


def test_usable_counts_keep_the_global_batch_by_whole_accumulation():
    """n is usable when grad_accum x N / n is a whole number (Fraction), n in [min_nodes, N - 1]; then
    micro x accum(n) x slots x n is the global batch of N nodes."""
    for nodes in range(1, 40):
        for accum in range(1, 13):
            for least in range(1, nodes + 1):
                want = [n for n in range(least, nodes) if Fraction(accum * nodes, n).denominator == 1]
                assert usable_node_counts(nodes, accum, least) == want
                for n in want:
                    assert 4 * accumulation_at(nodes, accum, n) * 8 * n == 4 * accum * 8 * nodes
                assert shrink_to(nodes, accum, least) == (want[-1] if want else None)


def test_worked_shrink_counts():
    assert usable_node_counts(4, 8, 2) == [
        2
    ]  # 32 / 3 is not whole: 4 nodes at accumulation 8 shrink to 2 (16)
    assert accumulation_at(4, 8, 2) == 16
    assert usable_node_counts(48, 6, 24) == [24, 32, 36]  # 288 = 24 x 12 = 32 x 9 = 36 x 8
    assert shrink_to(48, 6, 24) == 36 and shrink_to(48, 6, 24, available=35) == 32
    assert usable_node_counts(8, 1, 5) == []  # 8 divides by none of 5, 6, 7
    with pytest.raises(ValueError):
        accumulation_at(8, 1, 5)


def test_elastic_setting_refuses_what_the_schema_refuses():
    assert rel.elastic_setting(4, 8, 1, 1, 2, 600.0)[0] == rel.ElasticSetting(2, 600.0, 2)
    for args, needle in [((4, 8, 2, 1, 2, 600.0), "pure data parallelism"), ((4, 8, 1, 2, 2, 600.0), "TP 1 x PP 2"),
                         ((1, 8, 1, 1, 1, 600.0), "one-node"), ((4, 8, 1, 1, 4, 600.0), "not below"),
                         ((8, 1, 1, 1, 5, 600.0), "cannot shrink")]:  # fmt: skip
        setting, why = rel.elastic_setting(*args)
        assert setting is None and needle in why


# ---------------------------------------------------------------- when the replacement is up

P = R = 900.0  # reliability.PROVISION_S and capacity.RETRY_S


def arrival(rng: random.Random, q: float) -> float:
    """One replacement: tries at 0, R, 2R, ... each with chance q, then P to boot and join."""
    tries = 0
    while rng.random() >= q:
        tries += 1
    return R * tries + P


def series_expected_min(a: float, q: float, terms: int = 4000) -> float:
    """E[min(T, a)] summed over the number of failed tries k: P(k) = (1 - q)^k q."""
    return sum((1 - q) ** k * q * min(P + R * k, a) for k in range(terms))


@pytest.mark.parametrize("wait_s", [0.0, 900.0, 3150.0, 7200.0])
def test_replacement_times_match_the_capacity_process(wait_s):
    q = R / (R + wait_s)
    assert rel.retry_success(wait_s) == pytest.approx(q)
    rng = random.Random(3)
    samples = [arrival(rng, q) for _ in range(40_000)]
    assert sum(samples) / len(samples) - P == pytest.approx(
        wait_s, rel=0.03, abs=5
    )  # capacity.py's mean wait
    for a in (0.0, 600.0, 900.0, 1000.0, 2040.83, 2700.0, 4140.83, 20_000.0):
        assert rel.replacement_expected_min(a, wait_s) == pytest.approx(
            series_expected_min(a, q), rel=1e-9, abs=1e-9
        )
        assert rel.replacement_expected_min(a, wait_s) == pytest.approx(
            sum(min(t, a) for t in samples) / len(samples), rel=0.02, abs=1
        )
        assert rel.replacement_survival(a, wait_s) == pytest.approx(sum(t > a for t in samples) / len(samples),
                                                                    abs=0.01)  # fmt: skip


@pytest.mark.parametrize("wait_s,first", [(12_280.0, 0.597), (18_150.0, 0.53), (900.0, 0.9)])
def test_a_first_try_of_its_own_matches_the_capacity_process(wait_s, first):
    """capacity.py's default: the first try holds the nodes with the traces' chance of having them at once, each
    later one with q1 = R (1 - q0) / wait; simulated, and summed over the number of failed tries."""
    q1 = R * (1 - first) / wait_s
    rng = random.Random(5)

    def one() -> float:
        if rng.random() < first:
            return P
        tries = 1
        while rng.random() >= q1:
            tries += 1
        return R * tries + P

    samples = [one() for _ in range(40_000)]
    assert sum(samples) / len(samples) - P == pytest.approx(wait_s, rel=0.03)
    for a in (600.0, 900.0, 1800.0, 2700.0, 4140.83, 20_000.0):
        series = first * min(P, a) + sum((1 - first) * (1 - q1) ** (k - 1) * q1 * min(P + R * k, a)
                                         for k in range(1, 20_000))  # fmt: skip
        assert rel.replacement_expected_min(a, wait_s, first) == pytest.approx(series, rel=1e-9)
        assert rel.replacement_survival(a, wait_s, first) == pytest.approx(sum(t > a for t in samples) / len(samples),
                                                                           abs=0.01)  # fmt: skip


# ---------------------------------------------------------------- the expected loss per lost node

# The prod stack's shape: 182 GB checkpoint (13B x 14 B), 4 AWS nodes at grad accum 8 -> shrink to 2, S3 at
# 1 GB/s per node (checkpoint_io.md), local save 2 GB/s, commit 10 s, conversion at WORKED_RATE (150 MB/s, below).
#   shrink c_2 = download 182 GB at 1 GB/s 182 s + convert 182e9 / 150e6 = 1,213.33 s + load 91 GB at 2 GB/s 45.5 s
#              = 1,440.83 s
#   grow back  = save 91 GB at 2 GB/s 45.5 s + upload 91 s + commit 10 s + c_4 (182 + 1,213.33 + 22.75 = 1,418.08)
#              = 1,564.58 s
#   rejoin     = each of 4 nodes downloads 45.5 GB (45.5 s) and loads it (22.75 s) = 68.25 s
#   without    = 900 s to boot + 3,150 s waiting for capacity + 68.25 s = 4,118.25 s
B, NODES, SHRUNK = 182e9, 4, 2
WORKED_RATE = 150e6  # the conversion rate the numbers here were worked at (the CLI tests below use the model's)


@pytest.fixture(autouse=True)
def worked_conversion_rate(monkeypatch):
    """In this process the model converts at the rate the hand-worked numbers assume; `trainfleet` subprocesses
    see the module's measured rate (benchmarks/elastic_recovery.py)."""
    monkeypatch.setattr(rel, "UNIVERSAL_CONVERT_BYTES_PER_S", WORKED_RATE)
WAIT = 3150.0  # 3/10 assumed for 3 spot nodes: q = 2/9, 900 x (7/9) / (2/9)
SHRINK, GROW, REJOIN = 1440.8333, 1564.5833, 68.25


def times():
    return rel.checkpoint_times("aws", B, NODES, None, 1.0)


def recovery(wait_s: float, capacity_wait_s: float = WAIT):
    setting = rel.ElasticSetting(2, wait_s, SHRUNK)
    return rel.elastic_recovery(setting, "aws", B, NODES, None, times(), capacity_wait_s)


def test_conversion_times_worked_by_hand():
    e = recovery(600.0)
    assert e.shrink_s == pytest.approx(SHRINK, abs=0.01)
    assert e.grow_s == pytest.approx(GROW, abs=0.01)
    assert e.without_loss_s == pytest.approx(900 + WAIT + REJOIN)


@pytest.mark.parametrize("wait_s,capacity_wait_s,expected", [
    # w = 600 < 900: every loss shrinks. G(600) = 600; G(600 + 1,440.83 = 2,040.83): x = 1,140.83 = 1 x 900 + 240.83
    # -> 900 + 900 (7/9)(1 - 7/9)/(2/9) + 240.83 (7/9)^2 = 900 + 700 + 145.69 = 1,745.69; E[T] = 4,050.
    # loss = 600 + 1,440.83 + 1,564.58 + (1 - 2/4)(4,050 - 1,745.69) = 4,757.57 s (more than 4,118.25 without)
    (600.0, WAIT, 4757.57),
    # w = 2,700: S = (7/9)^3 = 0.47051; G(2,700) = 900 + 3,150 (1 - (7/9)^2) = 2,144.44;
    # G(4,140.83): x = 3,240.83 = 3 x 900 + 540.83 -> 900 + 3,150 (1 - (7/9)^3) + 540.83 (7/9)^4 = 2,765.82;
    # loss = 2,144.44 + 0.52949 x 68.25 + 0.47051 x 3,005.42 + 0.5 (4,050 - 2,765.82) = 4,236.74 s
    (2700.0, WAIT, 4236.74),
    # on demand (no capacity wait): T = 900 always; w = 600 shrinks every time and never trains shrunk
    # (900 - 600 < 1,440.83): 600 + 1,440.83 + 1,564.58 = 3,605.42 s, against 968.25 s without
    (600.0, 0.0, 3605.42),
    # w = 900: the replacement is always up within the wait: 900 + 68.25, the same as without
    (900.0, 0.0, 968.25),
])  # fmt: skip
def test_expected_loss_per_lost_node_worked_by_hand(wait_s, capacity_wait_s, expected):
    assert recovery(wait_s, capacity_wait_s).expected_loss_s == pytest.approx(expected, abs=0.05)


def simulate_loss(rng: random.Random, q: float, wait_s: float) -> float:
    """One lost node, event by event: full-speed seconds lost = time until full speed again - work done meanwhile
    (idle while waiting or converting, n/N speed while shrunk)."""
    up = arrival(rng, q)
    if up <= wait_s:
        return up + REJOIN  # idle until it joins, then every node fetches and loads its part
    clock, work = wait_s + SHRINK, 0.0
    if up > clock:
        work += SHRUNK / NODES * (up - clock)
        clock = up
    return clock + GROW - work


@pytest.mark.parametrize("wait_s,capacity_wait_s", [(600.0, 3150.0), (2700.0, 3150.0), (1800.0, 900.0),
                                                     (0.0, 7200.0), (5000.0, 7200.0), (600.0, 0.0)])  # fmt: skip
def test_expected_loss_matches_a_monte_carlo(wait_s, capacity_wait_s):
    rng = random.Random(11)
    q = R / (R + capacity_wait_s)
    runs = 60_000
    simulated = sum(simulate_loss(rng, q, wait_s) for _ in range(runs)) / runs
    assert recovery(wait_s, capacity_wait_s).expected_loss_s == pytest.approx(simulated, rel=0.015)


def test_elastic_helps_only_when_capacity_is_slow():
    """Quick capacity: shrinking and converting twice costs more than waiting; a long drought: it pays."""
    for w in (0.0, 300.0, 600.0):
        assert recovery(w, 0.0).expected_loss_s > recovery(w, 0.0).without_loss_s
    slow = recovery(600.0, 20 * 3600.0)
    assert (
        slow.expected_loss_s < 0.6 * slow.without_loss_s
    )  # about half: 2 of 4 nodes train through the drought
    # waiting a day is waiting for the replacement: the same loss as without elastic recovery, nearly
    day = recovery(86_400.0, WAIT)
    assert day.expected_loss_s == pytest.approx(day.without_loss_s, rel=1e-3)


def test_a_slower_conversion_is_never_shown_cheaper(monkeypatch):
    """At w = 600 every loss converts twice; the shrunk run can only absorb (1 - n/N) of the longer shrink: the loss
    grows by at least 1.5 x the extra conversion time."""
    fast = recovery(600.0).expected_loss_s
    monkeypatch.setattr(rel, "UNIVERSAL_CONVERT_BYTES_PER_S", 15e6)
    extra = B / 15e6 - B / 150e6
    assert recovery(600.0).expected_loss_s >= fast + 1.5 * extra - 0.01


def test_elastic_recovery_with_deepspeed_parts_worked_by_hand():
    """Issue 29: 70B bf16 ZeRO-1 on 4 nodes x 8 GPUs (AWS, 1 GB/s per node, 2 GB/s local). Node 0 writes the 140 GB
    16-bit model beside 12 x 70e9 / 4 = 210 GB of shards: 350 GB, and every node restores 350 GB. A conversion still
    fetches every part (980 GB): c_2 = 980 s + 980e9 / 150e6 + a load of 980 / 2 GB at 2 GB/s (245 s). Growing back,
    the 2-node job saves node 0's 140 + 420 = 560 GB (280 s), uploads it (560 s), commits (10 s), then converts for 4
    (980 s + 6,533.3 s + 122.5 s). A replacement that joins downloads 350 GB (350 s) and loads it (175 s)."""
    parts = rel.layout_parts(70_000_000_000, 1, "bf16", 1, 1, 4, 8, 80)
    at4 = rel.checkpoint_times("aws", parts, 4, None, 1.0)
    e = rel.elastic_recovery(rel.ElasticSetting(2, 600.0, 2), "aws", parts, 4, None, at4, WAIT)
    assert e.checkpoint_bytes == pytest.approx(980e9)
    convert = 980e9 / WORKED_RATE
    assert e.shrink_s == pytest.approx(980 + convert + 245)
    assert e.grow_s == pytest.approx(280 + 560 + 10 + 980 + convert + 122.5)
    assert e.without_loss_s == pytest.approx(900 + WAIT + 350 + 175)


def assess(elastic=None, **kw):
    args = dict(useful_hours=200.0, nodes=NODES, devices_per_node=8, cloud="aws", spot=True, interruption=aws_bucket_rate(2),
                checkpoint_bytes=B, node_network_gbits=None, step_s=1.0, capacity_wait_s=WAIT)  # fmt: skip
    return rel.assess(**{**args, **kw}, elastic=elastic)


def test_assess_uses_the_elastic_loss_as_its_restart():
    plain = assess()
    setting = rel.ElasticSetting(2, 2700.0, SHRUNK)
    elastic = assess(setting)
    assert elastic.restart_s - plain.restart_s == pytest.approx(4236.74 - (900 + WAIT + REJOIN), abs=0.05)
    assert elastic.restart_s == pytest.approx(elastic.elastic.expected_loss_s + plain.times.durable_lag_s)
    assert elastic.wall_hours > plain.wall_hours  # 4,236.74 s per loss against 4,118.25 s: elastic costs more
    drought = dict(capacity_wait_s=20 * 3600.0)  # a replacement takes most of a day: shrinking pays
    assert assess(setting, **drought).wall_hours < assess(**drought).wall_hours
    assert any("elastic recovery (min_nodes 2, wait 2700 s)" in line for line in elastic.explain())
    assert not any("elastic" in line for line in plain.explain())


# ---------------------------------------------------------------- trainfleet plan


def plan(*args: str) -> dict:
    result = run_trainfleet("plan", *args, "--json")
    assert result.code == 0, result.stderr
    return result.json()


SEVEN_B = ("--model", "llama-7b", "--tokens", "200B", "--deadline", "72h")
MEASURED_RATE = 137e6  # reliability.UNIVERSAL_CONVERT_BYTES_PER_S: measured by benchmarks/conversion_rate.py


def test_a_multi_node_spot_plan_shows_elastic_recovery_beside_it():
    best = plan(*SEVEN_B)["best"]
    assert (
        best["purchase"] == "spot"
        and best["nodes"] > 1
        and best["tensor_parallel"] == best["pipeline_parallel"] == 1
    )
    e = best["elastic"]
    n, accum = best["nodes"], best["grad_accum"]
    # the default: the smallest usable count of at least half the nodes, 600 s
    half = math.ceil(n / 2)
    assert e["min_nodes"] == min(m for m in range(half, n) if Fraction(accum * n, m).denominator == 1)
    assert e["wait_for_replacement_s"] == 600 and e["applicable"] and not e["in_plan"]
    assert e["shrink_to_nodes"] == max(m for m in range(e["min_nodes"], n) if (accum * n) % m == 0)
    assert e["without_usd"] == pytest.approx(best["expected_cost_usd"], abs=0.01)
    assert e["without_hours"] == pytest.approx(best["wallclock_hours"], abs=1e-3)
    # the same price per node-hour: the cost moves with the wall time alone (every node bills either way, but
    # for the nodes not yet held before the start: capacity.py's traces held 7.9% of them while waiting)
    storage = best["breakdown"]["storage_usd"]
    rate = best["price_usd_per_node_hour"] * n
    assert best["capacity"]["score"] is None
    unbilled_hours = (1 - 0.079) * best["capacity"]["expected_wait_minutes"] / 60
    assert e["expected_usd"] - storage * e["expected_hours"] / e["without_hours"] == pytest.approx(
        rate * (e["expected_hours"] - unbilled_hours), rel=1e-3
    )
    assert e["universal_convert_bytes_per_s"] == MEASURED_RATE
    text = run_trainfleet("plan", *SEVEN_B).stdout
    flat = " ".join(text.split())
    assert f"note: with elastic recovery (min_nodes {e['min_nodes']}, wait_for_replacement_s 600;" in flat
    assert f"--elastic {e['min_nodes']}:600" in flat and "137 MB/s universal-checkpoint conversion (measured" in flat


def test_elastic_option_prices_the_plan_with_it_and_writes_the_stack(tmp_path):
    default = plan(*SEVEN_B)["best"]["elastic"]
    result = run_trainfleet("plan", *SEVEN_B, "--elastic", f"{default['min_nodes']}:600", "--write-stack", "dev",
                            "--json", cwd=tmp_path)  # fmt: skip
    assert result.code == 0, result.stderr
    best = result.json()["best"]
    e = best["elastic"]
    assert e["in_plan"] and e["expected_usd"] == pytest.approx(best["expected_cost_usd"], abs=0.01)
    assert e["expected_hours"] == pytest.approx(best["wallclock_hours"], abs=1e-3)
    assert any("elastic recovery (--elastic" in a and "137 MB/s" in a for a in best["assumptions"])
    config = read_stack_file(tmp_path / "stacks" / "Pulumi.dev.yaml").config  # validated, catalog included
    assert config.checkpoint.elastic is not None
    assert (config.checkpoint.elastic.min_nodes, config.checkpoint.elastic.wait_for_replacement_s) == (
        default["min_nodes"], 600.0)  # fmt: skip
    assert config.job.planned_cost_usd == pytest.approx(best["expected_cost_usd"], abs=0.01)
    explained = run_trainfleet("plan", *SEVEN_B, "--elastic", str(default["min_nodes"]), "--explain").stdout
    assert "elastic recovery (min_nodes" in explained and "measured on a 2-core machine" in explained


def test_a_plan_with_tensor_parallelism_says_elastic_does_not_apply():
    best = plan("--params", "70B", "--tokens", "1T", "--deadline", "24d", "--max-nodes", "128")["best"]
    assert (best["tensor_parallel"], best["pipeline_parallel"]) != (1, 1)
    assert best["elastic"]["applicable"] is False and "pure data parallelism" in best["elastic"]["reason"]


def test_without_elastic_option_on_demand_and_one_node_plans_carry_none():
    data = plan("--model", "llama-7b", "--tokens", "20B", "--purchase", "on-demand", "--max-nodes", "1")
    assert data["best"]["nodes"] == 1 and data["best"]["elastic"] is None


@pytest.mark.parametrize(
    "value", ["x", "0", "1025", "2:-5", "2:nan", "2:inf", "2:100000", "2.5", ":600", "2:1:3"]
)
def test_bad_elastic_values_are_one_line(value):
    assert_one_line_error(
        run_trainfleet("plan", *SEVEN_B, "--elastic", value), "--elastic", "MIN_NODES[:WAIT_S]"
    )


def test_json_elastic_is_plain_json():
    data = plan(*SEVEN_B, "--elastic", "2")
    json.dumps(data, allow_nan=False)  # no Infinity/NaN anywhere


# ---------------------------------------------------------------- the preview's expected cost of a stack

PROD = (REPO / "stacks" / "Pulumi.prod.yaml").read_text()
FAIL_PER_NODE_HOUR = 8 * 5e-5  # failure_rates.md: 5e-5 per device-hour, 8 GPUs
SPOT_PER_NODE_HOUR = -math.log(1 - 0.025) / 730  # use1-az6's Spot Advisor bucket 0, 2.5% a month


def with_elastic(text: str, elastic: str) -> str:
    out = text.replace("  trainfleet:checkpoint:\n", f"  trainfleet:checkpoint:\n    elastic: {elastic}\n", 1)
    assert out != text
    return out


def test_the_preview_prices_a_stacks_elastic_recovery():
    """prod (4 x p4de, 1 on-demand + 3 spot, grad accum 8, 13B: llama-13b's 13,015,864,320 parameters; ZeRO-3
    saves 12 B of each, 156.19 GB) with elastic recovery: each lost node costs the hand-worked loss instead of 4,118 s. To first order
    (Young: wall grows by rate x restart per useful second) the wall time moves by
    ideal x rate x (loss with - loss without), rate = 4 x 4e-4 + 3 x 3.47e-5 / 1.187 events per hour."""
    from cli.preview.engine import estimate_text

    (plain,) = estimate_text(PROD, "prod", "prod").expected
    est = estimate_text(with_elastic(PROD, "{min_nodes: 2, wait_for_replacement_s: 2700}"), "prod", "prod")
    assert est.expected_note == ""
    (e,) = est.expected
    # ZeRO-3 (prod): no full weights, 12 B/param of optimizer shards over 32 ranks, and each rank's 16 KiB
    # model-states file (infra/checkpoint_layout.py); every node's part is a quarter of it
    b = 12 * 13_015_864_320 + 32 * 16384
    shrink = b / 1e9 + b / 150e6 + b / 2 / 2e9  # download it all, convert, load half
    grow = b / 2 / 2e9 + b / 2 / 1e9 + 10 + (b / 1e9 + b / 150e6 + b / 4 / 2e9)
    # prod's 3 spot nodes have no placement score: capacity.py's traces wait W = 12,280 s x 3^0.188 for them; the
    # first 900 s try fails with chance f0 = 1 - 0.597 x 3^-0.049 (the traces' share of moments they were there at
    # once), each later one with p = 1 - 900 f0 / W (which keeps the mean W). T = 900 s + 900 s x failed tries.
    wait = 12_280 * 3**0.188
    f0 = 1 - 0.597 * 3**-0.049
    p = 1 - 900 * f0 / wait
    c = wait  # E[T] - 900
    s = f0 * p**2  # no replacement within 2,700 s: 3 failed tries

    def g(a):  # E[min(T, a)]: 900, then each 900 s step weighted by the chance T is still to come
        x = a - 900
        j = math.floor(x / 900)
        return 900 + sum(900 * f0 * p**i for i in range(j)) + (x - 900 * j) * f0 * p**j

    g_w = g(2700)
    g_ws = g(2700 + shrink)
    rejoin = b / 4 / 1e9 + b / 4 / 2e9
    loss = g_w + (1 - s) * rejoin + s * (shrink + grow) + 0.5 * (900 + c - g_ws)
    without = 900 + c + rejoin
    # the 3 spot nodes go 1 + 0.28 x 2/3 at a time (capacity.nodes_lost_per_event): fewer, larger events
    rate = (4 * FAIL_PER_NODE_HOUR + 3 * SPOT_PER_NODE_HOUR / (1 + 0.28 * 2 / 3)) / 3600
    assert e.wall_hours - plain.wall_hours == pytest.approx(
        plain.ideal_hours * rate * (loss - without), rel=0.05
    )
    assert e.usd_per_hour == plain.usd_per_hour  # every node bills either way
    line = next(a for a in e.assumptions if a.startswith("elastic recovery"))
    assert "shrink to 2 of 4 nodes" in line and "150 MB/s" in line and "without it" in line
    assert f"${e.expected_job_usd:,.0f}" in line and f"${plain.expected_job_usd:,.0f}" in line
    assert any(a.startswith("elastic recovery") for a in est.to_json()["expected"][0]["assumptions"])


def test_rewriting_a_stack_drops_an_elastic_setting_the_new_plan_cannot_use(tmp_path):
    default = plan(*SEVEN_B)["best"]["elastic"]
    first = run_trainfleet("plan", *SEVEN_B, "--elastic", str(default["min_nodes"]), "--write-stack", "dev",
                           cwd=tmp_path)  # fmt: skip
    assert first.code == 0, first.stderr
    path = tmp_path / "stacks" / "Pulumi.dev.yaml"
    assert read_stack_file(path).config.checkpoint.elastic is not None
    again = run_trainfleet("plan", "--params", "70B", "--tokens", "1T", "--deadline", "24d", "--max-nodes", "128",
                           "--write-stack", "dev", "--force", cwd=tmp_path)  # fmt: skip
    assert again.code == 0, again.stderr
    assert "dropped trainfleet:checkpoint.elastic" in again.stderr and "pure data parallelism" in again.stderr
    assert read_stack_file(path).config.checkpoint.elastic is None  # the new (TP) plan's stack still loads
