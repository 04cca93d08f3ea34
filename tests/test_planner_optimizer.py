"""The optimizer is exact over its search space: it agrees with brute force on random small catalogs."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.planner import memory, throughput
from cli.planner.calibration import default_fit
from cli.planner.memory import SHARDINGS
from cli.planner.optimizer import (
    MICRO_BATCHES,
    Request,
    Setup,
    candidate,
    frontier,
    hardware_for,
    meets_bounds,
    micro_batch_allowed,
    node_counts,
    price_points,
    rank,
    search,
)
from cli.planner.presets import PRESETS
from cli.planner.workload import Workload
from infra.catalog import Offer, default_catalog

ACCELERATORS = default_catalog().accelerators
KINDS = [  # (accelerator, per node, memory GiB, vCPUs, RAM GiB)
    ("A100-40GB", 8, 40, 96, 1152), ("A100-80GB", 8, 80, 96, 1152), ("H100-80GB", 8, 80, 192, 2048),
    ("L4", 1, 24, 8, 32), ("L4", 4, 24, 48, 192), ("A10G", 1, 24, 4, 16), ("V100-16GB", 8, 16, 64, 488),
    ("T4", 4, 16, 48, 192), ("B300", 8, 268, 192, 2048),  # B300: no peak TFLOP/s in the catalog
]  # fmt: skip
ZONES = {"aws": {"us-east-1": ["use1-az1", "use1-az2"], "eu-west-1": ["euw1-az1"]},
         "gcp": {"us-central1": ["us-central1-a", "us-central1-b"]}, "azure": {"eastus": [""]}}  # fmt: skip


@st.composite
def offers(draw):
    out = []
    for i in range(draw(st.integers(1, 6))):
        accel, per, mem, vcpus, ram = draw(st.sampled_from(KINDS))
        cloud = draw(st.sampled_from(sorted(ZONES)))
        region = draw(st.sampled_from(sorted(ZONES[cloud])))
        od = draw(st.one_of(st.none(), st.floats(0.3, 60)))
        for zone in draw(
            st.lists(st.sampled_from(ZONES[cloud][region]), min_size=1, max_size=2, unique=True)
        ):
            spot = draw(st.one_of(st.none(), st.floats(0.1, 40)))
            bucket = draw(st.one_of(st.none(), st.integers(0, 4)))
            net = draw(st.sampled_from([None, 25.0, 100.0, 400.0, 3200.0]))
            out.append(Offer(cloud, region, zone, f"type{i}", accel, per, mem, vcpus, ram, od, spot, bucket,
                             "aws-spot-advisor", net, "", "test"))  # fmt: skip
    return out


@st.composite
def requests(draw):
    shape = PRESETS[draw(st.sampled_from(["mpt-125m", "mpt-1b", "llama-7b", "llama-13b", "llama-70b"]))]
    w = Workload(shape, draw(st.sampled_from([10**8, 10**9, 2 * 10**10])),
                 seq_len=draw(st.sampled_from([1024, 2048, 4096])),
                 method=draw(st.sampled_from(["full", "lora"])))  # fmt: skip
    return Request(
        w,
        clouds=draw(st.one_of(st.none(), st.sets(st.sampled_from(sorted(ZONES)), min_size=1).map(frozenset))),
        max_nodes=draw(st.sampled_from([1, 2, 5, 8, 16])),
        deadline_hours=draw(st.one_of(st.none(), st.floats(1, 5000))),
        budget_usd=draw(st.one_of(st.none(), st.floats(10, 200000))),
        purchase=draw(st.sampled_from(["spot", "on-demand", "any"])),
        objective=draw(st.sampled_from(["cost", "time"])),
        time_value_usd_per_hour=draw(st.sampled_from([0.0, 0.0, 50.0])),
    )


def brute_force(req: Request, catalog: list[Offer]):
    """Every point of the search space, fully evaluated, no pruning or caching."""
    fit = default_fit()
    w = req.workload
    best = None
    count = 0
    for offer, purchase, zones in price_points(catalog, req.purchase):
        if req.clouds is not None and offer.cloud not in req.clouds:
            continue
        hw = hardware_for(offer, ACCELERATORS.get(offer.accelerator), w.precision)
        if hw is None:
            continue
        for nodes in node_counts(req.max_nodes):
            for sharding in SHARDINGS:
                for ckpt in (False, True):
                    for mb in MICRO_BATCHES:
                        if not micro_batch_allowed(w, nodes * hw.devices_per_node, mb):
                            continue
                        mem = memory.estimate(w, sharding, mb, ckpt, hw.device_memory_gib, hw.devices_per_node,
                                              nodes, hw.host_memory_gib)  # fmt: skip
                        if not mem.fits:
                            continue
                        step = throughput.step(w, hw, nodes, sharding, mb, ckpt, fit)
                        c = candidate(
                            req, offer, purchase, zones, nodes, hw, Setup(sharding, ckpt, step, mem)
                        )
                        if not c.rel.feasible or not meets_bounds(c, req):
                            continue
                        count += 1
                        if best is None or c.score(req) < best.score(req):
                            best = c
    return best, count


def close(a, b):
    return all(math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9) for x, y in zip(a, b, strict=True))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(catalog=offers(), req=requests())
def test_optimizer_matches_brute_force(catalog, req):
    result = search(req, catalog, ACCELERATORS, default_fit())
    expected, count = brute_force(req, catalog)
    if expected is None:
        assert result.feasible == []
        return
    assert result.feasible, "brute force found a feasible plan the optimizer missed"
    best = rank(result.feasible, req)[0]
    assert close(best.score(req), expected.score(req))
    assert meets_bounds(best, req) and best.nodes <= req.max_nodes
    # the frontier is Pareto-optimal: nothing feasible is both faster and cheaper than a frontier plan
    front = frontier(result.feasible)
    for f in front:
        assert not any(c.wall_hours < f.wall_hours and c.cost_usd < f.cost_usd for c in result.feasible)


def test_search_respects_filters_and_stays_in_one_region():
    w = Workload(PRESETS["llama-7b"], 2 * 10**10)
    req = Request(w, clouds=frozenset({"gcp"}), accelerators=frozenset({"A100-80GB"}), max_nodes=8)
    result = search(req, default_catalog().all_offers, ACCELERATORS, default_fit())
    assert result.feasible
    for c in result.feasible:
        assert c.offer.cloud == "gcp" and c.offer.accelerator == "A100-80GB" and c.nodes <= 8
        zones = {o.zone for o in default_catalog().offers(cloud="gcp", region=c.offer.region)}
        assert set(c.zones) <= zones
