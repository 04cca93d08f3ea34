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
Multi-node plans use one offer, so they stay in one region (and one zone for spot). Spot zones of one region,
instance type and interruption bucket differ only in price: only the cheapest is priced (`search`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from itertools import groupby

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
    storage_usd: float

    @property
    def breakdown(self) -> dict[str, float]:
        """Expected USD by cause (built for the plans shown, not for every candidate searched)."""
        rate, rel = self.price_usd_per_node_hour * self.nodes, self.rel
        return {
            "compute_usd": rate * rel.useful_hours,
            "eval_and_stalls_usd": rate * rel.stall_hours,
            "interruption_loss_usd": rate * rel.interruption_loss_hours,
            "checkpoint_overhead_usd": rate * rel.checkpoint_overhead_hours,
            "storage_usd": self.storage_usd,
            "egress_usd": 0.0,
        }

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
    zones_not_priced: int = 0  # spot zones dearer than another zone of the same region, type and bucket
    pruned: int = 0  # hardware x node counts that could not meet the deadline or budget at any speed
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
                mem = memory.estimate(w, sharding, mb, ckpt, hw.device_memory_gib, hw.devices_per_node, nodes,
                                      hw.host_memory_gib, headroom)  # fmt: skip
                if not mem.fits:
                    break  # activations grow with the micro batch: larger ones do not fit either
                yield Setup(sharding, ckpt, throughput.step(w, hw, nodes, sharding, mb, ckpt, fit), mem)


# At one (recompute, micro batch), a sharding is never faster than one listed for it here when that one fits
# (throughput.py: stages 0, 1 and 2 move the same bytes in the same buckets, and each later stage exposes
# at least as much of it; offload only adds time). It loses the tie-break too, so it need not be evaluated.
# tests/test_planner_optimizer.py holds best_setup to trying every setup.
_Z = {(sh.zero_stage, sh.offload_optimizer, sh.offload_param): sh for sh in SHARDINGS}
DOMINATED_BY: dict[Sharding, tuple[Sharding, ...]] = {
    _Z[1, False, False]: (_Z[0, False, False],),
    _Z[2, False, False]: (_Z[0, False, False], _Z[1, False, False]),
    _Z[2, True, False]: (_Z[0, False, False], _Z[1, False, False], _Z[2, False, False]),
    _Z[3, True, False]: (_Z[3, False, False],),
    _Z[3, True, True]: (_Z[3, False, False], _Z[3, True, False]),
}



def setup_key(s: Setup) -> tuple:
    """Highest tokens/s first; ties: lower ZeRO stage, no offload, no recompute, smaller micro batch."""
    return setup_key_of(s.sharding, s.checkpointing, s.step)


def setup_key_of(sh: Sharding, checkpointing: bool, st: Step) -> tuple:
    return (-st.tokens_per_second, sh.zero_stage, sh.offload_optimizer, sh.offload_param, checkpointing,
            st.micro_batch)  # fmt: skip


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
               headroom: float = memory.DEFAULT_HEADROOM, fixed: FixedSetup | None = None,
               fits: dict | None = None) -> Setup | None:  # fmt: skip
    """The fastest setup that fits, by setup_key: the same as the best of `setups()`, found with less work.

    No sharding can beat the communication-free speed of its (recompute, micro batch), and that bound does
    not depend on the sharding. So the (recompute, micro batch) pairs are tried from the highest bound down,
    each with every sharding it fits, and the search stops at the first pair whose bound is below the best
    found: none after it can beat or tie it. Activations are linear in the micro batch and nothing else in
    device memory depends on it (memory.activation_bytes), so one estimate per (sharding, recompute) gives
    the largest micro batch that fits. `fits` memoizes that across calls of one search: memory does not depend
    on the network, vCPUs or price, so the offers of one accelerator and node shape share it."""
    devices = hw.devices_per_node * nodes
    pinned_mb = fixed.micro_batch if fixed is not None else None
    batches = (pinned_mb,) if pinned_mb else tuple(mb for mb in MICRO_BATCHES if micro_batch_allowed(w, devices, mb))
    shardings = [sh for sh in SHARDINGS if fixed is None or fixed.allows_sharding(sh)]
    fits = {} if fits is None else fits
    pairs_key = ("pairs", hw.accelerator, hw.peak_tflops, devices, batches)  # the bound ignores network and RAM
    pairs = fits.get(pairs_key)
    if pairs is None:
        pairs = fits[pairs_key] = sorted(((throughput.compute_only_tokens_per_second(w, hw, nodes, mb, ckpt, fit),
                                           ckpt, mb) for ckpt in (False, True) for mb in batches),
                                         key=lambda p: -p[0])  # fmt: skip
    comms: dict[int, throughput.Communication] = {}  # index in shardings -> its collectives here
    largest: dict[bool, list[int]] = {}  # recompute -> the largest micro batch each sharding fits

    def largest_fitting(ckpt: bool) -> list[int]:
        if ckpt not in largest:
            shape = ("largest", tuple(shardings), ckpt, hw.device_memory_gib, hw.devices_per_node, nodes,
                     hw.host_memory_gib)  # fmt: skip
            if shape in fits:
                largest[ckpt] = fits[shape]
                return largest[ckpt]
            out = []
            for sh in shardings:
                dpn = hw.devices_per_node
                states = fits.get((sh, dpn, nodes))
                if states is None:
                    states = fits[sh, dpn, nodes] = memory.model_states(w, sh, dpn, nodes)
                host = (sh, dpn, nodes, hw.host_memory_gib)
                if host not in fits:
                    fits[host] = memory.states_fit_host(w, sh, dpn, nodes, hw.host_memory_gib, states)
                device = (sh, ckpt, hw.device_memory_gib, dpn, nodes)
                if device not in fits:  # no host capacity given: the device alone decides
                    fits[device] = memory.largest_micro_batch(w, sh, ckpt, hw.device_memory_gib, dpn, nodes, 0.0,
                                                              headroom, states)  # fmt: skip
                out.append(fits[device] if fits[host] else 0)
            largest[ckpt] = fits[shape] = out
        return largest[ckpt]

    best, best_key = None, None
    for bound, ckpt, mb in pairs:
        if best is not None and bound < best[2].tokens_per_second:
            break
        fitting = {i: sh for i, (sh, most) in enumerate(zip(shardings, largest_fitting(ckpt), strict=True)) if mb <= most}
        for i, sharding in fitting.items():
            if any(d in fitting.values() for d in DOMINATED_BY.get(sharding, ())):
                continue
            if i not in comms:
                comms[i] = throughput.zero_communication(w, hw, nodes, sharding)
            st = throughput.step(w, hw, nodes, sharding, mb, ckpt, fit, comm=comms[i])
            if stats is not None:
                stats.setups_evaluated += 1
            key = setup_key_of(sharding, ckpt, st)
            if best_key is None or key < best_key:
                best, best_key = (sharding, ckpt, st), key
    if best is None:
        return None
    sharding, ckpt, st = best
    return Setup(sharding, ckpt, st, memory.estimate(w, sharding, st.micro_batch, ckpt, hw.device_memory_gib,
                                                     hw.devices_per_node, nodes, hw.host_memory_gib, headroom))


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


