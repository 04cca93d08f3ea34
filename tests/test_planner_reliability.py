"""Spot/failure model: hazards from the catalog buckets, notice windows, Young/Daly, expected wall time."""

from __future__ import annotations

import math
import random

import pytest

from cli.planner import reliability as rel
from infra.catalog.interruption import InterruptionRate, aws_bucket_rate


def simulate_wall(useful_s, tau, write_s, restart_s, mtbf_s, runs, seed=7):
    """Monte Carlo of periodic checkpointing under exponential failures (Daly's model, event by event)."""
    rng = random.Random(seed)
    total = 0.0
    for _ in range(runs):
        t, done = 0.0, 0.0
        next_fail = rng.expovariate(1 / mtbf_s)
        while done < useful_s - 1e-9:
            segment = min(tau, useful_s - done) + write_s
            if next_fail >= t + segment:
                t += segment
                done += min(tau, useful_s - done)
            else:
                t = next_fail  # the segment's work is lost
                # restart (failures can also strike while restarting: Daly's e^(R/M) term)
                while True:
                    nxt = t + rng.expovariate(1 / mtbf_s)
                    if nxt >= t + restart_s:
                        t += restart_s
                        next_fail = nxt
                        break
                    t = nxt
        total += t
    return total / runs


@pytest.mark.parametrize("mtbf_h,write_s,restart_s", [(10, 120, 600), (2, 300, 900), (50, 30, 300)])
def test_daly_expected_wall_matches_simulation(mtbf_h, write_s, restart_s):
    mtbf = mtbf_h * 3600
    useful = 40 * 3600
    tau = rel.daly_interval(write_s, mtbf)
    predicted = rel.daly_wall(useful, tau, write_s, restart_s, mtbf)
    simulated = simulate_wall(useful, tau, write_s, restart_s, mtbf, runs=400)
    assert predicted == pytest.approx(simulated, rel=0.03)


def test_daly_interval_is_the_minimum_of_expected_wall():
    mtbf, write, restart = 8 * 3600.0, 200.0, 600.0
    tau = rel.daly_interval(write, mtbf)
    assert tau == pytest.approx(math.sqrt(2 * write * mtbf), rel=0.1)  # Young's first order
    best = rel.daly_wall(3600 * 100, tau, write, restart, mtbf)
    for factor in (0.5, 0.8, 1.25, 2.0):
        assert rel.daly_wall(3600 * 100, tau * factor, write, restart, mtbf) > best


def test_hazard_follows_the_advisor_bucket():
    rates = [rel.spot_hazard(aws_bucket_rate(b)) for b in range(5)]
    assert rates == sorted(rates) and rates[0] > 0
    # 12.5% of instances interrupted per month -> about 1 in 5,500 node-hours
    assert rel.spot_hazard(aws_bucket_rate(2)) == pytest.approx(-math.log(1 - 0.125) / 730)
    assert rel.spot_hazard(aws_bucket_rate(0)) == pytest.approx(-math.log(1 - 0.025) / 730)  # "<5%": the middle
    assert rel.spot_hazard(aws_bucket_rate(4)) == pytest.approx(-math.log(1 - 0.25) / 730)  # ">20%": 25%
    assert rel.spot_hazard(None) == rel.spot_hazard(aws_bucket_rate(4))  # unknown is taken as the worst bucket


def test_an_hourly_eviction_rate_is_a_hazard_per_hour():
    """Azure quotes eviction rates per hour (spot-vms.md: "10% ... within the next hour"): 0-5% is a 2.5% chance
    per node-hour, 730 times the monthly reading of the same figures, and 20+% is taken as 25% per hour."""
    hourly = InterruptionRate(0.0, 0.05, 1.0)
    assert rel.spot_hazard(hourly) == pytest.approx(-math.log(1 - 0.025))  # 0.02532 per node-hour
    assert rel.spot_hazard(hourly) == pytest.approx(730 * rel.spot_hazard(aws_bucket_rate(0)))
    assert rel.spot_hazard(InterruptionRate(0.20, None, 1.0)) == pytest.approx(-math.log(0.75))
    assert hourly.label == "0-5%/hour" and aws_bucket_rate(0).label == "<5%/month"
    assert InterruptionRate(0.20, None, 1.0).label == ">20%/hour"


def assess(**kw):
    args = dict(useful_hours=100.0, nodes=8, devices_per_node=8, cloud="aws", spot=True,
                interruption=aws_bucket_rate(2), checkpoint_bytes=14 * 7e9, node_network_gbits=400.0, step_s=5.0)  # fmt: skip
    args.update(kw)
    return rel.assess(**args)


def test_emergency_checkpoint_is_the_nodes_protocol_worked_by_hand():
    # 7B full training, 98 GB over 8 nodes: 12.25 GB each. AWS: step 5 s + save 12.25/2 + upload 12.25/1.0 + commit 10
    aws = assess()
    assert aws.times.emergency_s == pytest.approx(5 + 6.125 + 12.25 + 10)
    assert aws.emergency_checkpoint_fits  # 33.4 s of 120 s
    # GCS at 0.35 GB/s per node: 5 + 6.125 + 35 + 10 = 56.1 s, more than GCP's 30 s
    gcp = assess(cloud="gcp")
    assert gcp.times.emergency_s == pytest.approx(5 + 6.125 + 12.25 / 0.35 + 10)
    assert not gcp.emergency_checkpoint_fits
    assert gcp.wall_hours > aws.wall_hours  # losing work costs more
    # 13B (182 GB, the case) on AWS: 4 nodes fit (10 + 22.75 + 45.5 + 10 = 88.25 s), 2 do not (156.5 s)
    assert assess(checkpoint_bytes=182e9, nodes=4, step_s=10.0).times.emergency_s == pytest.approx(88.25)
    assert assess(checkpoint_bytes=182e9, nodes=4, step_s=10.0).emergency_checkpoint_fits
    assert not assess(checkpoint_bytes=182e9, nodes=2, step_s=10.0).emergency_checkpoint_fits
    # a long step alone can miss the notice: the trainer must finish it first
    assert not assess(step_s=100.0).emergency_checkpoint_fits


