"""Plans as data (every figure with its unit in its key), explanations, and the one-line 'impossible'."""

from __future__ import annotations

import statistics

from cli.planner.calibration import Fit
from cli.planner.memory import GIB, MemoryEstimate
from cli.planner.memory import assumptions as memory_assumptions
from cli.planner.optimizer import Candidate, Request, Search, rank
from cli.planner.throughput import explain_step
from infra.errors import TrainfleetError


def offload_label(c: Candidate) -> str:
    sh = c.setup.sharding
    if sh.offload_param:
        return "optimizer+params"
    return "optimizer" if sh.offload_optimizer else "none"


def interruption_label(c: Candidate) -> str:
    if c.purchase != "spot":
        return "on-demand: failures only"
    if c.offer.interruption_bucket is None:
        return "unknown (>20%/month assumed)"
    return c.offer.interruption_label


def assumptions(c: Candidate, req: Request, fit: Fit | None = None) -> list[str]:
    w = req.workload
    out = c.hardware.assumptions(w.precision, fit)
    o = c.offer
    if c.purchase == "spot":
        if o.interruption_bucket is None:
            out.append(f"{o.instance_type} in {o.region}: interruption rate unknown, >20%/month assumed")
        elif o.interruption_assumed:
            out.append(f"{o.cloud} publishes no interruption rates: {o.interruption_label} per node")
    if w.method == "lora":
        out.append(f"LoRA rank {w.lora_rank} on q,k,v,o; frozen base in 16-bit")
    if w.shape.name.endswith("-params"):
        out.append(
            f"shape derived from the parameter count: {w.shape.layers} layers, hidden {w.shape.hidden}"
        )
    if w.precision in ("fp32", "fp8"):
        out.append(
            f"{w.precision}: memory follows DeepSpeed's mixed-precision estimators (16-bit weights, fp32 "
            f"master copy); throughput uses the accelerator's {w.precision} peak"
        )
    out.append(f"global batch {w.global_batch_tokens:,} tokens; flash attention; 16-bit gradients")
    out += memory_assumptions(c.setup.memory)
    return out


def memory_figures(m: MemoryEstimate) -> dict:
    """Per-device memory of a plan, GiB: used (states, activations, buffers), reserved, available."""
    return {
        "device_memory_gib": round(m.device_memory_bytes / GIB, 2),
        "memory_used_gib": round(m.used_bytes / GIB, 2),
        "memory_reserved_gib": round(m.reserved_bytes / GIB, 2),
        "memory_available_gib": round(m.available_bytes / GIB, 2),
        "memory_headroom": m.headroom,
        "memory_breakdown_gib": {
            "model_states": round(m.model_states_bytes / GIB, 2),
            "activations": round(m.activation_bytes / GIB, 2),
            "communication_buffers": round(m.comm_buffer_bytes / GIB, 2),
            "cuda_context_and_nccl": round(m.runtime_reserve_bytes / GIB, 2),
            "fragmentation": round(m.fragmentation_bytes / GIB, 2),
        },
        # used + reserved, and the most it may be with the headroom kept free
        "memory_per_device_gib": round(m.device_bytes / GIB, 2),
        "usable_memory_per_device_gib": round(m.device_capacity_bytes / GIB, 2),
    }


