"""Plans as data (every figure with its unit in its key), explanations, and the one-line 'impossible'."""

from __future__ import annotations

import math

from cli.planner import reliability
from cli.planner.batch import nearest_batches
from cli.planner.calibration import Fit, default_fit
from cli.planner.memory import GIB, MemoryEstimate
from cli.planner.memory import assumptions as memory_assumptions
from cli.planner.optimizer import Candidate, FixedSetup, Request, Search, assess_group, rank
from cli.planner.outliers import OUTLIER_NOTE, neighbours_median
from cli.planner.throughput import explain_step, parallelism_assumptions
from cli.planner.uncertainty import LEVEL, PLAN_INTERVAL
from infra.catalog import Offer
from infra.catalog.price_age import PriceAge, oldest, refresh_command, stale_note
from infra.errors import TrainfleetError


def offload_label(c: Candidate) -> str:
    sh = c.setup.sharding
    if sh.offload_param:
        return "optimizer+params"
    return "optimizer" if sh.offload_optimizer else "none"


def interruption_label(c: Candidate) -> str:
    if c.purchase != "spot":
        return "on-demand: failures only"
    if c.offer.interruption is None:
        return "unknown (>20%/month assumed)"
    return c.offer.interruption_label


# Where the rate of an assumed row could come from instead, per cloud.
ASSUMED_BECAUSE = {
    "gcp": "GCP publishes no interruption rate over time",
    "azure": "Azure's eviction rates need `trainfleet catalog refresh --cloud azure --capacity` (Azure credentials)",
}


def interruption_assumption(o) -> str | None:
    """The line that says where a spot offer's interruption rate comes from, when it is not a plain AWS bucket."""
    if o.interruption is None:
        return f"{o.instance_type} in {o.region}: interruption rate unknown, >20%/month assumed"
    if o.interruption_assumed:
        evidence = f"; {o.interruption_evidence}" if o.interruption_evidence else ""
        why = ASSUMED_BECAUSE.get(o.cloud, f"{o.cloud} publishes no interruption rate")
        return f"{why}: {o.interruption_label} per node{evidence}"
    if o.interruption_rate is not None:
        rate = o.interruption_rate
        per = "hour" if rate.period_hours == 1 else f"{rate.period_hours:g} h"
        return (f"{o.instance_type} in {o.region}: eviction rate {rate.label} as {o.cloud} publishes it "
                f"({o.interruption_evidence or o.interruption_source}), {rate.taken * 100:g}% per node-{per} taken")
    return None


def assumptions(c: Candidate, req: Request, fit: Fit | None = None) -> list[str]:
    w = req.workload
    out = c.hardware.assumptions(w.precision, fit)
    o = c.offer
    if c.purchase == "spot":
        line = interruption_assumption(o)
        if line:
            out.append(line)
    if c.purchase == "spot" and not c.capacity.measured:
        out.append(c.capacity.source)
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
    if c.rel.elastic is not None:
        e = c.rel.elastic.setting
        out.append(f"elastic recovery (--elastic {e.min_nodes}:{e.wait_s:g}): a lost node's survivors shrink to "
                   f"{e.shrink_nodes} of {c.nodes} nodes after {e.wait_s:g} s; "
                   f"{reliability.convert_rate_note()}, benchmarks/elastic_recovery.py")  # fmt: skip
    st = c.setup.step
    out.append(w.overheads.assumption(st, c.setup.checkpointing))
    out.append(PLAN_INTERVAL.describe())
    out.append(f"global batch {w.batch_sequences:,} sequences of {w.seq_len:,} tokens ({w.global_batch_tokens:,} tokens), "
               f"trained exactly: micro batch {st.micro_batch} x accumulation {st.grad_accum} x "
               f"{c.devices // (st.tp * st.pp):,} data-parallel ranks; flash attention; 16-bit gradients")  # fmt: skip
    out += parallelism_assumptions(c.setup.tp, c.setup.pp)
    if c.setup.tp * c.setup.pp > 1 or c.devices > THREE_D_SCALE:
        out.append(NO_THREE_D)
    out += memory_assumptions(c.setup.memory)
    return out