def test_upload_rate_per_node_is_capped_by_the_account_and_the_nic():
    assert rel.upload_gbps_per_node("aws", 8, 400.0) == 1.0
    assert rel.upload_gbps_per_node("aws", 8, 10.0) == pytest.approx(10 / 8 / 2)  # half a 10 Gbit/s NIC
    assert rel.upload_gbps_per_node("gcp", 35, None) == 0.35
    assert rel.upload_gbps_per_node("gcp", 36, None) == 0.19  # Dataflux at hundreds of nodes
    assert rel.upload_gbps_per_node("azure", 64, None) == pytest.approx(7.5 / 64)  # one account's 60 Gbit/s


def test_periodic_checkpoints_block_only_for_the_local_save_and_lose_the_upload_lag():
    r = assess(cloud="gcp")
    assert r.checkpoint_write_s == pytest.approx(6.125)
    # restart: provision 900 s + download own part 35 s + load 6.125 s + the not-yet-durable lag 35 + 10 s
    assert r.restart_s == pytest.approx(900 + 35 + 6.125 + 35 + 10)


def test_job_hazard_scales_with_nodes_and_spot_costs_time():
    small, large = assess(nodes=2), assess(nodes=64)
    spot, fail = -math.log(1 - 0.125) / 730, 8 * 5e-5  # bucket 2's 12.5% a month; 8 devices a node
    # failures strike each node alone; spot interruption events take 1 + 0.28 (N - 1)/3 nodes, 1.28 from 4 up
    assert small.expected_interruptions / small.wall_hours == pytest.approx(2 * (spot / (1 + 0.28 / 3) + fail))
    assert large.expected_interruptions / large.wall_hours == pytest.approx(64 * (spot / 1.28 + fail))
    on_demand = assess(spot=False)
    assert on_demand.spot_hazard_per_node_hour == 0
    assert on_demand.wall_hours < assess().wall_hours
    for r in (small, large, on_demand):
        assert r.wall_hours > r.useful_hours
        parts = r.worked_hours + r.checkpoint_overhead_hours + r.interruption_loss_hours
        assert parts == pytest.approx(r.wall_hours, rel=1e-9)


def test_unbearable_interruption_load_is_infeasible():
    # 1024 nodes in the worst bucket with 30 s notice and a huge checkpoint: restarts never end
    r = assess(nodes=1024, interruption=aws_bucket_rate(4), cloud="gcp", checkpoint_bytes=1e16, node_network_gbits=10)
    assert not r.feasible and math.isinf(r.wall_hours)


def test_deepspeed_parts_replace_the_even_split_worked_by_hand():
    """Issue 29: 7B bf16 ZeRO-2 on 8 nodes x 8 GPUs. Data-parallel rank 0 writes the 16-bit model (2 x 7e9 bytes)
    beside its ranks' optimizer shards (12 x 7e9 / 8 per node): node 0 saves 14 + 10.5 = 24.5 GB, not 98 / 8 =
    12.25, and every node restores 24.5 GB (its shards and the model every rank loads). GCS: 0.35 GB/s."""
    parts = rel.layout_parts(7_000_000_000, 2, "bf16", 1, 1, 8, 8, 32)
    assert parts.saved_bytes == pytest.approx(24.5e9) and parts.restored_bytes == pytest.approx(24.5e9)
    r = assess(cloud="gcp", parts=parts)
    assert r.checkpoint_write_s == pytest.approx(24.5 / 2)
    assert r.times.emergency_s == pytest.approx(5 + 12.25 + 24.5 / 0.35 + 10)
    # restart: provision 900 s + download 24.5 GB at 0.35 GB/s + load it at 2 GB/s + the lag 70 + 10 s
    assert r.restart_s == pytest.approx(900 + 70 + 12.25 + 70 + 10)
    # the even split of the same bytes (what the planner assumed before) is the float form
    even = assess(cloud="gcp")
    assert even.checkpoint_write_s == pytest.approx(6.125) and r.wall_hours > even.wall_hours


def test_the_wait_for_the_first_nodes_never_decides_feasibility():
    """A third of the running time must be useful work; the wait for the first full set of nodes is not running
    time. 1.5 h of work on one spot node: feasible alike with no wait and with a 3.4 h wait, which only adds to the
    wall time (worked: the same Daly wall, plus the wait)."""
    common = dict(useful_hours=1.5, nodes=1, devices_per_node=8, cloud="aws", spot=True, interruption=None,
                  checkpoint_bytes=156e9, node_network_gbits=None, step_s=227.0)  # fmt: skip
    without = rel.assess(**common)
    waiting = rel.assess(**common, capacity_wait_s=3.4 * 3600)
    assert without.feasible and waiting.feasible
    assert waiting.daly_hours > without.daly_hours  # restarts wait for a node too
    assert waiting.wall_hours >= waiting.daly_hours + 3.4  # and the start waits for it
    assert 1.5 < waiting.wall_hours / 3  # so counting the start wait in would have refused it