def plan_dict(c: Candidate, req: Request, explain: bool = False, fit: Fit | None = None) -> dict:
    w, s, st, o = req.workload, c.setup, c.setup.step, c.offer
    d = {
        "cloud": o.cloud,
        "region": o.region,
        "zones": list(c.zones),
        "instance_type": o.instance_type,
        "accelerator": o.accelerator,
        "accelerators_per_node": c.hardware.devices_per_node,
        "nodes": c.nodes,
        "devices": c.devices,
        "purchase": c.purchase,
        "price_usd_per_node_hour": round(c.price_usd_per_node_hour, 6),
        "zero_stage": s.sharding.zero_stage,
        "offload": offload_label(c),
        "micro_batch": st.micro_batch,
        "grad_accum": st.grad_accum,
        "activation_checkpointing": s.checkpointing,
        "checkpoint_interval_minutes": c.checkpoint_interval_minutes,
        "wallclock_hours": round(c.wall_hours, 3),
        "useful_hours": round(c.rel.useful_hours, 3),
        "gpu_hours": round(c.wall_hours * c.devices, 1),
        "expected_cost_usd": round(c.cost_usd, 2),
        "breakdown": {k: round(v, 2) for k, v in c.breakdown.items()},
        "tokens_per_second": round(st.tokens_per_second, 1),
        "tokens_per_second_per_device": round(st.tokens_per_second_per_device, 1),
        "mfu": round(st.effective_mfu, 4),
        **memory_figures(s.memory),
        "checkpoint_gb": round(w.checkpoint_bytes / 1e9, 2),
        "checkpoint_write_seconds": round(c.rel.checkpoint_write_s, 1),
        "expected_interruptions": round(c.rel.expected_interruptions, 2),
        "interruption": interruption_label(c),
        "assumptions": assumptions(c, req, fit),
    }
    if explain:
        d["explain"] = explain_lines(c, req, fit)
    return d


def explain_lines(c: Candidate, req: Request, fit: Fit | None) -> list[str]:
    w, s = req.workload, c.setup
    lines = list(w.explain())
    lines.append(f"setup: {s.sharding.label}, micro batch {s.step.micro_batch}, grad accum {s.step.grad_accum}, "
                 f"activation checkpointing {'on' if s.checkpointing else 'off'} (highest tokens/s that fits)")  # fmt: skip
    lines += s.memory.explain()
    if fit is not None:
        lines += explain_step(s.step, w, c.hardware, fit)
    lines.append(f"useful time = {w.tokens:,} tokens / {s.step.tokens_per_second:,.0f} tokens/s = "
                 f"{c.rel.useful_hours:.2f} h")  # fmt: skip
    lines += c.rel.explain()
    rate = c.price_usd_per_node_hour * c.nodes
    lines.append(f"cost = {c.nodes} nodes x ${c.price_usd_per_node_hour:.4f}/node-h ({c.purchase}) x "
                 f"{c.wall_hours:.2f} h + storage ${c.breakdown['storage_usd']:.2f} = ${c.cost_usd:,.2f} "
                 f"(${rate:,.2f}/h)")  # fmt: skip
    lines.append("egress $0: checkpoints and data stay in the plan's region (one region per plan)")
    return lines


def describe(c: Candidate) -> str:
    return (f"{c.nodes} x {c.offer.instance_type} ({c.devices} x {c.offer.accelerator}, {c.purchase}, "
            f"{c.offer.cloud} {c.offer.region}) for {c.wall_hours:,.1f} h at ${c.cost_usd:,.0f}")  # fmt: skip


LONG_RUN_HOURS = (
    30 * 24
)  # past a month without a deadline, say so: the cheapest plan is rarely the one wanted


# A spot price under half the median of the same type in the region's other zones is flagged: one catalog row
# that far below its neighbours is more often stale, or a pool too small for a fleet, than a bargain.
OUTLIER_RATIO = 2.0


def price_outlier(c: Candidate) -> str | None:
    """The note for a spot plan priced on a zone far below its neighbours, with its cost at their price."""
    from infra.catalog import default_catalog

    if c.purchase != "spot":
        return None
    o = c.offer
    others = [
        x.spot_usd_per_hour
        for x in default_catalog().offers(cloud=o.cloud, region=o.region, instance_type=o.instance_type)
        if x.zone not in c.zones and x.spot_usd_per_hour
    ]
    if not others or statistics.median(others) < OUTLIER_RATIO * c.price_usd_per_node_hour:
        return None
    median = statistics.median(others)
    at_median = (c.cost_usd - c.storage_usd) * median / c.price_usd_per_node_hour + c.storage_usd
    return (
        f"{o.instance_type} spot in {', '.join(c.zones) or o.region} is ${c.price_usd_per_node_hour:,.2f}/h on one "
        f"catalog row ({o.source}), {median / c.price_usd_per_node_hour:.1f}x below the median of its "
        f"{len(others)} neighbouring zone{'s' if len(others) > 1 else ''} in {o.region} (${median:,.2f}/h): a price "
        f"that far out is often stale or a small pool; at the neighbours' price this plan costs ${at_median:,.0f}, "
        f"not ${c.cost_usd:,.0f}; check it with `trainfleet catalog refresh --cloud {o.cloud}`"
    )


