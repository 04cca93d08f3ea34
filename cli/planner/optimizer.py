"""The optimizer: every (offer, node count, purchase) with the best DeepSpeed setup for its hardware.

Search space: catalog offers that pass the filters and have a price for the purchase option (spot per
zone, on-demand per region) x NODE_COUNTS up to --max-nodes x SHARDINGS x activation checkpointing
on/off x micro batches (`micro_batches`: each divisor of a data-parallel rank's share of the global batch, which
is then trained exactly). A candidate is feasible when it fits device and host memory, meets the deadline,
the budget, and its interruption load is bearable. The objective is expected cost, wall time, or
cost + time-value x hours.

Why the search is exact though it evaluates far less than the product: for a fixed offer, node count
and purchase, the expected wall time and cost depend on the DeepSpeed setup only through useful hours
(tokens / tokens per second), the step time an emergency checkpoint waits for, and how its checkpoint lies
over the nodes (`checkpoint_parts`: the largest part a node saves, the most a node restores, the whole; set by
the ZeRO stage and the TP x PP layout, infra/checkpoint_layout.py). Hazards do not depend on it, and wall time
(Daly) and cost are increasing in each of those. Among setups whose checkpoints lie alike, the step time
(tokens per step / tokens per second, tokens per step being the global batch) is shortest for the fastest
setup too, up to the rounding of grad accumulation, so the setup with the highest tokens/s is best for every
objective and every bound; `setup_options` finds it once per distinct hardware, node count and checkpoint
split (`checkpoint_key`, which tells the splits apart without listing their files; `best_setup`, the fastest of
all, is the first of them). Each cloud, purchase, interruption rate and capacity prices those few options,
fastest first, and keeps the one with the least wall time, stopping at the first whose useful hours alone reach
it: storage is priced on the workload's checkpoint bytes, the same for every setup, so at every price the
shortest run is the cheapest. tests/test_planner_optimizer.py checks this against brute force.
What the CLI shows of the plans (`Search.select`) needs only some fleets (hardware x node count): `search` with
`shown` skips those whose lower bounds cannot show (cli/planner/standing.py).
Multi-node plans use one offer, so they stay in one region (and one zone for spot). Spot zones of one region,
instance type and interruption rate differ only in price: only the cheapest is priced (`search`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache, cached_property
from itertools import groupby

from cli.planner import memory, reliability, throughput
from cli.planner.batch import split_fix, split_problem
from cli.planner.calibration import Fit
from cli.planner.capacity import FULL, Capacity, spot_capacity
from cli.planner.memory import SHARDINGS, MemoryEstimate, Sharding
from cli.planner.outliers import conservative_spot
from cli.planner.reliability import Reliability
from cli.planner.standing import Shown, Standing
from cli.planner.throughput import Hardware, Step
from cli.planner.workload import Workload
from infra.catalog import Accelerator, Offer
from infra.catalog.capacity import PlacementScores
from infra.catalog.interruption import InterruptionRate
from infra.catalog.model import NOT_DEEPSPEED
from infra.checkpoint_layout import parts_key
from infra.parallelism import TP_SIZES, divisors, sequence_split_error, unsupported
from infra.placement import shares_cluster_placement_group

NODE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
MAX_MICRO_BATCH = 64  # sequences per device per micro-step the search tries at most
MAX_MICRO_TOKENS = 65536  # the largest micro-batch the calibration table covers


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
    # --elastic: (min_nodes, wait s) of checkpoint.elastic, priced for every plan it applies to (pure data parallel,
    # a usable smaller node count: infra/elastic.py); the others are priced without it. Each hardware, node count and
    # checkpoint split keeps its fastest setup: a slower pure data-parallel one that elastic recovery would make
    # cheaper is not sought
    elastic: tuple[int, float] | None = None


@dataclass(frozen=True, slots=True)
class Setup:
    """The DeepSpeed setup chosen for one hardware and node count."""

    sharding: Sharding
    checkpointing: bool
    step: Step
    memory: MemoryEstimate

    @property
    def tp(self) -> int:
        return self.step.tp

    @property
    def pp(self) -> int:
        return self.step.pp


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
    capacity: Capacity = FULL  # whether the spot nodes can be had (cli/planner/capacity.py)

    @property
    def breakdown(self) -> dict[str, float]:
        """Expected USD by cause (built for the plans shown, not for every candidate searched)."""
        rate, rel = self.price_usd_per_node_hour * self.nodes, self.rel
        return {
            "compute_usd": rate * rel.useful_hours,
            "evaluation_usd": rate * rel.eval_hours,
            "data_stalls_usd": rate * rel.data_stall_hours,
            "interruption_loss_usd": rate * rel.interruption_loss_hours,
            "checkpoint_overhead_usd": rate * rel.checkpoint_overhead_hours,
            "capacity_wait_usd": rate * rel.start_wait_hours * rel.start_held_share,
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
        """A deterministic tie-break: same score -> the lexically first offer (one zone before any zone)."""
        o = self.offer
        return (o.cloud, o.region, o.zone, self.zones, o.instance_type, self.purchase, self.nodes)


@dataclass
class Stats:
    offers_considered: int = 0
    offers_skipped: dict[str, int] = field(default_factory=dict)
    hardware_evaluated: int = 0
    price_points: int = 0  # offer x purchase pairs with usable hardware
    zones_not_priced: int = 0  # spot zones dearer than another zone of the same region, type and interruption rate
    pruned: int = 0  # hardware x node counts that could not meet the deadline or budget at any speed
    # hardware x node counts no layout of which splits the global batch evenly: devices in the fleet -> how many
    unsplit: dict[int, int] = field(default_factory=dict)
    unbearable: int = 0  # fit memory but interruptions would dominate the run
    unobtainable: int = 0  # spot plans whose measured placement score says the nodes cannot be had
    not_shown: int = 0  # hardware x node counts skipped: none of their plans could be shown (standing.py)
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


def micro_batches(w: Workload, data_parallel: int) -> tuple[int, ...]:
    """The micro batches the search tries over `data_parallel` ranks: every divisor of each rank's equal share of
    the global batch (which is then trained exactly: cli/planner/batch.py), up to MAX_MICRO_BATCH sequences and,
    above one sequence, within the calibrated range of tokens per micro-batch. Empty when the share is not whole."""
    return _divisors_within(w.batch_sequences, data_parallel, max(1, MAX_MICRO_TOKENS // w.seq_len))


@cache
def _divisors_within(batch: int, data_parallel: int, most: int) -> tuple[int, ...]:
    share, rest = divmod(batch, data_parallel)
    if rest or not share:
        return ()
    return tuple(mb for mb in divisors(share) if mb <= min(most, MAX_MICRO_BATCH))


def layouts(w: Workload, hw: Hardware, nodes: int) -> list[tuple[int, int]]:
    """(tp, pp) the search tries: tensor parallelism inside a node (a divisor of its devices and of the model's
    heads), pipeline stages of whole nodes (a divisor of the nodes, at most the layers), or both (3-D: the
    trainer's own tensor-parallel layers inside DeepSpeed's pipeline, infra/parallelism.py); each with a
    data-parallel size that splits the global batch evenly (none: this fleet cannot train the batch, counted in
    `Stats.unsplit`)."""
    devices = hw.devices_per_node * nodes
    return [(tp, pp) for tp, pp in model_layouts(w, hw, nodes)
            if split_problem(w.batch_sequences, devices // (tp * pp)) is None]  # fmt: skip


def model_layouts(w: Workload, hw: Hardware, nodes: int) -> list[tuple[int, int]]:
    """`layouts` before the batch is asked to split: what the model, the node and DeepSpeed allow."""
    tps = [tp for tp in TP_SIZES if hw.devices_per_node % tp == 0 and tp_splits(w.shape, tp)]
    pps = [pp for pp in divisors(nodes) if pp <= w.shape.layers]
    return [(tp, pp) for pp in pps for tp in tps
            if unsupported_layout(tp, pp) is None and sequence_split_error(tp, pp, w.seq_len) is None]  # fmt: skip


def tp_splits(shape, tp: int) -> bool:
    """Whether tensor parallel `tp` gives every rank whole heads, key/value heads and MLP columns (the trainer's
    layers split them so: templates/trainfleet_model.py `TensorParallel.check`)."""
    return shape.heads % tp == shape.key_value_heads % tp == shape.ffn % tp == 0


def batch_problem(w: Workload, hw: Hardware, nodes: int, fixed: FixedSetup | None = None) -> str | None:
    """Why no layout (of those `fixed` allows) on this fleet can train the global batch exactly, and what to
    change; None when one can (with the pinned micro batch dividing its ranks' share)."""
    devices = hw.devices_per_node * nodes
    allowed = [(tp, pp) for tp, pp in model_layouts(w, hw, nodes) if fixed is None or fixed.allows_layout(tp, pp)]
    if not allowed:
        return None  # the layout itself is refused elsewhere, with its own reason
    batch, mb = w.batch_sequences, fixed.micro_batch if fixed is not None else None
    splitting = [devices // (tp * pp) for tp, pp in allowed if split_problem(batch, devices // (tp * pp)) is None]
    if splitting and (mb is None or any(batch // dp % mb == 0 for dp in splitting)):
        return None
    if splitting:
        dp = splitting[0]
        share = batch // dp
        fits = ", ".join(map(str, divisors(share)))
        return (f"--micro-batch {mb} does not divide the {share:,} sequences each of {dp:,} data-parallel ranks "
                f"trains per step ({batch:,} / {dp:,}); use one of {fits}, or another --global-batch")  # fmt: skip
    tp, pp = allowed[0]
    dp = devices // (tp * pp)
    layout = f"tensor parallel {tp} x pipeline {pp}: " if tp * pp > 1 else ""
    others = "" if len(allowed) == 1 else " (nor does any tensor or pipeline layout)"
    return f"{layout}{split_problem(batch, dp)}{others}; {split_fix(batch, w.seq_len, dp)}"


def unsupported_layout(tp: int, pp: int) -> str | None:
    """Whether DeepSpeed can train the layout with some ZeRO stage at all (stage 0 always allows it)."""
    return unsupported(0, False, False, tp, pp)


@cache  # asked tens of thousands of times a search, of a few dozen combinations
def sharding_supported(sh: Sharding, tp: int, pp: int) -> bool:
    return unsupported(sh.zero_stage, sh.offload_optimizer, sh.offload_param, tp, pp) is None


def setups(w: Workload, hw: Hardware, nodes: int, fit: Fit, headroom: float = memory.DEFAULT_HEADROOM,
           micro_batch: int | None = None) -> Iterable[Setup]:  # fmt: skip
    """Every setup in the search space that fits memory with `headroom` of it left (the brute-force view);
    with `micro_batch`, only that micro batch (which may be outside `micro_batches`)."""
    for tp, pp in layouts(w, hw, nodes):
        dp = hw.devices_per_node * nodes // (tp * pp)
        for sharding in SHARDINGS:
            if not sharding_supported(sharding, tp, pp):
                continue
            for ckpt in (False, True):
                for mb in (micro_batch,) if micro_batch else micro_batches(w, dp):
                    mem = memory.estimate(w, sharding, mb, ckpt, hw.device_memory_gib, hw.devices_per_node, nodes,
                                          hw.host_memory_gib, headroom, tp=tp, pp=pp)  # fmt: skip
                    if not mem.fits:
                        break  # the micro batches that fit are a prefix (memory.largest_micro_batch)
                    yield Setup(sharding, ckpt, throughput.step(w, hw, nodes, sharding, mb, ckpt, fit, tp=tp, pp=pp),
                                mem)  # fmt: skip


# At one (recompute, micro batch), a sharding is never faster than one listed for it here when that one fits
# (throughput.py: stages 1 and 2 make the same reduce-scatter and all-gather calls, and stage 2 exposes at least as
# much of them; offload only adds time). It loses the tie-break too, so it need not be evaluated. Stage 0 is no
# such bound: its all-reduce is NCCL's to run as a ring (with the ring's "plateau" latency) or a tree, either of
# which may beat or trail stage 1's two ring calls. tests/test_planner_optimizer.py holds best_setup to trying
# every setup.
_Z = {(sh.zero_stage, sh.offload_optimizer, sh.offload_param): sh for sh in SHARDINGS}
DOMINATED_BY: dict[Sharding, tuple[Sharding, ...]] = {
    _Z[2, False, False]: (_Z[1, False, False],),
    _Z[2, True, False]: (_Z[1, False, False], _Z[2, False, False]),
    _Z[3, True, False]: (_Z[3, False, False],),
    _Z[3, True, True]: (_Z[3, False, False], _Z[3, True, False]),
}



def setup_key(s: Setup) -> tuple:
    """Highest tokens/s first; ties: lower ZeRO stage, no offload, no recompute, smaller micro batch, then no
    tensor or pipeline parallelism before some."""
    return setup_key_of(s.sharding, s.checkpointing, s.step)


def setup_key_of(sh: Sharding, checkpointing: bool, st: Step) -> tuple:
    return (-st.tokens_per_second, sh.zero_stage, sh.offload_optimizer, sh.offload_param, checkpointing,
            st.micro_batch, st.tp, st.pp)  # fmt: skip


@dataclass(frozen=True, slots=True)
class FixedSetup:
    """What `trainfleet estimate` lets the user pin (None: searched)."""

    zero_stage: int | None = None
    offload: str | None = None  # none | optimizer | optimizer+params
    micro_batch: int | None = None
    tp: int | None = None
    pp: int | None = None

    def allows_layout(self, tp: int, pp: int) -> bool:
        return (self.tp is None or tp == self.tp) and (self.pp is None or pp == self.pp)

    def allows_sharding(self, sh: Sharding) -> bool:
        offload = "optimizer+params" if sh.offload_param else "optimizer" if sh.offload_optimizer else "none"
        return (self.zero_stage is None or sh.zero_stage == self.zero_stage) and (
            self.offload is None or offload == self.offload
        )


def best_setup(w: Workload, hw: Hardware, nodes: int, fit: Fit, stats: Stats | None = None,
               headroom: float = memory.DEFAULT_HEADROOM, fixed: FixedSetup | None = None,
               fits: dict | None = None) -> Setup | None:  # fmt: skip
    """The fastest setup that fits, by setup_key, over every layout (`layouts`; a pinned one with `fixed`): the
    same as the best of `setups()`, found with less work (`best_layout_setup`)."""
    fits = {} if fits is None else fits
    best = None
    for tp, pp in layouts(w, hw, nodes):
        if fixed is not None and not fixed.allows_layout(tp, pp):
            continue
        found = best_layout_setup(w, hw, nodes, fit, tp, pp, stats, headroom, fixed, fits,
                                  best.step.tokens_per_second if best is not None else 0.0)  # fmt: skip
        if found is not None and (best is None or setup_key(found) < setup_key(best)):
            best = found
    return best


def checkpoint_parts(w: Workload, devices_per_node: int, nodes: int, zero_stage: int, tp: int,
                     pp: int) -> reliability.CheckpointParts:  # fmt: skip
    """How a setup's checkpoint lies over the nodes. Full training: DeepSpeed 0.19's files for this ZeRO stage,
    precision (fp8 trains with bf16 on: infra/userdata.py), TP x PP, node count, GPUs per node and layer count
    (infra/checkpoint_layout.py). LoRA: the adapters (workload.checkpoint_bytes) split evenly over the nodes: what a
    trainer writes of a LoRA model under DeepSpeed is not modelled."""
    if w.method == "lora":
        return reliability.even_parts(w.checkpoint_bytes, nodes, "LoRA saves only the adapters, taken as split evenly")
    precision = "bf16" if w.precision == "fp8" else w.precision
    return reliability.layout_parts(w.params, zero_stage, precision, tp, pp, nodes, devices_per_node, w.shape.layers)


def setup_parts(w: Workload, hw: Hardware, nodes: int, setup: Setup) -> reliability.CheckpointParts:
    return checkpoint_parts(w, hw.devices_per_node, nodes, setup.sharding.zero_stage, setup.tp, setup.pp)


def checkpoint_key(w: Workload, zero_stage: int, tp: int, pp: int) -> tuple:
    """Setups with one key have the same `checkpoint_parts`: LoRA's adapters always; in full training, the layouts
    and ZeRO stages that put the same bytes on every node (`checkpoint_layout.parts_key`)."""
    if w.method == "lora":
        return ()
    return parts_key(zero_stage, "bf16" if w.precision == "fp8" else w.precision, pp)


def setup_options(w: Workload, hw: Hardware, nodes: int, fit: Fit, stats: Stats | None = None,
                  headroom: float = memory.DEFAULT_HEADROOM, fits: dict | None = None) -> list[Setup]:  # fmt: skip
    """The setups worth pricing on this hardware and node count, fastest first (`best_setup`'s is the first): the
    fastest of each `checkpoint_key` (see the module docstring). A handful: per layout, ZeRO-0, ZeRO-1/2 and
    ZeRO-3; LoRA one. Their checkpoints' parts are left to `assess_options`, which needs only a few of them."""
    fits = {} if fits is None else fits
    splits: dict[tuple, dict[tuple[int, int], set[int]]] = {}  # key -> (tp, pp) -> the ZeRO stages it holds
    for tp, pp in layouts(w, hw, nodes):
        for sh in SHARDINGS:
            if sharding_supported(sh, tp, pp):
                splits.setdefault(checkpoint_key(w, sh.zero_stage, tp, pp), {}).setdefault((tp, pp), set()).add(
                    sh.zero_stage)
    found: list[Setup] = []
    for by_layout in splits.values():
        best = None
        for (tp, pp), stages in by_layout.items():
            s = best_layout_setup(w, hw, nodes, fit, tp, pp, stats, headroom, None, fits,
                                  best.step.tokens_per_second if best is not None else 0.0, frozenset(stages))  # fmt: skip
            if s is not None and (best is None or setup_key(s) < setup_key(best)):
                best = s
        if best is not None:
            found.append(best)
    return sorted(found, key=setup_key)


def compute_floor(w: Workload, hw: Hardware, nodes: int, fit: Fit, tp: int, pp: int, fits: dict) -> tuple[float, float]:
    """`throughput.compute_floor_s` of a layout, kept in `fits` (one search's memo): it ignores network and RAM."""
    key = ("compute floor", hw.accelerator, hw.peak_tflops, hw.devices_per_node, nodes, tp, pp)
    if key not in fits:
        dp = hw.devices_per_node * nodes // (tp * pp)
        fits[key] = throughput.compute_floor_s(w, hw, nodes, fit, tp, pp, micro_batches(w, dp))
    return fits[key]


def layout_bound(w: Workload, micro_batch: int, dp: int, tp: int, pp: int) -> float:
    """The share of the communication-free speed a layout can reach at most: its compute runs at
    LAYOUT_EFFICIENCY, at the slowest stage's pace, and a step of m micro-batches takes at least m + pp - 1 of
    them (the 1F1B bubble)."""
    if tp * pp == 1:
        return 1.0
    m = throughput.micro_batches_per_step(w, micro_batch, dp)
    return throughput.LAYOUT_EFFICIENCY / throughput.stage_imbalance(w, pp) * m / (m + pp - 1)


def layout_pairs(w: Workload, hw: Hardware, nodes: int, fit: Fit, tp: int, pp: int, pinned_mb: int | None,
                 fits: dict) -> list[tuple[float, bool, int]]:  # fmt: skip
    """(bound, recompute, micro batch) of a layout, the highest bound first: its communication-free speed x
    `layout_bound`, whatever the sharding (`best_layout_setup`). Kept in `fits`: the bound ignores network and RAM."""
    dp = hw.devices_per_node * nodes // (tp * pp)
    batches = (pinned_mb,) if pinned_mb else micro_batches(w, dp)
    key = ("pairs", hw.accelerator, hw.peak_tflops, hw.devices_per_node * nodes, batches, (tp, pp))
    pairs = fits.get(key)
    if pairs is None:
        pairs = fits[key] = sorted(((throughput.compute_only_tokens_per_second(w, hw, nodes, mb, ckpt, fit)
                                     * layout_bound(w, mb, dp, tp, pp), ckpt, mb)
                                    for ckpt in (False, True) for mb in batches), key=lambda p: -p[0])  # fmt: skip
    return pairs


def cannot_beat(w: Workload, hw: Hardware, nodes: int, fit: Fit, tp: int, pp: int, shardings: list[Sharding],
                beat: float, fits: dict) -> bool:  # fmt: skip
    """Whether no setup of this layout with one of `shardings` (at a micro batch of `micro_batches`) reaches `beat`
    tokens/s: the global batch over the layout's `throughput.step_floor_s` (its tensor-parallel all-reduces and
    pipeline sends included, which the communication-free bound of `layout_pairs` leaves out) is slower."""
    stages = tuple(sorted({sh.zero_stage for sh in shardings}))
    if not stages:
        return True
    return w.batch_sequences * w.seq_len / step_floor(w, hw, nodes, fit, tp, pp, stages, fits) < beat


def step_floor(w: Workload, hw: Hardware, nodes: int, fit: Fit, tp: int, pp: int, stages: tuple[int, ...],
               fits: dict) -> float:  # fmt: skip
    """`throughput.step_floor_s` of a layout over its micro batches, kept in `fits`: the offers of one hardware
    shape and network share it."""
    key = ("step floor", hw, nodes, tp, pp, stages)
    if key not in fits:
        fits[key] = throughput.step_floor_s(w, hw, nodes, tp, pp, stages, compute_floor(w, hw, nodes, fit, tp, pp, fits))
    return fits[key]


def best_layout_setup(w: Workload, hw: Hardware, nodes: int, fit: Fit, tp: int, pp: int, stats: Stats | None,
                      headroom: float, fixed: FixedSetup | None, fits: dict, beat: float,
                      stages: frozenset[int] | None = None) -> Setup | None:  # fmt: skip
    """The fastest setup that fits with tensor degree `tp` and pipeline degree `pp` (and a ZeRO stage in `stages`,
    when given), by setup_key, among those at least as fast as `beat` tokens/s (a setup of another layout already
    found; None if none is).

    No sharding can beat the communication-free speed of its (recompute, micro batch) times `layout_bound`,
    and that bound does not depend on the sharding. So the (recompute, micro batch) pairs are tried from the
    highest bound down, each with every sharding it fits, and the search stops at the first pair whose bound is below
    the best found: none after it can beat or tie it. Activations are linear in the micro batch and nothing
    else in device memory depends on it (memory.activation_bytes), so one estimate per (sharding, recompute)
    gives the largest micro batch that fits. `fits` memoizes that across calls of one search: memory does not
    depend on the network, vCPUs or price, so the offers of one accelerator and node shape share it."""
    pinned_mb = fixed.micro_batch if fixed is not None else None
    shardings = [sh for sh in SHARDINGS if (fixed is None or fixed.allows_sharding(sh))
                 and (stages is None or sh.zero_stage in stages) and sharding_supported(sh, tp, pp)]  # fmt: skip
    layout = (tp, pp)
    if beat > 0.0 and tp * pp > 1 and pinned_mb is None and cannot_beat(w, hw, nodes, fit, tp, pp, shardings, beat, fits):
        return None
    pairs = layout_pairs(w, hw, nodes, fit, tp, pp, pinned_mb, fits)
    comms: dict[int, throughput.Communication] = {}  # index in shardings -> its collectives here
    largest: dict[bool, list[int]] = {}  # recompute -> the largest micro batch each sharding fits

    def largest_fitting(ckpt: bool) -> list[int]:
        if ckpt not in largest:
            shape = ("largest", tuple(shardings), ckpt, hw.device_memory_gib, hw.devices_per_node, nodes,
                     hw.host_memory_gib, layout)  # fmt: skip
            if shape in fits:
                largest[ckpt] = fits[shape]
                return largest[ckpt]
            out = []
            for sh in shardings:
                dpn = hw.devices_per_node
                states = fits.get((sh, dpn, nodes, layout))
                if states is None:
                    states = fits[sh, dpn, nodes, layout] = memory.model_states(w, sh, dpn, nodes, tp=tp, pp=pp)
                host = (sh, dpn, nodes, hw.host_memory_gib, layout)
                if host not in fits:
                    fits[host] = memory.states_fit_host(w, sh, dpn, nodes, hw.host_memory_gib, states, tp=tp, pp=pp)
                device = (sh, ckpt, hw.device_memory_gib, dpn, nodes, layout)
                if device not in fits:  # no host capacity given: the device alone decides
                    fits[device] = memory.largest_micro_batch(w, sh, ckpt, hw.device_memory_gib, dpn, nodes, 0.0,
                                                              headroom, states, tp=tp, pp=pp)  # fmt: skip
                out.append(fits[device] if fits[host] else 0)
            largest[ckpt] = fits[shape] = out
        return largest[ckpt]

    cap = {}  # recompute -> the largest micro batch any sharding fits: larger pairs are skipped at once
    best, best_key = None, None
    for bound, ckpt, mb in pairs:
        if bound < beat or (best is not None and bound < best[2].tokens_per_second):
            break
        if ckpt not in cap:
            cap[ckpt] = max(largest_fitting(ckpt), default=0)
        if mb > cap[ckpt]:
            continue
        fitting = {i: sh for i, (sh, most) in enumerate(zip(shardings, largest_fitting(ckpt), strict=True)) if mb <= most}
        for i, sharding in fitting.items():
            if any(d in fitting.values() for d in DOMINATED_BY.get(sharding, ())):
                continue
            if i not in comms:
                comms[i] = throughput.zero_communication(w, hw, nodes, sharding, tp=tp, pp=pp)
            st = throughput.step(w, hw, nodes, sharding, mb, ckpt, fit, comm=comms[i], tp=tp, pp=pp)
            if stats is not None:
                stats.setups_evaluated += 1
            key = setup_key_of(sharding, ckpt, st)
            if best_key is None or key < best_key:
                best, best_key = (sharding, ckpt, st), key
    if best is None:
        return None
    sharding, ckpt, st = best
    return Setup(sharding, ckpt, st, memory.estimate(w, sharding, st.micro_batch, ckpt, hw.device_memory_gib,
                                                     hw.devices_per_node, nodes, hw.host_memory_gib, headroom,
                                                     tp=tp, pp=pp))  # fmt: skip


def price_points(offers: Iterable[Offer], purchase: str) -> list[tuple[Offer, str, tuple[str, ...]]]:
    """(offer, purchase, zones): on-demand once per region (price is regional). Spot where the fleet can take
    capacity from: AWS per zone, and one AWS node in any zone of its region (an Auto Scaling group over every
    zone, priced at the dearest; several nodes share a cluster placement group, so one zone); GCP in any zone of
    its region (the managed instance group takes one zone that has the capacity: distribution target shape
    ANY_SINGLE_ZONE, or ANY for one VM); Azure per region (the catalog has no zones)."""
    out: list[tuple[Offer, str, tuple[str, ...]]] = []
    offers = list(offers)
    if purchase in ("spot", "any"):
        places: dict[tuple, list[Offer]] = {}
        for o in offers:
            if o.spot_usd_per_hour:
                # bucket and refreshed rate together name the rate, without building it per offer
                places.setdefault((o.cloud, o.region, o.instance_type, o.interruption_bucket, o.interruption_rate),
                                  []).append(o)  # fmt: skip
        for group in places.values():
            group.sort(key=lambda o: o.zone)
            zones = tuple(o.zone for o in group if o.zone)
            dearest = max(group, key=lambda o: o.spot_usd_per_hour)  # the lexically first of the dearest
            if group[0].cloud != "gcp":
                out += [(o, "spot", (o.zone,) if o.zone else ()) for o in group]
            if group[0].cloud == "gcp" or (group[0].cloud == "aws" and len(zones) > 1):
                out.append((dearest, "spot", zones))
    if purchase in ("on-demand", "any"):
        regional: dict[tuple[str, str, str], list[Offer]] = {}
        for o in offers:
            if o.on_demand_usd_per_hour:
                regional.setdefault((o.cloud, o.region, o.instance_type), []).append(o)
        for group in regional.values():
            group.sort(key=lambda o: o.zone)
            out.append((group[0], "on-demand", tuple(o.zone for o in group if o.zone)))
    return out


def useful_hours(w: Workload, setup: Setup) -> float:
    """Hours of steps alone: what every run of this setup takes at least (`assess_options` stops on it)."""
    return w.tokens / setup.step.tokens_per_second / 3600


def assess_group(w: Workload, hw: Hardware, nodes: int, setup: Setup, cloud: str, purchase: str,
                 interruption: InterruptionRate | None, capacity: Capacity = FULL,
                 elastic: tuple[int, float] | None = None) -> tuple[Reliability, float]:  # fmt: skip
    """(reliability, checkpoint storage USD) shared by every offer of one cloud, purchase, interruption
    rate and obtainable capacity on this hardware and node count (storage 0 for a plan refused as
    unbearable); with `elastic` (min_nodes, wait s), elastic recovery where this setup allows it."""
    useful_h = useful_hours(w, setup)
    wait = capacity.wait_s if purchase == "spot" else 0.0
    setting = None
    if elastic is not None:
        setting, _ = reliability.elastic_setting(nodes, setup.step.grad_accum, setup.tp, setup.pp, *elastic)
    rel = reliability.assess(useful_h, nodes, hw.devices_per_node, cloud, purchase == "spot", interruption,
                             w.checkpoint_bytes, hw.network_gbits, setup.step.step_s,
                             **w.overheads.shares(setup.step, setup.checkpointing), capacity_wait_s=wait,
                             elastic=setting, parts=setup_parts(w, hw, nodes, setup),
                             start_held_share=capacity.held_share, capacity_first_try=capacity.first_try)  # fmt: skip
    return rel, reliability.storage_usd(cloud, w.checkpoint_bytes, rel.wall_hours) if rel.feasible else 0.0


def assess_options(w: Workload, hw: Hardware, nodes: int, options: list[Setup], cloud: str, purchase: str,
                   interruption: InterruptionRate | None, capacity: Capacity = FULL,
                   elastic: tuple[int, float] | None = None) -> tuple[Setup, tuple[Reliability, float]]:  # fmt: skip
    """Of `setup_options`, the one with the least expected wall time here (the first, faster, of equal ones) and
    its `assess_group`: at every price it is the cheapest too (storage does not depend on the setup). A run's
    wall time is at least its useful hours, so the options slower than the shortest run found are not priced."""
    best: tuple[Setup, tuple[Reliability, float]] | None = None
    for setup in options:  # fastest first
        if best is not None and useful_hours(w, setup) >= best[1][0].wall_hours:
            break
        held = assess_group(w, hw, nodes, setup, cloud, purchase, interruption, capacity, elastic)
        if best is None or held[0].wall_hours < best[1][0].wall_hours:
            best = (setup, held)
    assert best is not None, "no setup to price"
    return best


def plan_setup(w: Workload, hw: Hardware, nodes: int, fit: Fit, offer: Offer, purchase: str, zones: tuple[str, ...],
               headroom: float = memory.DEFAULT_HEADROOM, scores: PlacementScores | None = None) -> Setup | None:  # fmt: skip
    """The setup `search` gives this fleet and price point: of `setup_options`, the least expected wall time here
    (`assess_options`), not merely the fastest step; None when nothing fits."""
    options = setup_options(w, hw, nodes, fit, headroom=headroom)
    if not options:
        return None
    capacity = capacity_for(offer, purchase, zones, nodes, scores)
    return assess_options(w, hw, nodes, options, offer.cloud, purchase, offer.interruption, capacity)[0]


def candidate(req: Request, offer: Offer, purchase: str, zones: tuple[str, ...], nodes: int, hw: Hardware,
              setup: Setup, assessed: dict | None = None, capacity: Capacity | None = None,
              scores: PlacementScores | None = None) -> Candidate:  # fmt: skip
    """One priced plan. `assessed` memoizes the reliability of (cloud, purchase, interruption rate, capacity score) for
    this hardware and node count: the zones and regions of one instance type share it (a pure function of
    them for one job). `capacity` defaults to what `scores` (or the assumed default) says of this fleet."""
    if capacity is None:
        capacity = capacity_for(offer, purchase, zones, nodes, scores)
    key = (offer.cloud, purchase, offer.interruption, capacity.key)
    held = assessed.get(key) if assessed is not None else None
    if held is None:
        held = assess_group(req.workload, hw, nodes, setup, *key[:3], capacity, req.elastic)
        if assessed is not None:
            assessed[key] = held
    rel, storage = held
    price = offer.price(purchase) or math.inf
    rate = price * nodes
    cost = rate * rel.billed_hours + storage if rel.feasible else math.inf
    if shares_cluster_placement_group(offer.cloud, nodes):
        zones = zones[:1]  # the placement group lives in one zone
    return Candidate(offer, zones, purchase, nodes, hw, setup, rel, price, cost, storage, capacity)


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
        elif o.accelerator in NOT_DEEPSPEED:
            stats.skip(f"{o.accelerator} needs the {NOT_DEEPSPEED[o.accelerator]}, not DeepSpeed")
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
    """Price points that share hardware, node count, setup and reliability (one cloud, purchase and interruption rate):
    their plans differ only in price, so they are built only when shown (`Search.select`)."""

    hw: Hardware
    nodes: int
    setup: Setup
    assessed: dict  # (cloud, purchase, interruption rate, capacity score) -> (Reliability, storage USD) of the setup its block
    # keeps (`assess_options`): what `candidate` reads
    rel: Reliability
    storage_usd: float
    capacity: Capacity  # one score for every point here; the first point's wording (its zone or region)
    # (offer, purchase, zones, USD per node-hour, (cloud, region, type, purchase), identity less the nodes,
    #  the point's own Capacity)
    points: tuple[tuple, ...]

    def candidate(self, req: Request, point: tuple) -> Candidate:
        offer, purchase, zones = point[:3]
        return candidate(req, offer, purchase, zones, self.nodes, self.hw, self.setup, self.assessed, point[6])


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
    shown: Shown | None = None  # what `search` kept fleets for: `select` may ask for that much at most

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
        if self.shown is not None and (top > self.shown.top or max_hours != self.shown.max_hours):
            raise ValueError(f"select({top}, {max_hours}) from a search that kept only what {self.shown} shows")
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
            per_usd, storage = b.nodes * b.rel.billed_hours, b.storage_usd
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
           prune: bool = True, scores: PlacementScores | None = None, shown: Shown | None = None) -> Search:  # fmt: skip
    """Every plan in the search space (`blocks`). With `prune`, hardware and node counts that cannot meet the
    deadline or budget even at their fastest (`fastest_tokens_per_second`) are not evaluated: the plans meeting the bounds
    are the same, but `unbounded` then lacks those that miss them (`impossible` searches again without).
    `scores`: measured spot placement scores (none: every spot plan carries the assumed default capacity).
    `shown`: what the caller will `select`; fleets none of whose plans could be selected are then skipped too
    (cli/planner/standing.py): the selection is the same, but `feasible` and its count lack them."""
    stats = Stats()
    w = req.workload
    pool = conservative_spot(filtered_offers(offers, req, stats))  # a zone far below its neighbours is not bet on
    # Spot zones of one region, type and interruption rate share hardware, setup and wall time: only the
    # cheapest (then the lexically first) can be best, a runner-up or on the frontier, so only it is priced.
    # A zone with its own measured placement scores differs in capacity too, so it stands on its own.
    cheapest: dict[tuple, tuple[Offer, str, tuple[str, ...]]] = {}
    points = price_points(pool, req.purchase)
    for offer, purchase, zones in points:
        measured = purchase == "spot" and scores is not None and scores.lookup(
            offer.cloud, offer.region, offer.zone, offer.instance_type, 1) is not None  # any score for this zone
        k = (offer.cloud, offer.region, offer.instance_type, purchase, offer.interruption_bucket, offer.interruption_rate,
             offer.zone if measured else None, len(zones) > 1)  # fmt: skip
        held = cheapest.get(k)
        if held is None or (offer.price(purchase), offer.zone) < (held[0].price(purchase), held[0].zone):
            cheapest[k] = (offer, purchase, zones)
    stats.zones_not_priced = len(points) - len(cheapest)
    # hardware -> (cloud, purchase, interruption rate) -> its price points: one setup per hardware and node count, one
    # reliability per group
    by_hardware: dict[Hardware, dict[tuple, list[tuple]]] = {}
    hardware: dict[tuple, Hardware | None] = {}  # what hardware_for reads of an offer -> its Hardware, built once
    for offer, purchase, zones in cheapest.values():
        shape = (offer.accelerator, offer.accelerators_per_node, offer.accelerator_memory_gib, offer.memory_gib,
                 offer.vcpus, offer.network_gbps, offer.fabric)  # fmt: skip
        if shape not in hardware:
            hardware[shape] = hardware_for(offer, accelerators.get(offer.accelerator), w.precision)
        hw = hardware[shape]
        if hw is None:
            stats.skip(f"no peak TFLOP/s for {w.precision} or unknown accelerator")
            continue
        stats.price_points += 1
        group = by_hardware.setdefault(hw, {}).setdefault((offer.cloud, purchase, offer.interruption), [])
        group.append((offer, purchase, zones, offer.price(purchase) or math.inf,
                      (offer.cloud, offer.region, offer.instance_type, purchase),
                      (offer.cloud, offer.region, offer.zone, zones, offer.instance_type, purchase)))  # fmt: skip
    def skipped(hours: float, cost: float, standing: Standing | None) -> bool:
        """Whether a fleet that takes at least these hours and cost is skipped (and counted): it cannot meet the
        deadline or budget (with `prune`), or none of its plans could show (with `standing`)."""
        if prune and not within_bounds(req, hours, cost):
            stats.pruned += 1
            return True
        if standing is not None and not standing.can_show(hours, cost):
            stats.not_shown += 1
            return True
        return False

    # fleets (hardware x node count) with lower bounds on their hours and cost: the useful hours at their
    # communication-free speed, at their cheapest price (tightened below, for the fleets that pass, with the
    # communication no setup hides)
    fleets: list[tuple[float, float, Hardware, int, dict[tuple, list[tuple]], list[tuple[int, int]], float]] = []
    fits: dict = {}  # what fleets of one accelerator or node shape share (`best_layout_setup`)
    for hw, groups in by_hardware.items():
        cheapest_rate = min(point[3] for group in groups.values() for point in group)
        for nodes in node_counts(req.max_nodes):
            shape = ("layouts", hw.devices_per_node, nodes)  # all `layouts` reads of the hardware
            if shape not in fits:
                fits[shape] = layouts(w, hw, nodes)
            fleet_layouts = fits[shape]
            if not fleet_layouts:
                devices = hw.devices_per_node * nodes
                stats.unsplit[devices] = stats.unsplit.get(devices, 0) + 1
                continue
            hours, cost = fleet_bounds(w, communication_free_tokens_per_second(w, hw, nodes, fleet_layouts, fit, fits),
                                       cheapest_rate * nodes)  # fmt: skip
            if skipped(hours, cost, None):
                continue
            fleets.append((hours, cost, hw, nodes, groups, fleet_layouts, cheapest_rate))
    standing = None
    if shown is not None:
        standing = Standing(shown, req.objective, req.time_value_usd_per_hour, req.deadline_hours, req.budget_usd)
        fleets.sort(key=lambda f: (standing.first(f[0], f[1]), f[0]))  # the likely best first
    blocks: list[Block] = []
    tighten = standing is not None or (prune and (req.deadline_hours is not None or req.budget_usd is not None))
    for hours, cost, hw, nodes, groups, fleet_layouts, cheapest_rate in fleets:
        if skipped(hours, cost, standing):
            continue
        # the same bounds, with what no setup's communication can hide: dearer to find, so found only here, and only
        # where they could skip the fleet
        if tighten and skipped(*fleet_bounds(w, fastest_tokens_per_second(w, hw, nodes, fleet_layouts, fit, fits),
                                             cheapest_rate * nodes), standing):  # fmt: skip
            continue
        stats.hardware_evaluated += 1
        options = setup_options(w, hw, nodes, fit, stats, req.memory_headroom, fits=fits)
        if not options:
            continue
        # one per (cloud, purchase, interruption rate, score) here, for the option its block keeps
        assessed: dict[tuple, tuple[Reliability, float]] = {}
        for key, group in groups.items():
            for capacity, held in with_capacity(group, nodes, hw.devices_per_node, scores).items():
                if not capacity.obtainable:
                    stats.unobtainable += len(held)
                    continue
                setup, priced = assess_options(w, hw, nodes, options, *key, capacity, req.elastic)
                rel, storage = assessed[(*key, capacity.key)] = priced
                stats.candidates += len(held)
                if not rel.feasible:
                    stats.unbearable += len(held)
                    continue
                blocks.append(Block(hw, nodes, setup, assessed, rel, storage, capacity, tuple(held)))
                if standing is not None:  # the same cost as Search.select prices
                    per_usd = nodes * rel.billed_hours
                    standing.add(rel.wall_hours, ((point[3] * per_usd + storage, point[4]) for point in held))
    return Search(req, blocks, stats, pruned=prune and stats.pruned > 0, shown=shown)


def capacity_for(offer: Offer, purchase: str, zones: tuple[str, ...], nodes: int,
                 scores: PlacementScores | None) -> Capacity:  # fmt: skip
    """What a fleet can count on holding: spot by its placement score; on-demand capacity taken as available."""
    if purchase != "spot":
        return FULL
    where = zones[:1] if shares_cluster_placement_group(offer.cloud, nodes) else zones
    return spot_capacity(scores, offer.cloud, offer.region, where, offer.instance_type, nodes)


def with_capacity(group: list[tuple], nodes: int, devices_per_node: int,
                  scores: PlacementScores | None) -> dict[Capacity, list[tuple]]:  # fmt: skip
    """A group's price points by the capacity score a fleet of `nodes` can count on (spot only; on-demand
    capacity is taken as available): the first point's Capacity stands for its score, each point keeps its own."""
    out: dict[tuple, tuple[Capacity, list[tuple]]] = {}
    for point in group:
        offer, purchase, zones = point[:3]
        if purchase == "spot" and len(zones) > 1 and shares_cluster_placement_group(offer.cloud, nodes):
            continue  # several nodes share one zone's placement group: the any-zone point is for one node
        capacity = capacity_for(*point[:3], nodes, scores)
        out.setdefault(capacity.key, (capacity, []))[1].append((*point[:6], capacity))
    return {capacity: held for capacity, held in out.values()}


def communication_free_tokens_per_second(w: Workload, hw: Hardware, nodes: int, fleet_layouts: list[tuple[int, int]],
                                         fit: Fit, memo: dict | None = None) -> float:  # fmt: skip
    """A quick upper bound on the speed of every setup of `fleet_layouts` (`layouts(w, hw, nodes)`) on this
    hardware and node count, above `fastest_tokens_per_second`: the fastest communication-free speed of any micro
    batch (the fewest data-parallel ranks of any layout allow the most). `memo`: kept across the fleets of one
    search, which share it by accelerator, peak and device count, whatever their network."""
    dp = min(hw.devices_per_node * nodes // (tp * pp) for tp, pp in fleet_layouts)
    key = ("fastest", hw.accelerator, hw.peak_tflops, hw.devices_per_node * nodes, dp)
    if memo is not None and key in memo:
        return memo[key]
    batches = micro_batches(w, dp)
    # MFU moves one way with a micro batch's tokens (Fit.mfu_rises_with_micro_tokens): the fastest is at one end;
    # without recompute, which runs the forward twice: its MFU is 3/4 of the same HFU (Fit.mfu)
    mb = max(batches) if fit.mfu_rises_with_micro_tokens() else min(batches)
    fastest = throughput.compute_only_tokens_per_second(w, hw, nodes, mb, False, fit)
    if memo is not None:
        memo[key] = fastest
    return fastest


def fastest_tokens_per_second(w: Workload, hw: Hardware, nodes: int, fleet_layouts: list[tuple[int, int]], fit: Fit,
                              memo: dict | None = None) -> float:  # fmt: skip
    """An upper bound on the speed of every setup of `fleet_layouts` (`layouts(w, hw, nodes)`) on this hardware
    and node count: the global batch over the least `throughput.step_floor_s` of any layout. Layouts are taken from
    the least compute floor up, and no further once the global batch over it is no faster than the speed found.
    `memo`, kept across the fleets of one search, holds the compute floors (the same on every network)."""
    memo = {} if memo is None else memo
    floors = sorted((compute_floor(w, hw, nodes, fit, tp, pp, memo), tp, pp) for tp, pp in fleet_layouts)
    tokens = w.batch_sequences * w.seq_len  # per step, in every layout
    fastest = 0.0
    for computing, tp, pp in floors:
        if tokens / computing[0] <= fastest:
            break  # this layout and the rest compute too long to be faster, whatever their communication
        stages = tuple(sorted({sh.zero_stage for sh in SHARDINGS if sharding_supported(sh, tp, pp)}))
        fastest = max(fastest, tokens / step_floor(w, hw, nodes, fit, tp, pp, stages, memo))
    return fastest


def fleet_bounds(w: Workload, tokens_per_second: float, usd_per_hour: float) -> tuple[float, float]:
    """(hours, USD) every plan of a fleet takes at least, from a bound on its speed and its cheapest rate: the useful
    hours, which every plan's wall and billed hours include, and those hours at that rate (storage only adds)."""
    hours = w.tokens / tokens_per_second / 3600
    return hours, usd_per_hour * hours


def within_bounds(req: Request, hours_low: float, cost_low: float) -> bool:
    """Whether a fleet whose plans take at least `hours_low` hours and `cost_low` USD could meet the deadline and
    budget (`fastest_tokens_per_second` gives both: its useful hours, and those at its cheapest price)."""
    return (req.deadline_hours is None or hours_low <= req.deadline_hours) and (
        req.budget_usd is None or cost_low <= req.budget_usd)


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