# Where the layouts the launch cannot run start to matter: a plan already splitting the model, or past the scale of
# the development set's runs (cli/planner/uncertainty.py).
THREE_D_SCALE = 1024
NO_THREE_D = ("not offered: an interleaved pipeline schedule and context parallelism, which published runs at "
              "this scale add to tensor x pipeline x data (x sequence) parallelism: DeepSpeed 0.19.8's "
              "PipelineEngine runs plain 1F1B (infra/parallelism.py); such a run may be faster than this plan")  # fmt: skip


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
        "tensor_parallel": st.tp,
        "pipeline_parallel": st.pp,
        "data_parallel": c.devices // (st.tp * st.pp),
        "pipeline_bubble_share": round(st.bubble_share, 4),
        "micro_batch": st.micro_batch,
        "grad_accum": st.grad_accum,
        "activation_checkpointing": s.checkpointing,
        "checkpoint_interval_minutes": c.checkpoint_interval_minutes,
        "wallclock_hours": round(c.wall_hours, 3),
        "useful_hours": round(c.rel.useful_hours, 3),
        "gpu_hours": round(c.rel.billed_hours * c.devices, 1),
        "expected_cost_usd": round(c.cost_usd, 2),
        **interval_figures(c.wall_hours, c.rel.billed_hours * c.devices, c.cost_usd),
        "breakdown": {k: round(v, 2) for k, v in c.breakdown.items()},
        "tokens_per_second": round(st.tokens_per_second, 1),
        "tokens_per_second_per_device": round(st.tokens_per_second_per_device, 1),
        "mfu": round(st.effective_mfu, 4),
        **memory_figures(s.memory),
        "checkpoint_gb": round(w.checkpoint_bytes / 1e9, 2),
        "checkpoint_write_seconds": round(c.rel.checkpoint_write_s, 1),
        "checkpoint_parts": parts_dict(c),
        "expected_interruptions": round(c.rel.expected_interruptions, 2),
        "interruption": interruption_label(c),
        "capacity": capacity_dict(c, req),
        "elastic": elastic_dict(c, req),
        "assumptions": assumptions(c, req, fit),
        "price_age": price_age(c).to_json(),
    }
    if explain:
        d["explain"] = explain_lines(c, req, fit)
    return d


def priced_offers(c: Candidate) -> list[Offer]:
    """The catalog rows the plan's price rests on: its zones' rows for spot over several zones, else its own."""
    from infra.catalog import default_catalog

    if c.purchase != "spot" or len(c.zones) < 2:
        return [c.offer]
    o = c.offer
    rows = default_catalog().offers(cloud=o.cloud, region=o.region, instance_type=o.instance_type)
    return [x for x in rows if x.zone in c.zones and x.spot_usd_per_hour] or [o]


def price_age(c: Candidate) -> PriceAge:
    from infra.catalog import default_catalog

    return oldest(priced_offers(c), default_catalog().sources)


def price_notes(best: Candidate, shown: list[Candidate], max_days: float) -> list[str]:
    """The best plan's price when it is undated or older than `max_days`, with the command that updates it; one
    more line when other plans shown rest on such prices too."""
    from infra.catalog import default_catalog

    sources = default_catalog().sources
    o = best.offer
    where = f"{', '.join(best.zones) or o.region}"
    line = stale_note(price_age(best), f"this plan ({o.instance_type} {best.purchase} in {o.cloud} {where})",
                      o.cloud, [o.region], max_days, sources)  # fmt: skip
    out = [line] if line else []
    others = {c.identity(): c for c in shown if c.identity() != best.identity() and price_age(c).too_old(max_days)}
    if others:
        clouds = sorted({c.offer.cloud for c in others.values()})
        out.append(
            f"{len(others)} other plan{'s' if len(others) > 1 else ''} shown rest{'s' if len(others) == 1 else ''} "
            f"on undated prices or prices older than {max_days:g} days too ({', '.join(clouds)}; their age is in "
            f"--json price_age and the wide tables): `{refresh_command('CLOUD')}` for each"
        )
    return out