def assess_group(w: Workload, hw: Hardware, nodes: int, setup: Setup, cloud: str, purchase: str,
                 bucket: int | None) -> tuple[Reliability, float]:  # fmt: skip
    """(reliability, checkpoint storage USD) shared by every offer of one cloud, purchase and interruption
    bucket on this hardware and node count (storage 0 for a plan refused as unbearable)."""
    useful_h = w.tokens / setup.step.tokens_per_second / 3600
    rel = reliability.assess(useful_h, nodes, hw.devices_per_node, cloud, purchase == "spot", bucket,
                             w.checkpoint_bytes, hw.network_gbits, setup.step.step_s)  # fmt: skip
    return rel, reliability.storage_usd(cloud, w.checkpoint_bytes, rel.wall_hours) if rel.feasible else 0.0


def candidate(req: Request, offer: Offer, purchase: str, zones: tuple[str, ...], nodes: int, hw: Hardware,
              setup: Setup, assessed: dict | None = None) -> Candidate:  # fmt: skip
    """One priced plan. `assessed` memoizes the reliability of (cloud, purchase, bucket) for this hardware and
    node count: the zones and regions of one instance type share it (a pure function of them for one job)."""
    key = (offer.cloud, purchase, offer.interruption_bucket)
    held = assessed.get(key) if assessed is not None else None
    if held is None:
        held = assess_group(req.workload, hw, nodes, setup, *key)
        if assessed is not None:
            assessed[key] = held
    rel, storage = held
    price = offer.price(purchase) or math.inf
    rate = price * nodes
    cost = rate * rel.wall_hours + storage if rel.feasible else math.inf
    if shares_cluster_placement_group(offer.cloud, nodes):
        zones = zones[:1]  # the placement group lives in one zone
    return Candidate(offer, zones, purchase, nodes, hw, setup, rel, price, cost, storage)


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


