"""The preview shows each fleet's planned job at its expected cost with interruptions, beside its list price
(issue 17, deliverable 4). The expected values are checked against a naive first-order model worked here
from the stack's own figures, and against `trainfleet estimate` for the same pinned setup."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from cli.preview.engine import estimate_text

PROD = (Path(__file__).parent.parent / "stacks" / "Pulumi.prod.yaml").read_text()

# stacks/Pulumi.prod.yaml: 13B params, 4 x p4de.24xlarge (8 x A100-80GB) in use1-az6, 1 on-demand + 3 spot,
# ZeRO-3, micro batch 4, checkpoint every 30 min. offers.csv row for use1-az6: on-demand $27.44705/h,
# spot $8.6505/h, Spot Advisor bucket 0 (<5% a month, taken as its 2.5% midpoint).
PER_HOUR = 1 * 27.44705 + 3 * 8.6505  # $53.39855 for the whole fleet
SPOT_PER_NODE_HOUR = -math.log(1 - 0.025) / 730  # 3.468e-5
FAIL_PER_NODE_HOUR = 8 * 5e-5  # 8 GPUs x 5e-5 failures per device-hour (failure_rates.md)


def naive_wall_hours(ideal_h: float, nodes: int, spot_nodes: int, lossy: bool) -> float:
    """First-order checkpoint/restart model (Young 1974), independent of the planner's Daly formula:
    W = T (1 + d/tau) / (1 - lambda (R + (tau + d) / 2)) for work-losing events at rate lambda, with
      d   = local save of a node's part: ZeRO-3 writes no full weights, each of 32 ranks its 1/32 of the fp32
            master and Adam's two moments (12 bytes/param, infra/checkpoint_layout.py), so a node of 8 ranks
            holds 12 x 13e9 / 4 = 39 GB (and 8 model-states files of 16 KiB): 39 GB / 2 GB/s  = 19.5 s
      tau = the declared 30-minute interval                                     = 1800 s
      R   = 15 min for a replacement + W + download 39 GB at 1 GB/s + load 19.5 s
            + the upload not yet durable (39 s) and its 10 s commit              = 1,007.5 s + W
      W   = the wait for a full set of 3 spot nodes (capacity.py, no placement score: the published spot
            traces' 12,280 s for one node x 3^0.188)                           = 15,097 s, also before the start;
            none without spot nodes
      lambda: failures on every node, spot interruption events on the 3 spot nodes, which go 1 + 0.28 x 2/3 at
            a time (capacity.nodes_lost_per_event)
    (S3 upload 1 GB/s per node and the 10 s commit: checkpoint_io.md.) The emergency checkpoint (a whole
    step + 19.5 + 39 + 10 s) misses AWS's 120 s notice, so spot interruptions lose work like failures."""
    part = (12 * 13e9 / 4 + 8 * 16384) / 1e9
    d, tau, wait = part / 2, 1800.0, (12_280 * spot_nodes**0.188 if spot_nodes else 0.0)
    restart = 900 + wait + part + part / 2 + part + 10
    per_event = 1 + 0.28 * (min(spot_nodes, 4) - 1) / 3 if spot_nodes else 1.0
    rate = (nodes * FAIL_PER_NODE_HOUR + (spot_nodes * SPOT_PER_NODE_HOUR / per_event if lossy else 0)) / 3600
    return ideal_h * (1 + d / tau) / (1 - rate * (restart + (tau + d) / 2)) + wait / 3600


def prod_expected(text: str = PROD):
    est = estimate_text(text, "prod", "prod")
    assert est.expected_note == ""
    (fleet,) = est.expected
    return est, fleet


def test_the_prod_fleet_is_priced_at_its_expected_wall_time():
    est, e = prod_expected()
    assert e.fleet == "main" and e.usd_per_hour == pytest.approx(PER_HOUR)
    assert not e.emergency_checkpoint_fits
    assert e.wall_hours == pytest.approx(naive_wall_hours(e.ideal_hours, 4, 3, lossy=True), rel=2e-3)
    # while the 3 spot nodes are awaited the on-demand node bills, and 7.9% of the spot ones (capacity.py)
    wait_h = 12_280 * 3**0.188 / 3600
    assert e.expected_job_usd == pytest.approx(PER_HOUR * e.wall_hours - 3 * 8.6505 * (1 - 0.079) * wait_h)
    assert e.list_job_usd == pytest.approx(PER_HOUR * e.ideal_hours)
    assert e.expected_job_usd > e.list_job_usd
    events = (3 * SPOT_PER_NODE_HOUR / (1 + 0.28 * 2 / 3) + 4 * FAIL_PER_NODE_HOUR) * e.wall_hours  # 2.80
    assert e.interruptions == pytest.approx(events)
    data = est.to_json()
    assert data["expected_job_usd"] == pytest.approx(round(e.expected_job_usd, 2))
    assert data["expected"][0]["assumptions"][-1] == "1 on-demand node(s) are never interrupted, 3 spot"


def test_the_useful_hours_are_what_trainfleet_estimate_says_for_the_same_setup(trainfleet):
    _, e = prod_expected()
    result = trainfleet(
        "estimate", "--model", "llama-13b", "--tokens", "260B", "--seq-len", "4096", "--accelerator", "A100-80GB",
        "--devices", "32", "--zero-stage", "3", "--offload", "none", "--micro-batch", "4",
        "--global-batch", str(4 * 8 * 32 * 4096),  # micro batch x grad_accum x devices x seq_len
        "--instance-type", "p4de.24xlarge", "--json",
    )  # fmt: skip
    assert result.code == 0, result.stderr
    estimate = result.json()
    useful, breakdown = estimate["useful_hours"], estimate["breakdown"]
    # + the evaluation beside the steps, the same share of the useful hours as in estimate's breakdown (no stalls)
    share = breakdown["evaluation_usd"] / breakdown["compute_usd"]
    assert breakdown["data_stalls_usd"] == 0 and 0.002 < share < 0.004
    assert e.ideal_hours == pytest.approx(useful * (1 + share), rel=1e-3)


def test_an_all_on_demand_fleet_only_fails():
    text = re.sub(r"\n *on_demand_(base|percentage_above_base): \d+", "", PROD)
    text = text.replace("purchase: mixed", "purchase: on-demand")
    _, e = prod_expected(text)
    assert e.usd_per_hour == pytest.approx(4 * 27.44705)
    assert e.interruptions == pytest.approx(4 * FAIL_PER_NODE_HOUR * e.wall_hours)
    assert e.wall_hours == pytest.approx(naive_wall_hours(e.ideal_hours, 4, 0, lossy=True), rel=2e-3)


def test_a_setup_that_does_not_fit_says_so_instead_of_a_number():
    """dev declares ZeRO-2 with micro batch 4 on one g5.12xlarge (4 x A10G, 24 GB): the planner's memory model
    (`trainfleet estimate ... --zero-stage 2 --micro-batch 4` refuses it too) says it does not fit."""
    text = (Path(__file__).parent.parent / "stacks" / "Pulumi.dev.yaml").read_text()
    est = estimate_text(text, "dev", "dev")
    assert est.expected == [] and est.expected_job_usd is None
    assert (
        "dev: ZeRO-2, offload none, micro batch 4 does not fit in memory on 1 x g5.12xlarge"
        in est.expected_note
    )


def test_the_preview_table_shows_expected_beside_list(trainfleet):
    result = trainfleet("preview", "--stack", "prod", "--wide")
    assert result.code == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("Expected planned job, fleet main"))
    _, e = prod_expected()
    assert f"${e.expected_job_usd:,.2f}" in line and f"list ${e.list_job_usd:,.2f}" in line