def interval_figures(wall_hours: float, device_hours: float, cost_usd: float) -> dict:
    """Device-hours (billed: spot nodes not yet held before the start bill nothing), wall-clock hours and expected
    cost with their 80% interval (cli/planner/uncertainty.py)."""
    (wall_low, wall_high), (cost_low, cost_high) = PLAN_INTERVAL.around(wall_hours), PLAN_INTERVAL.around(cost_usd)
    (hours_low, hours_high) = PLAN_INTERVAL.around(device_hours)
    return {
        "device_hours": round(device_hours, 1),
        "device_hours_low": round(hours_low, 1),
        "device_hours_high": round(hours_high, 1),
        "wallclock_hours_low": round(wall_low, 3),
        "wallclock_hours_high": round(wall_high, 3),
        "expected_cost_usd_low": round(cost_low, 2),
        "expected_cost_usd_high": round(cost_high, 2),
    }


def bound_note(c: Candidate, req: Request, factor: float, says: str, remedy: str) -> str | None:
    """`says` (its {passed}: what passes) when the plan's time or cost times `factor` passes the deadline or the
    budget, and the --deadline that avoids it (`remedy`: what that deadline achieves)."""
    wall, cost, dl, budget = c.wall_hours * factor, c.cost_usd * factor, req.deadline_hours, req.budget_usd
    late = dl is not None and wall > dl
    passed = [f"{wall:,.0f} h, past the {dl:g} h deadline"] if late else []
    if budget is not None and cost > budget:
        passed.append(f"${cost:,.0f}, past the ${budget:,.0f} budget")
    if not passed:
        return None
    return says.format(passed=" and ".join(passed)) + (f"; plan with --deadline {dl / factor:.0f}h {remedy}"
                                                       if late else "")  # fmt: skip


def interval_note(c: Candidate, req: Request) -> str | None:
    """When the interval's upper end passes the deadline or the budget the point estimate meets."""
    iv = PLAN_INTERVAL
    return bound_note(c, req, iv.high, f"the {LEVEL:.0%} interval's upper end, {{passed}}: the planner's error on "
                      f"published whole runs (x{iv.low:.2f} to x{iv.high:.2f}) leaves that much room",
                      "to keep it inside the deadline")  # fmt: skip


def median_note(c: Candidate, req: Request) -> str | None:
    """When the plan meets the deadline or the budget only by the model's figure: published whole runs took a median
    PLAN_INTERVAL.median of it (no constant absorbs that; the plan says it instead)."""
    m = PLAN_INTERVAL.median
    return bound_note(c, req, m, f"published whole runs took a median x{m:.2f} of what the planner predicts for "
                      "them: at that this plan takes {passed}", "to meet it at the median")  # fmt: skip


def parts_dict(c: Candidate) -> dict:
    """How the plan's checkpoint lies over its nodes (reliability.CheckpointParts) and what that costs in time."""
    t = c.rel.times
    p = t.parts
    assert p is not None
    return {
        "total_gb": round(p.total_bytes / 1e9, 2),
        "largest_part_gb": round(p.saved_bytes / 1e9, 3),
        "largest_part_node": p.saved_node,
        "model_states_gb": round(p.model_bytes / 1e9, 3),
        "largest_restore_gb": round(p.restored_bytes / 1e9, 3),
        "split": "deepspeed" if p.layout is not None else "even",
        "basis": p.explain(),
        "save_seconds": round(t.save_s, 1),
        "upload_seconds": round(t.upload_s, 1),
        "download_seconds": round(t.download_s, 1),
        "load_seconds": round(t.load_s, 1),
        "emergency_seconds": round(t.emergency_s, 1),
        "notice_seconds": c.rel.notice_s,
        "emergency_fits_notice": c.rel.emergency_checkpoint_fits,
    }