@dataclass(frozen=True, slots=True)
class Block:
    """Price points that share hardware, node count, setup and reliability (one cloud, purchase and bucket):
    their plans differ only in price, so they are built only when shown (`Search.select`)."""

    hw: Hardware
    nodes: int
    setup: Setup
    assessed: dict  # (cloud, purchase, bucket) -> (Reliability, storage USD): what `candidate` reads
    rel: Reliability
    storage_usd: float
    # (offer, purchase, zones, USD per node-hour, (cloud, region, type, purchase), identity less the nodes)
    points: tuple[tuple, ...]

    def candidate(self, req: Request, point: tuple) -> Candidate:
        offer, purchase, zones = point[:3]
        return candidate(req, offer, purchase, zones, self.nodes, self.hw, self.setup, self.assessed)


@dataclass(frozen=True, slots=True)
class Selection:
    """What the CLI shows of a search: the plans meeting the bounds, counted; the best of each instance type
    and purchase, best first (`top` of them); the cost/time frontier."""

    count: int
    leaders: list[Candidate]
    frontier: list[Candidate]


@dataclass
class Search:
    request: Request
    blocks: list[Block]  # every plan that fits memory, the filters and bearable interruptions
    stats: Stats
    pruned: bool = False  # hardware that could not meet the bounds was skipped (see `search`)

    @cached_property
    def unbounded(self) -> list[Candidate]:
        """Every plan that fits memory and the filters, ignoring deadline and budget."""
        return [b.candidate(self.request, p) for b in self.blocks for p in b.points]

    @cached_property
    def feasible(self) -> list[Candidate]:
        """Every plan meeting all bounds."""
        return [c for c in self.unbounded if meets_bounds(c, self.request)]

    def select(self, top: int, max_hours: float = math.inf) -> Selection:
        """Over the plans that also run at most `max_hours`: how many meet the bounds; the first `top` of
        `rank(feasible)` taken one per (cloud, region, instance type, purchase); the Pareto frontier of (wall
        hours, expected cost), the lexically first plan standing for ties. Computed from prices and hours
        without building every plan: tests/test_planner_optimizer.py holds it to sorting every plan."""
        req = self.request
        deadline = min(max_hours, req.deadline_hours if req.deadline_hours is not None else math.inf)
        budget = req.budget_usd if req.budget_usd is not None else math.inf
        best: dict[tuple, tuple] = {}  # (cloud, region, type, purchase) -> (score, identity, block, point)
        reps: list[tuple] = []  # per block its cheapest plan: (hours, cost, identity, block, point)
        count = 0
        by_time, time_value = req.objective == "time", req.time_value_usd_per_hour
        for b in self.blocks:
            wall = b.rel.wall_hours
            if wall > deadline:
                continue
            per_usd, storage = b.nodes * wall, b.storage_usd
            rep = None
            for point in b.points:
                cost = point[3] * per_usd + storage
                if cost > budget:
                    continue
                count += 1
                score = (wall, cost, 0.0) if by_time else (cost + time_value * wall, wall, cost)
                held = best.get(point[4])
                if held is None or score <= held[0]:
                    ident = (*point[5], b.nodes)
                    if held is None or (score, ident) < held[:2]:
                        best[point[4]] = (score, ident, b, point)
                if rep is None or cost <= rep[1]:
                    ident = (*point[5], b.nodes)
                    if rep is None or (cost, ident) < rep[1:3]:
                        rep = (wall, cost, ident, b, point)
            if rep is not None:
                reps.append(rep)
        ranked = sorted(best.values(), key=lambda e: e[:2])[:top]
        front = [b.candidate(req, point) for _, _, _, b, point in pareto(reps)]
        return Selection(count, [b.candidate(req, point) for _, _, b, point in ranked], front)


def pareto(plans: Iterable[tuple]) -> list[tuple]:
    """Of (hours, cost, identity, ...) tuples, those no other is both faster and cheaper than, fastest first:
    each kept only when strictly cheaper than every faster one; of equal (hours, cost), the least identity."""
    front, cheapest = [], math.inf
    for (_, cost), same in groupby(sorted(plans, key=lambda r: r[:2]), key=lambda r: r[:2]):
        if cost < cheapest:
            front.append(min(same, key=lambda r: r[2]))
            cheapest = cost
    return front