def notes(best: Candidate, front: list[Candidate], req: Request) -> list[str]:
    """Warnings a user should read before deploying the best plan."""
    out = []
    if req.deadline_hours is None and req.objective == "cost" and best.wall_hours > LONG_RUN_HOURS:
        fastest = min(front, key=lambda c: (c.wall_hours, c.cost_usd, c.identity()))
        out.append(
            f"the cheapest plan runs {best.wall_hours:,.0f} h ({best.wall_hours / 24:,.0f} days); give --deadline "
            f"(e.g. --deadline 14d) or --objective time; the fastest plan within your bounds is {describe(fastest)}"
        )
    outlier = price_outlier(best)
    if outlier:
        out.append(outlier)
    rel = best.rel
    if best.purchase == "spot" and not rel.emergency_checkpoint_fits:
        t = rel.times
        out.append(
            f"the emergency checkpoint takes {t.emergency_s:,.0f} s (finish the step {t.step_boundary_s:,.0f} s, save "
            f"{t.save_s:,.0f} s, upload {t.upload_s:,.0f} s, commit {t.commit_s:,.0f} s) but {best.offer.cloud}'s spot "
            f"notice is {rel.notice_s:,.0f} s: each interruption loses up to "
            f"{(rel.interval_s + t.durable_lag_s) / 60:,.0f} min of work (priced in the interruption loss); more "
            "nodes shorten the step and each node's share"
        )
    return out


def impossible(result: Search) -> TrainfleetError:
    """One line: which bound fails, and the closest plan."""
    req, w = result.request, result.request.workload
    what = f"{w.shape.name} ({w.params / 1e9:.3g}B params, {w.method})"
    stats = result.stats
    priced = "a known" if req.purchase == "any" else f"a {req.purchase}"
    skipped = "; ".join(f"{n} offers: {why}" for why, n in stats.offers_skipped.items())
    if not stats.price_points:
        return TrainfleetError(
            f"no catalog offer is usable for {w.precision} with {priced} price under these filters"
            f"{' (' + skipped + ')' if skipped else ''}; widen --clouds/--regions/--accelerators or --purchase"
        )
    if not result.unbounded and stats.unbearable:
        fix = (
            "use --purchase on-demand or any"
            if req.purchase == "spot"
            else "hardware failures across that many nodes dominate even on demand; allow accelerators with "
            "more memory (--accelerators) or use --method lora"
        )
        return TrainfleetError(
            f"every plan that fits {what} in memory would spend most of its time on interruptions and "
            f"restarts ({stats.unbearable} candidates); {fix}"
        )
    if not result.unbounded:
        return TrainfleetError(
            f"no offer fits {what} in memory with up to {req.max_nodes} nodes and {priced} price"
            f"{' (' + skipped + ')' if skipped else ''}; raise --max-nodes, allow more --clouds/--accelerators, "
            f"or try --method lora"
        )
    dl, budget = req.deadline_hours, req.budget_usd
    by_time = min(result.unbounded, key=lambda c: (c.wall_hours, c.cost_usd, c.identity()))
    by_cost = min(result.unbounded, key=lambda c: (c.cost_usd, c.wall_hours, c.identity()))
    if dl is not None and by_time.wall_hours > dl:
        return TrainfleetError(
            f"deadline {dl:g} h cannot be met: the fastest plan that fits {what} in memory needs "
            f"{describe(by_time)}; raise --deadline or --max-nodes"
        )
    if budget is not None and by_cost.cost_usd > budget:
        return TrainfleetError(
            f"budget ${budget:,.0f} cannot be met: the cheapest plan that fits {what} costs "
            f"{describe(by_cost)}; raise --budget"
        )
    within = rank([c for c in result.unbounded if dl is None or c.wall_hours <= dl],
                  Request(w, objective="cost"))  # fmt: skip
    closest = within[0]
    return TrainfleetError(
        f"deadline {dl:g} h and budget ${budget:,.0f} cannot both be met: the cheapest plan within the "
        f"deadline needs {describe(closest)}; raise --budget or --deadline"
    )