def capacity_risk_usd(c: Candidate, req: Request) -> float:
    """What waiting for spot capacity adds to the expected cost: the plan against the same plan with its nodes
    always to be had (before the start and in every restart)."""
    if c.purchase != "spot" or not c.rel.feasible:
        return 0.0
    key = (c.offer.cloud, c.purchase, c.offer.interruption)
    rel, storage = assess_group(req.workload, c.hardware, c.nodes, c.setup, *key, elastic=req.elastic)
    return max(0.0, c.cost_usd - (c.price_usd_per_node_hour * c.nodes * rel.billed_hours + storage))


def capacity_dict(c: Candidate, req: Request) -> dict:
    cap = c.capacity
    return {
        "score": cap.score,
        "measured": cap.measured,
        "source": cap.source,
        "chance_full_set_within_1h": round(cap.held_within(3600.0), 4),
        "expected_wait_minutes": round(cap.wait_s / 60, 1),
        # a lost node: a replacement boots and joins (reliability.PROVISION_S) once the pool holds the set again
        "replace_node_minutes": round((reliability.PROVISION_S + (cap.wait_s if c.purchase == "spot" else 0)) / 60, 1),
        "risk_usd": round(capacity_risk_usd(c, req), 2),
    }


def default_elastic(c: Candidate) -> tuple[int, float]:
    """The setting a plan is compared with when --elastic is not given: the smallest usable node count of at least
    half the plan's (infra/elastic.py; that half when none is usable) and a 600 s wait."""
    from infra.elastic import DEFAULT_WAIT_S, usable_node_counts

    half = -(-c.nodes // 2)
    usable = usable_node_counts(c.nodes, c.setup.step.grad_accum, half)
    return (usable[0] if usable else half), DEFAULT_WAIT_S


class _Priced:
    """One pricing of a plan: its reliability, wall hours and expected USD."""

    __slots__ = ("rel", "hours", "usd")

    def __init__(self, c: Candidate, rel: reliability.Reliability, storage: float) -> None:
        self.rel, self.hours = rel, rel.wall_hours
        self.usd = c.price_usd_per_node_hour * c.nodes * rel.billed_hours + storage if rel.feasible else float("inf")


def elastic_comparison(c: Candidate, req: Request) -> tuple[tuple[int, float], _Priced | None, _Priced, str] | None:  # fmt: skip
    """((min_nodes, wait s), the plan with elastic recovery or None, the plan without it, why not) for a
    multi-node plan: with --elastic's setting, else (spot plans only) the default one; None when not compared."""
    if c.nodes < 2 or (req.elastic is None and c.purchase != "spot"):
        return None
    setting = req.elastic if req.elastic is not None else default_elastic(c)
    st = c.setup.step
    usable, why = reliability.elastic_setting(c.nodes, st.grad_accum, st.tp, st.pp, *setting)
    key = (c.offer.cloud, c.purchase, c.offer.interruption)
    without = _Priced(c, *assess_group(req.workload, c.hardware, c.nodes, c.setup, *key, c.capacity))
    if usable is None:
        return setting, None, without, why
    return setting, _Priced(c, *assess_group(req.workload, c.hardware, c.nodes, c.setup, *key, c.capacity,
                                             setting)), without, ""  # fmt: skip


def elastic_dict(c: Candidate, req: Request) -> dict | None:
    """Elastic recovery beside the same plan without it (None for a one-node plan, and for an on-demand plan
    without --elastic); `in_plan`: the plan's own expected cost is the elastic one."""
    compared = elastic_comparison(c, req)
    if compared is None:
        return None
    (min_nodes, wait), with_, without, why = compared
    out: dict = {"min_nodes": min_nodes, "wait_for_replacement_s": wait, "applicable": with_ is not None}
    if with_ is None:
        return {**out, "reason": why, "in_plan": False}
    e = with_.rel.elastic

    def finite(value: float, digits: int) -> float | None:  # None: that plan would mostly restart (refused)
        return round(value, digits) if math.isfinite(value) else None

    return {
        **out,
        "in_plan": c.rel.elastic is not None,
        "shrink_to_nodes": e.setting.shrink_nodes,
        "expected_usd": finite(with_.usd, 2),
        "expected_hours": finite(with_.hours, 3),
        "without_usd": finite(without.usd, 2),
        "without_hours": finite(without.hours, 3),
        "chance_to_shrink": round(e.shrink_chance, 4),
        "conversion_seconds": round(e.shrink_s, 1),
        "grow_back_seconds": round(e.grow_s, 1),
        "lost_seconds_per_lost_node": round(e.expected_loss_s, 1),
        "without_lost_seconds_per_lost_node": round(e.without_loss_s, 1),
        "universal_convert_bytes_per_s": reliability.UNIVERSAL_CONVERT_BYTES_PER_S,
    }


def elastic_note(c: Candidate, req: Request) -> str | None:
    """One line: the plan's expected cost with elastic recovery beside the one without."""
    d = elastic_dict(c, req)
    if d is None:
        return None
    setting = f"min_nodes {d['min_nodes']}, wait_for_replacement_s {d['wait_for_replacement_s']:g}"
    if not d["applicable"]:
        return f"elastic recovery ({setting}) does not apply: {d['reason']}"
    if d["expected_usd"] is None or d["without_usd"] is None:
        worse = "with" if d["expected_usd"] is None else "without"
        return (f"elastic recovery ({setting}): {worse} it this plan would spend most of its time restarting "
                f"(each conversion ~{d['conversion_seconds'] / 60:,.0f} min at "
                f"{reliability.convert_rate_note(d['universal_convert_bytes_per_s'])})")  # fmt: skip
    change = d["expected_usd"] / d["without_usd"] - 1 if d["without_usd"] else 0.0
    head = (
        f"this plan uses elastic recovery ({setting})" if d["in_plan"]
        else f"with elastic recovery ({setting}; plan with --elastic {d['min_nodes']}:{d['wait_for_replacement_s']:g})"
    )  # fmt: skip
    return (
        f"{head}: ${d['expected_usd']:,.0f} expected, {d['expected_hours']:,.1f} h, against ${d['without_usd']:,.0f}, "
        f"{d['without_hours']:,.1f} h without it ({change:+.1%}): a lost node's survivors shrink to "
        f"{d['shrink_to_nodes']} nodes after the wait ({d['chance_to_shrink']:.0%} of losses), each conversion "
        f"~{d['conversion_seconds'] / 60:,.0f} min at "
        f"{reliability.convert_rate_note(d['universal_convert_bytes_per_s'])}"
    )


def layout_label(c: Candidate) -> str:
    st = c.setup.step
    return f"TP {st.tp} x PP {st.pp} x DP {c.devices // (st.tp * st.pp)}"


def setup_reason(c: Candidate, req: Request) -> str:
    """Why this setup: the fastest that fits; or, as the search chose it (`assess_options`), the fastest of a
    checkpoint split whose run is shorter than the fastest setup's; else the fastest that fits what was pinned."""
    from cli.planner.optimizer import assess_options, best_setup, setup_options, setup_parts

    w, hw = req.workload, c.hardware
    fastest = best_setup(w, hw, c.nodes, default_fit(), headroom=req.memory_headroom)
    if fastest is None or fastest.step.tokens_per_second <= c.setup.step.tokens_per_second:
        return "highest tokens/s that fits"
    options = setup_options(w, hw, c.nodes, default_fit(), headroom=req.memory_headroom)
    key = (c.offer.cloud, c.purchase, c.offer.interruption)
    if c.setup not in options or assess_options(w, hw, c.nodes, options, *key, c.capacity, req.elastic)[0] != c.setup:
        return "highest tokens/s that fits the pinned options"
    rel, _ = assess_group(w, hw, c.nodes, fastest, *key, c.capacity, req.elastic)
    st, parts = fastest.step, setup_parts(w, hw, c.nodes, fastest)
    return (f"the fastest of its checkpoint split, and the shortest run: the fastest that fits, TP {st.tp} x PP "
            f"{st.pp} {fastest.sharding.label}, runs {st.tokens_per_second / c.setup.step.tokens_per_second - 1:+.1%} "
            f"tokens/s but {parts.explain()}: emergency checkpoint {rel.times.emergency_s:,.0f} s against "
            f"{c.rel.times.emergency_s:,.0f} s, restart {rel.restart_s:,.0f} s against {c.rel.restart_s:,.0f} s, "
            f"{rel.wall_hours:,.1f} h against {c.wall_hours:,.1f} h")


def layout_lines(c: Candidate, req: Request) -> list[str]:
    """Why this tensor x pipeline x data layout: the fastest setup of each other layout on the same hardware."""
    from cli.planner.optimizer import best_setup, layouts

    w, hw, nodes = req.workload, c.hardware, c.nodes
    out = []
    for tp, pp in layouts(w, hw, nodes):
        if (tp, pp) == (c.setup.tp, c.setup.pp):
            continue
        other = best_setup(w, hw, nodes, default_fit(), headroom=req.memory_headroom, fixed=FixedSetup(tp=tp, pp=pp))
        label = f"TP {tp} x PP {pp}"
        if other is None:
            out.append(f"  {label}: no setup fits memory")
        else:
            st = other.step
            out.append(f"  {label}: {other.sharding.label}, micro batch {st.micro_batch}: {st.tokens_per_second:,.0f} "
                       f"tokens/s ({st.tokens_per_second / c.setup.step.tokens_per_second - 1:+.1%})")  # fmt: skip
    if out:
        out.insert(0, f"layouts tried on {nodes} x {c.offer.instance_type} (tensor parallel inside a node, pipeline "
                      "stages of whole nodes, or both; a pipeline needs ZeRO 0-1):")  # fmt: skip
    return out


def explain_lines(c: Candidate, req: Request, fit: Fit | None) -> list[str]:
    w, s = req.workload, c.setup
    lines = list(w.explain())
    lines.append(f"setup: {layout_label(c)}, {s.sharding.label}, micro batch {s.step.micro_batch}, grad accum "
                 f"{s.step.grad_accum}, activation checkpointing {'on' if s.checkpointing else 'off'} "
                 f"({setup_reason(c, req)})")  # fmt: skip
    lines += layout_lines(c, req)
    lines += s.memory.explain()
    if fit is not None:
        lines += explain_step(s.step, w, c.hardware, fit)
    lines.append(f"useful time = {w.tokens:,} tokens / {s.step.tokens_per_second:,.0f} tokens/s = "
                 f"{c.rel.useful_hours:.2f} h")  # fmt: skip
    lines += w.overheads.explain(s.step, s.checkpointing)
    lines += c.rel.explain()
    if c.purchase == "spot":
        lines.append(c.capacity.explain() + f"; it adds ${capacity_risk_usd(c, req):,.2f} to the expected cost")
    compared = elastic_comparison(c, req)
    if compared is not None and compared[1] is not None and c.rel.elastic is None:
        lines.append("not in this plan: " + compared[1].rel.elastic.explain())
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

# When a deadline leaves only on-demand plans, spot plans up to this much past it are looked for, and the fastest of
# them that costs at most SPOT_PAST_DEADLINE_SHARE of the plan is named: a deadline a few days tighter than a spot
# fleet can meet would otherwise multiply the cost without a word.
SPOT_PAST_DEADLINE_SLACK = 1.25
SPOT_PAST_DEADLINE_SHARE = 0.8


def wants_spot_past_deadline(best: Candidate, req: Request) -> bool:
    """Whether to look for spot plans past the deadline: the cheapest plan within it is on-demand, and spot was
    allowed (`--purchase any`) with cost the objective."""
    return req.deadline_hours is not None and req.objective == "cost" and req.purchase == "any" and \
        best.purchase == "on-demand"  # fmt: skip


def spot_past_deadline_note(best: Candidate, spot_frontier: list[Candidate], req: Request) -> str | None:
    """The note naming the fastest spot plan past the deadline that costs at most SPOT_PAST_DEADLINE_SHARE of the
    best plan, from the cost/time frontier of spot plans within SPOT_PAST_DEADLINE_SLACK x the deadline."""
    spot = next((c for c in spot_frontier if c.cost_usd <= SPOT_PAST_DEADLINE_SHARE * best.cost_usd), None)
    if spot is None or spot.wall_hours <= req.deadline_hours:
        return None
    return (f"no spot plan meets the {req.deadline_hours:,.0f} h deadline; the fastest that costs "
            f"{1 - SPOT_PAST_DEADLINE_SHARE:.0%} less or more, {describe(spot)}, runs "
            f"{spot.wall_hours - req.deadline_hours:,.0f} h past it for {1 - spot.cost_usd / best.cost_usd:.0%} less: "
            f"--deadline {math.ceil(spot.wall_hours / 24)}d allows it")  # fmt: skip


def price_outlier(c: Candidate) -> str | None:
    """The note for a spot plan on a zone whose catalog row is far below its neighbours (cli/planner/outliers.py):
    the plan is priced at their median; what it would cost at the row's own price."""
    from infra.catalog import default_catalog

    if c.purchase != "spot" or OUTLIER_NOTE not in c.offer.note:
        return None
    o = c.offer
    (row,) = default_catalog().offers(cloud=o.cloud, region=o.region, instance_type=o.instance_type, zone=o.zone)
    own, median = row.spot_usd_per_hour, c.price_usd_per_node_hour
    _, zones = neighbours_median(row, default_catalog().offers(cloud=o.cloud, region=o.region))
    at_own = (c.cost_usd - c.storage_usd) * own / median + c.storage_usd
    return (
        f"{o.instance_type} spot in {', '.join(c.zones) or o.region} is ${own:,.2f}/h on one catalog row "
        f"({o.source}), {median / own:.1f}x below the median of its {zones} neighbouring zone"
        f"{'s' if zones > 1 else ''} in {o.region} (${median:,.2f}/h): a price that far out is often stale or a "
        f"small pool, so this plan is priced at the neighbours' price, ${c.cost_usd:,.0f}; at the row's own price "
        f"it would cost ${at_own:,.0f}; check it with `trainfleet catalog refresh --cloud {o.cloud}`"
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
            f"{(rel.interval_s + t.durable_lag_s) / 60:,.0f} min of work (priced in the interruption loss); "
            + emergency_remedy(rel.times.parts)
        )
    if (line := median_note(best, req)) is not None:
        out.append(line)
    if (line := interval_note(best, req)) is not None:
        out.append(line)
    if best.purchase == "spot":
        out += capacity_options(best, req)
    if (line := elastic_note(best, req)) is not None:
        out.append(line)
    return out


def emergency_remedy(parts: reliability.CheckpointParts | None) -> str:
    """What would shorten an emergency checkpoint that misses the notice, by how the checkpoint lies."""
    if parts is None or not parts.model_bytes or parts.model_bytes < parts.saved_bytes / 2:
        return "more nodes shorten the step and each node's share"
    return (f"node {parts.saved_node}'s part is {reliability.gb(parts.saved_bytes)} GB, "
            f"{reliability.gb(parts.model_bytes)} GB of it the weights data-parallel rank 0 alone writes: more nodes "
            "shorten the step and the optimizer shards, not those; ZeRO-3 or (more) pipeline stages split them")


def capacity_options(c: Candidate, req: Request) -> list[str]:
    """Ways to make a spot plan's capacity easier to get, each with what it costs under the same model: an
    on-demand base node (rank 0 never interrupted, one spot node fewer to find), and fallback instance types
    that carry the same accelerators (a wider spot pool; not priced, since the group may land on any of them)."""
    from infra.catalog import default_catalog

    out = []
    o = c.offer
    if c.nodes > 1 and o.on_demand_usd_per_hour:
        mixed = mixed_fleet_cost(c, req)
        if mixed is not None:
            cost, spot_capacity = mixed
            out.append(
                f"an on-demand base of 1 node (stack: purchase: mixed, on_demand_base: 1) keeps rank 0 running and "
                f"asks spot for {c.nodes - 1} nodes ({spot_capacity.label()}"
                f"{', measured' if spot_capacity.measured else ''}): ${cost:,.0f} expected, "
                f"{(cost / c.cost_usd - 1):+.1%} against this plan"
            )
    sizes = [x for x in default_catalog().offers(cloud=o.cloud, region=o.region, accelerator=o.accelerator)
             if x.instance_type != o.instance_type and x.accelerators_per_node == o.accelerators_per_node
             and x.spot_usd_per_hour and (not c.zones or x.zone in c.zones)
             and x.memory_gib >= o.memory_gib and (x.network_gbps or 0) >= (o.network_gbps or 0)]  # fmt: skip
    if sizes:
        types = sorted({(x.instance_type, x.spot_usd_per_hour) for x in sizes}, key=lambda t: (t[1], t[0]))
        listed = ", ".join(f"{t} (${p:,.2f}/h spot)" for t, p in types[:3])
        out.append(
            f"fallback types with the same {o.accelerators_per_node} x {o.accelerator}, host memory and network in "
            f"{', '.join(c.zones) or o.region}: {listed}; list them in fleets[].fallback_instance_types to widen the "
            "spot pool (the group may then run on any of them, at its price)"
        )
    return out


def mixed_fleet_cost(c: Candidate, req: Request):
    """(expected USD, the spot nodes' capacity) of the same plan with one on-demand node and the rest spot."""
    from cli.planner.optimizer import capacity_for
    from infra.catalog.capacity import default_placement_scores

    spot_nodes = c.nodes - 1
    capacity = capacity_for(c.offer, "spot", c.zones, spot_nodes, default_placement_scores())
    if not capacity.obtainable:
        return None
    from cli.planner.optimizer import setup_parts

    w, st = req.workload, c.setup.step
    setting = None
    if req.elastic:
        setting = reliability.elastic_setting(c.nodes, st.grad_accum, st.tp, st.pp, *req.elastic)[0]
    rel = reliability.assess(w.tokens / st.tokens_per_second / 3600, c.nodes, c.hardware.devices_per_node,
                             c.offer.cloud, True, c.offer.interruption, w.checkpoint_bytes,
                             c.hardware.network_gbits, st.step_s, **w.overheads.shares(st, c.setup.checkpointing),
                             spot_nodes=spot_nodes,
                             capacity_wait_s=capacity.wait_s, start_held_share=capacity.held_share,
                             capacity_first_try=capacity.first_try, elastic=setting,
                             parts=setup_parts(w, c.hardware, c.nodes, c.setup))  # fmt: skip
    if not rel.feasible:
        return None
    usd = rel.billed_usd(spot_nodes * c.price_usd_per_node_hour, held_usd_per_hour=c.offer.on_demand_usd_per_hour)
    return usd + reliability.storage_usd(c.offer.cloud, w.checkpoint_bytes, rel.wall_hours), capacity


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
    if not result.unbounded and stats.unobtainable and not stats.unbearable:
        return TrainfleetError(
            f"every spot plan that fits {what} in memory is in a zone or region whose measured placement score is "
            f"1/10, \"not likely to succeed\" ({stats.unobtainable} candidates); use --purchase on-demand or any, "
            "widen --regions, or refresh the scores with `trainfleet catalog refresh --cloud aws --placement-scores`"
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
    if not result.unbounded and stats.unsplit and not stats.hardware_evaluated:
        return TrainfleetError(f"{unsplit_line(result)}; give a --global-batch they split, or raise --max-nodes")
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


def unsplit_line(result: Search) -> str:
    """The fleets not offered because no layout of theirs splits the global batch, with the nearest batches the
    largest of them could train (cli/planner/batch.py)."""
    w, unsplit = result.request.workload, result.stats.unsplit
    largest = max(unsplit)
    return (f"{sum(unsplit.values())} fleets of {', '.join(f'{d:,}' for d in sorted(unsplit))} devices not offered: no "
            f"layout of theirs splits the global batch of {w.batch_sequences:,} sequences evenly over its data-parallel "
            f"ranks ({largest:,} devices could train "
            f"{' or '.join(f'{b:,}' for b in nearest_batches(w.batch_sequences, largest))} sequences)")  # fmt: skip