def search(req: Request, offers: Iterable[Offer], accelerators: dict[str, Accelerator], fit: Fit,
           prune: bool = True) -> Search:  # fmt: skip
    """Every plan in the search space (`blocks`). With `prune`, hardware and node counts that cannot meet the
    deadline or budget even at their communication-free speed are not evaluated: the plans meeting the bounds
    are the same, but `unbounded` then lacks those that miss them (`impossible` searches again without)."""
    stats = Stats()
    w = req.workload
    pool = filtered_offers(offers, req, stats)
    # Spot zones of one region, type and interruption bucket share hardware, setup and wall time: only the
    # cheapest (then the lexically first) can be best, a runner-up or on the frontier, so only it is priced.
    cheapest: dict[tuple, tuple[Offer, str, tuple[str, ...]]] = {}
    points = price_points(pool, req.purchase)
    for offer, purchase, zones in points:
        k = (offer.cloud, offer.region, offer.instance_type, purchase, offer.interruption_bucket)
        held = cheapest.get(k)
        if held is None or (offer.price(purchase), offer.zone) < (held[0].price(purchase), held[0].zone):
            cheapest[k] = (offer, purchase, zones)
    stats.zones_not_priced = len(points) - len(cheapest)
    # hardware -> (cloud, purchase, bucket) -> its price points: one setup per hardware and node count, one
    # reliability per group
    by_hardware: dict[Hardware, dict[tuple, list[tuple]]] = {}
    for offer, purchase, zones in cheapest.values():
        hw = hardware_for(offer, accelerators.get(offer.accelerator), w.precision)
        if hw is None:
            stats.skip(f"no peak TFLOP/s for {w.precision} or unknown accelerator")
            continue
        stats.price_points += 1
        group = by_hardware.setdefault(hw, {}).setdefault((offer.cloud, purchase, offer.interruption_bucket), [])
        group.append((offer, purchase, zones, offer.price(purchase) or math.inf,
                      (offer.cloud, offer.region, offer.instance_type, purchase),
                      (offer.cloud, offer.region, offer.zone, offer.instance_type, purchase)))  # fmt: skip
    blocks: list[Block] = []
    counts = node_counts(req.max_nodes)
    fits: dict = {}
    for hw, groups in by_hardware.items():
        cheapest_rate = min(point[3] for group in groups.values() for point in group)
        for nodes in counts:
            if prune and not can_meet_bounds(req, hw, nodes, cheapest_rate, fit):
                stats.pruned += 1
                continue
            stats.hardware_evaluated += 1
            setup = best_setup(w, hw, nodes, fit, stats, req.memory_headroom, fits=fits)
            if setup is None:
                continue
            assessed: dict[tuple, tuple[Reliability, float]] = {}  # one per (cloud, purchase, bucket) here
            for key, group in groups.items():
                rel, storage = assessed[key] = assess_group(w, hw, nodes, setup, *key)
                stats.candidates += len(group)
                if not rel.feasible:
                    stats.unbearable += len(group)
                    continue
                blocks.append(Block(hw, nodes, setup, assessed, rel, storage, tuple(group)))
    return Search(req, blocks, stats, pruned=prune and stats.pruned > 0)


def can_meet_bounds(req: Request, hw: Hardware, nodes: int, cheapest_usd_per_node_hour: float, fit: Fit) -> bool:
    """Whether any plan on this hardware and node count could meet the deadline and budget: at the fastest
    communication-free speed of any micro batch (an upper bound on every setup's speed) the useful hours
    alone are a lower bound on the wall time, and those hours at the cheapest price on the cost."""
    if req.deadline_hours is None and req.budget_usd is None:
        return True
    w = req.workload
    devices = hw.devices_per_node * nodes
    fastest = max(throughput.compute_only_tokens_per_second(w, hw, nodes, mb, ckpt, fit)
                  for ckpt in (False, True) for mb in MICRO_BATCHES if micro_batch_allowed(w, devices, mb))  # fmt: skip
    hours = w.tokens / fastest / 3600
    if req.deadline_hours is not None and hours > req.deadline_hours:
        return False
    return req.budget_usd is None or cheapest_usd_per_node_hour * nodes * hours <= req.budget_usd


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
