"""The optimizer: every (offer, node count, purchase) with the best DeepSpeed setup for its hardware.

Search space: catalog offers that pass the filters and have a price for the purchase option (spot per
zone, on-demand per region) x NODE_COUNTS up to --max-nodes x SHARDINGS x activation checkpointing
on/off x MICRO_BATCHES (one sequence, or more while a micro-step over all devices stays within the
global batch). A candidate is feasible when it fits device and host memory, meets the deadline,
the budget, and its interruption load is bearable. The objective is expected cost, wall time, or
cost + time-value x hours.

Why the search is exact though it evaluates far less than the product: for a fixed offer, node count
and purchase, the expected wall time and cost depend on the DeepSpeed setup only through useful hours
(tokens / tokens per second) and the step time an emergency checkpoint waits for: checkpoint size, hazards
and restart time do not depend on it, wall time (Daly) and cost are increasing in both, and the step time
(tokens per step / tokens per second, tokens per step being the global batch) is shortest for the fastest
setup too, up to the rounding of grad accumulation. So the setup with the highest tokens/s on
that hardware and node count is best for every objective and every bound; `best_setup` finds it once
per distinct hardware and node count. tests/test_planner_optimizer.py checks this against brute force.
Multi-node plans use one offer, so they stay in one region (and one zone for spot).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from cli.planner import memory, reliability, throughput
from cli.planner.calibration import Fit
from cli.planner.memory import SHARDINGS, MemoryEstimate, Sharding
from cli.planner.reliability import Reliability
from cli.planner.throughput import Hardware, Step
from cli.planner.workload import Workload
from infra.catalog import Accelerator, Offer
from infra.placement import shares_cluster_placement_group

NODE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
MICRO_BATCHES = (1, 2, 4, 8, 16, 32, 64)
MAX_MICRO_TOKENS = 65536  # the largest micro-batch the calibration table covers
# Accelerators DeepSpeed's CUDA/HPU launch cannot drive (they need their own SDKs).
UNSUPPORTED = {"Trainium1": "Neuron SDK", "Trainium2": "Neuron SDK", "Qualcomm-AI100": "Qualcomm SDK",
               "Radeon-MI25": "ROCm too old for DeepSpeed"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Request:
    workload: Workload
    clouds: frozenset[str] | None = None
    regions: frozenset[str] | None = None
    accelerators: frozenset[str] | None = None
    max_nodes: int = 64
    deadline_hours: float | None = None
    budget_usd: float | None = None
    purchase: str = "any"  # spot | on-demand | any
    objective: str = "cost"  # cost | time
    time_value_usd_per_hour: float = 0.0
    local_zones: bool = False  # AWS Local Zones need an account opt-in; plan in them only when asked
    memory_headroom: float = memory.DEFAULT_HEADROOM  # share of device memory every plan leaves available


@dataclass(frozen=True, slots=True)
class Setup:
    """The DeepSpeed setup chosen for one hardware and node count."""

    sharding: Sharding
    checkpointing: bool
    step: Step
    memory: MemoryEstimate


@dataclass(frozen=True, slots=True)
class Candidate:
    offer: Offer
    zones: tuple[str, ...]
    purchase: str
    nodes: int
    hardware: Hardware
    setup: Setup
    rel: Reliability
    price_usd_per_node_hour: float
    cost_usd: float
    breakdown: dict[str, float]

    @property
    def wall_hours(self) -> float:
        return self.rel.wall_hours

    @property
    def devices(self) -> int:
        return self.nodes * self.hardware.devices_per_node

    @property
    def checkpoint_interval_minutes(self) -> float:
        """The Young/Daly interval as the stack file states it (0.1 min steps, at least 1 min)."""
        return max(1.0, round(self.rel.interval_s / 60, 1))

    def score(self, req: Request) -> tuple[float, float, float]:
        if req.objective == "time":
            return (self.wall_hours, self.cost_usd, 0.0)
        return (self.cost_usd + req.time_value_usd_per_hour * self.wall_hours, self.wall_hours, self.cost_usd)

    def identity(self) -> tuple:
        """A deterministic tie-break: same score -> the lexically first offer."""
        o = self.offer
        return (o.cloud, o.region, o.zone, o.instance_type, self.purchase, self.nodes)


@dataclass
class Stats:
    offers_considered: int = 0
    offers_skipped: dict[str, int] = field(default_factory=dict)
    hardware_evaluated: int = 0
    price_points: int = 0  # offer x purchase pairs with usable hardware
    unbearable: int = 0  # fit memory but interruptions would dominate the run
    setups_evaluated: int = 0
    candidates: int = 0

    def skip(self, why: str) -> None:
        self.offers_skipped[why] = self.offers_skipped.get(why, 0) + 1


def hardware_for(offer: Offer, accel: Accelerator | None, precision: str) -> Hardware | None:
    if accel is None or offer.accelerators_per_node < 1 or offer.accelerator_memory_gib <= 0:
        return None
    peak = accel.peak(precision)
    if not peak:
        return None
    return Hardware(offer.accelerator, peak, offer.accelerators_per_node, offer.accelerator_memory_gib,
                    offer.memory_gib, offer.vcpus, offer.network_gbps, offer.fabric)  # fmt: skip


def micro_batch_allowed(w: Workload, devices: int, mb: int) -> bool:
    """Micro batches the search may use: one sequence always; more only while one micro-step over all
    devices stays within the global batch (the optimizer never grows the batch the user trains with)
    and within the calibrated range of tokens per micro-batch."""
    if mb == 1:
        return True
    return mb * w.seq_len <= MAX_MICRO_TOKENS and mb * w.seq_len * devices <= w.global_batch_tokens


def setups(w: Workload, hw: Hardware, nodes: int, fit: Fit, headroom: float = memory.DEFAULT_HEADROOM,
           micro_batch: int | None = None) -> Iterable[Setup]:  # fmt: skip
    """Every setup in the search space that fits memory with `headroom` of it left (the brute-force view);
    with `micro_batch`, only that micro batch (which may be outside MICRO_BATCHES)."""
    devices = hw.devices_per_node * nodes
    for sharding in SHARDINGS:
        for ckpt in (False, True):
            for mb in (micro_batch,) if micro_batch else MICRO_BATCHES:
                if not micro_batch and not micro_batch_allowed(w, devices, mb):
                    break
                mem = _memory(w, sharding, mb, ckpt, hw.device_memory_gib, hw.devices_per_node, nodes,
                              hw.host_memory_gib, headroom)  # fmt: skip
                if not mem.fits:
                    break  # activations grow with the micro batch: larger ones do not fit either
                yield Setup(sharding, ckpt, throughput.step(w, hw, nodes, sharding, mb, ckpt, fit), mem)


# Memory does not depend on the network, vCPUs or price: the offers of one accelerator and node size share it.
_memory = lru_cache(maxsize=1 << 16)(memory.estimate)


def setup_key(s: Setup) -> tuple:
    """Highest tokens/s first; ties: lower ZeRO stage, no offload, no recompute, smaller micro batch."""
    sh = s.sharding
    return (-s.step.tokens_per_second, sh.zero_stage, sh.offload_optimizer, sh.offload_param,
            s.checkpointing, s.step.micro_batch)  # fmt: skip


@dataclass(frozen=True, slots=True)
class FixedSetup:
    """What `trainfleet estimate` lets the user pin (None: searched)."""

    zero_stage: int | None = None
    offload: str | None = None  # none | optimizer | optimizer+params
    micro_batch: int | None = None

    def allows_sharding(self, sh: Sharding) -> bool:
        offload = "optimizer+params" if sh.offload_param else "optimizer" if sh.offload_optimizer else "none"
        return (self.zero_stage is None or sh.zero_stage == self.zero_stage) and (
            self.offload is None or offload == self.offload
        )


def best_setup(w: Workload, hw: Hardware, nodes: int, fit: Fit, stats: Stats | None = None,
               headroom: float = memory.DEFAULT_HEADROOM, fixed: FixedSetup | None = None) -> Setup | None:  # fmt: skip
    """The fastest setup that fits (setup_key order), the same as the best of `setups()`: a setup is skipped
    only when even its communication-free speed is below the best found, which it can then never beat."""
    devices = hw.devices_per_node * nodes
    pinned_mb = fixed.micro_batch if fixed is not None else None
    best, best_key = None, None
    for sharding in SHARDINGS:
        if fixed is not None and not fixed.allows_sharding(sharding):
            continue
        for ckpt in (False, True):
            for mb in (pinned_mb,) if pinned_mb else MICRO_BATCHES:
                if not pinned_mb and not micro_batch_allowed(w, devices, mb):
                    break
                if best is not None and throughput.compute_only_tokens_per_second(w, hw, nodes, mb, ckpt, fit) < (
                    best.step.tokens_per_second
                ):
                    continue
                mem = _memory(w, sharding, mb, ckpt, hw.device_memory_gib, hw.devices_per_node, nodes,
                              hw.host_memory_gib, headroom)  # fmt: skip
                if not mem.fits:
                    break  # activations grow with the micro batch: larger ones do not fit either
                s = Setup(sharding, ckpt, throughput.step(w, hw, nodes, sharding, mb, ckpt, fit), mem)
                if stats is not None:
                    stats.setups_evaluated += 1
                key = setup_key(s)
                if best_key is None or key < best_key:
                    best, best_key = s, key
    return best


def price_points(offers: Iterable[Offer], purchase: str) -> list[tuple[Offer, str, tuple[str, ...]]]:
    """(offer, purchase, zones): spot per zone; on-demand once per region (price is regional)."""
    out: list[tuple[Offer, str, tuple[str, ...]]] = []
    offers = list(offers)
    if purchase in ("spot", "any"):
        out += [(o, "spot", (o.zone,) if o.zone else ()) for o in offers if o.spot_usd_per_hour]
    if purchase in ("on-demand", "any"):
        regional: dict[tuple[str, str, str], list[Offer]] = {}
        for o in offers:
            if o.on_demand_usd_per_hour:
                regional.setdefault((o.cloud, o.region, o.instance_type), []).append(o)
        for group in regional.values():
            group.sort(key=lambda o: o.zone)
            out.append((group[0], "on-demand", tuple(o.zone for o in group if o.zone)))
    return out


def candidate(req: Request, offer: Offer, purchase: str, zones: tuple[str, ...], nodes: int, hw: Hardware,
              setup: Setup, assessed: dict | None = None) -> Candidate:  # fmt: skip
    """One priced plan. `assessed` memoizes the reliability of (hardware, nodes, cloud, purchase, bucket):
    the zones and regions of one instance type share it, and it is a pure function of them for one job."""
    w = req.workload
    key = (hw, nodes, offer.cloud, purchase, offer.interruption_bucket)
    rel = assessed.get(key) if assessed is not None else None
    if rel is None:
        useful_h = w.tokens / setup.step.tokens_per_second / 3600
        rel = reliability.assess(useful_h, nodes, hw.devices_per_node, offer.cloud, purchase == "spot",
                                 offer.interruption_bucket, w.checkpoint_bytes, hw.network_gbits,
                                 setup.step.step_s)  # fmt: skip
        if assessed is not None:
            assessed[key] = rel
    price = offer.price(purchase) or math.inf
    rate = price * nodes
    storage = (
        reliability.storage_usd(offer.cloud, w.checkpoint_bytes, rel.wall_hours) if rel.feasible else 0.0
    )
    breakdown = {
        "compute_usd": rate * rel.useful_hours,
        "eval_and_stalls_usd": rate * rel.stall_hours,
        "interruption_loss_usd": rate * rel.interruption_loss_hours,
        "checkpoint_overhead_usd": rate * rel.checkpoint_overhead_hours,
        "storage_usd": storage,
        "egress_usd": 0.0,
    }
    cost = rate * rel.wall_hours + storage if rel.feasible else math.inf
    if shares_cluster_placement_group(offer.cloud, nodes):
        zones = zones[:1]  # the placement group lives in one zone
    return Candidate(offer, zones, purchase, nodes, hw, setup, rel, price, cost, breakdown)


def filtered_offers(offers: Iterable[Offer], req: Request, stats: Stats) -> list[Offer]:
    out = []
    for o in offers:
        stats.offers_considered += 1
        if req.clouds is not None and o.cloud not in req.clouds:
            stats.skip("cloud not allowed")
        elif req.regions is not None and o.region not in req.regions:
            stats.skip("region not allowed")
        elif req.accelerators is not None and o.accelerator not in req.accelerators:
            stats.skip("accelerator not allowed")
        elif o.local_zone and not req.local_zones:
            stats.skip("AWS Local Zone (opt in with --local-zones)")
        elif o.accelerator in UNSUPPORTED:
            stats.skip(f"{o.accelerator} needs the {UNSUPPORTED[o.accelerator]}, not DeepSpeed")
        else:
            out.append(o)
    return out


def node_counts(max_nodes: int) -> list[int]:
    counts = [n for n in NODE_COUNTS if n <= max_nodes]
    if max_nodes not in counts and max_nodes <= NODE_COUNTS[-1]:
        counts.append(max_nodes)
    return sorted(counts)


@dataclass
class Search:
    request: Request
    feasible: list[Candidate]  # every candidate meeting all bounds
    unbounded: list[Candidate]  # fits memory and the filters, ignoring deadline and budget
    stats: Stats


def search(req: Request, offers: Iterable[Offer], accelerators: dict[str, Accelerator], fit: Fit) -> Search:
    stats = Stats()
    w = req.workload
    pool = filtered_offers(offers, req, stats)
    hw_cache: dict[tuple, Setup | None] = {}
    assessed: dict[tuple, Reliability] = {}
    unbounded: list[Candidate] = []
    counts = node_counts(req.max_nodes)
    for offer, purchase, zones in price_points(pool, req.purchase):
        hw = hardware_for(offer, accelerators.get(offer.accelerator), w.precision)
        if hw is None:
            stats.skip(f"no peak TFLOP/s for {w.precision} or unknown accelerator")
            continue
        stats.price_points += 1
        for nodes in counts:
            key = (hw, nodes)
            if key not in hw_cache:
                stats.hardware_evaluated += 1
                hw_cache[key] = best_setup(w, hw, nodes, fit, stats, req.memory_headroom)
            setup = hw_cache[key]
            if setup is None:
                continue
            c = candidate(req, offer, purchase, zones, nodes, hw, setup, assessed)
            stats.candidates += 1
            if c.rel.feasible:
                unbounded.append(c)
            else:
                stats.unbearable += 1
    feasible = [c for c in unbounded if meets_bounds(c, req)]
    return Search(req, feasible, unbounded, stats)


def meets_bounds(c: Candidate, req: Request) -> bool:
    if req.deadline_hours is not None and c.wall_hours > req.deadline_hours:
        return False
    return req.budget_usd is None or c.cost_usd <= req.budget_usd


def rank(cands: Iterable[Candidate], req: Request) -> list[Candidate]:
    return sorted(cands, key=lambda c: (c.score(req), c.identity()))


def alternatives(ranked: list[Candidate], top: int) -> list[Candidate]:
    """The runners-up after the best, one per (cloud, region, instance type, purchase)."""
    seen, out = set(), []
    for c in ranked:
        k = (c.offer.cloud, c.offer.region, c.offer.instance_type, c.purchase)
        if k in seen:
            continue
        seen.add(k)
        out.append(c)
        if len(out) >= top:
            break
    return out[1:]


def frontier(cands: Iterable[Candidate]) -> list[Candidate]:
    """Pareto-optimal (wall hours, expected cost): no other plan is both faster and cheaper."""
    out: list[Candidate] = []
    best_cost = math.inf
    for c in sorted(cands, key=lambda c: (c.wall_hours, c.cost_usd, c.identity())):
        if c.cost_usd < best_cost:
            out.append(c)
            best_cost = c.cost_usd
    return out
