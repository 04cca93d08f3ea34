"""The planned job's expected cost per fleet, as the stack declares it: the planner's model, not a plan.

For each fleet: the job (params, tokens, precision) on the fleet's instance type, node count and declared
DeepSpeed setup gives a step time (cli/planner/throughput via optimizer.best_setup with every choice
pinned); the reliability model (cli/planner/reliability.assess) turns useful hours into expected wall hours
with the fleet's spot interruptions (its zones' interruption rate, the worst of them), hardware failures,
restarts that wait for replacement capacity (and for a full set of spot nodes, as cli/planner/capacity.py
reads the placement scores or assumes them), the emergency checkpoint against the cloud's notice, and the
declared checkpoint interval, on the declared tensor x pipeline layout. The list price is the preview's own fleet price (zone mean, per purchase).
With checkpoint.elastic, a lost node costs what elastic recovery expects (reliability.elastic_recovery: wait, shrink,
train on fewer nodes, grow back); an assumption line sets it beside the same fleet without it.

    list     = fleet $/h x (useful + evaluation/stall hours)         the job with nothing going wrong
    expected = fleet $/h x expected wall hours                       what the model says it will bill
"""

from __future__ import annotations

from cli.preview.model import FleetExpectation, UsageValue
from infra.config import Fleet, StackConfig
from infra.errors import TrainfleetError


def expected_for(config: StackConfig, usage: dict[str, UsageValue]) -> tuple[list[FleetExpectation], str]:
    """One expectation per fleet the model can assess, and a note naming the fleets it cannot (or '')."""
    from infra.catalog import default_catalog

    catalog = default_catalog()
    out, skipped = [], []
    for fleet in config.fleets:
        try:
            out.append(_fleet(config, fleet, catalog, usage))
        except _NoExpectation as exc:
            skipped.append(f"{fleet.name}: {exc}")
    return out, "; ".join(skipped)


class _NoExpectation(Exception):
    """The model cannot assess this fleet (no accelerator data, does not fit, ...): the reason."""


def _fleet(config: StackConfig, fleet: Fleet, catalog, usage: dict[str, UsageValue]) -> FleetExpectation:
    from cli.planner import reliability
    from cli.planner.calibration import default_fit
    from cli.planner.capacity import spot_capacity
    from cli.planner.optimizer import FixedSetup, best_setup, hardware_for, setup_parts
    from cli.planner.overheads import JobOverheads
    from cli.planner.workload import Workload, resolve_shape
    from cli.preview.pricing.base import PricingContext, fleet_components, zone_pool
    from infra.catalog.capacity import default_placement_scores
    from infra.parallelism import data_parallel, layout_error

    offers = catalog.offers(cloud=fleet.cloud, region=fleet.region, instance_type=fleet.instance_type)
    in_zones = zone_pool(offers, fleet.zones)
    if not in_zones:
        raise _NoExpectation(f"the catalog has no {fleet.instance_type} in {fleet.region}")
    offer = in_zones[0]
    hw = hardware_for(offer, catalog.accelerator(offer.accelerator), config.job.precision)
    if hw is None:
        raise _NoExpectation(f"no {config.job.precision} peak for {fleet.instance_type}'s accelerators")
    job, ds = config.job, config.deepspeed
    try:
        shape = resolve_shape(job.model, job.params)
    except TrainfleetError:
        shape = resolve_shape(None, job.params)
    devices = fleet.nodes * hw.devices_per_node
    layout = (ds.tensor_parallel, ds.pipeline_parallel)
    misfit = layout_error(*layout, hw.devices_per_node, fleet.nodes)
    if misfit:
        raise _NoExpectation(misfit)
    batch_tokens = ds.micro_batch * ds.grad_accum * data_parallel(devices, *layout) * job.seq_len
    work = Workload(shape, job.tokens, job.seq_len, job.precision, job.method, job.lora_rank, batch_tokens,
                    JobOverheads.from_stack(job))
    offload = (
        "optimizer+params"
        if ds.offload_param != "none"
        else "optimizer"
        if ds.offload_optimizer != "none"
        else "none"
    )
    pinned = FixedSetup(ds.zero_stage, offload, ds.micro_batch, *layout)
    setup = best_setup(work, hw, fleet.nodes, default_fit(), fixed=pinned)
    if setup is None:
        raise _NoExpectation(
            f"ZeRO-{ds.zero_stage}, offload {offload}, micro batch {ds.micro_batch}"
            + (f", TP {layout[0]} x PP {layout[1]}" if layout != (1, 1) else "") + " does not fit in memory on "
            f"{fleet.nodes} x {fleet.instance_type} by the planner's memory model (`trainfleet plan` finds one that does)"
        )
    on_demand, spot = _purchase_split(fleet)
    ctx = PricingContext(catalog, usage)
    lines = fleet_components(ctx, cloud=fleet.cloud, region=fleet.region, zones=list(fleet.zones),
                             instance_type=fleet.instance_type, on_demand_nodes=on_demand, spot_nodes=spot)  # fmt: skip
    if any(c.unit_price is None for c in lines):
        raise _NoExpectation(f"the catalog has no price for every purchase option of {fleet.instance_type}")
    per_hour = sum(
        c.unit_price * n for c, n in zip(lines, [x for x in (on_demand, spot) if x > 0], strict=True)
    )
    spot_per_hour = lines[-1].unit_price * spot if spot > 0 else 0.0
    rates = [o.interruption for o in in_zones]  # the fleet may land in any of its zones: the worst of them
    interruption = None if any(r is None for r in rates) else max(rates, key=lambda r: r.hazard_per_node_hour)
    useful_h = work.tokens / setup.step.tokens_per_second / 3600
    capacity = None
    if spot > 0:
        capacity = spot_capacity(default_placement_scores(), fleet.cloud, fleet.region, tuple(fleet.zones),
                                 fleet.instance_type, spot)  # fmt: skip
        if not capacity.obtainable:
            raise _NoExpectation(f"{capacity.source}: \"not likely to succeed\", so no expected cost")
    declared = config.checkpoint.elastic
    elastic, not_elastic = None, ""
    if declared is not None:
        elastic, not_elastic = reliability.elastic_setting(fleet.nodes, ds.grad_accum, *layout, declared.min_nodes,
                                                           declared.wait_for_replacement_s)  # fmt: skip

    def assess(elastic):
        return reliability.assess(
            useful_h, fleet.nodes, hw.devices_per_node, fleet.cloud, spot > 0, interruption, work.checkpoint_bytes,
            hw.network_gbits, setup.step.step_s, **work.overheads.shares(setup.step, setup.checkpointing),
            interval_s=config.checkpoint.interval_minutes * 60, spot_nodes=spot,
            capacity_wait_s=capacity.wait_s if capacity else 0.0, elastic=elastic,
            start_held_share=capacity.held_share if capacity else 1.0,
            capacity_first_try=capacity.first_try if capacity else None,
            parts=setup_parts(work, hw, fleet.nodes, setup),  # node 0's part under ZeRO-0/1/2 (issue 29)
        )  # fmt: skip

    def billed(rel):  # hours of the whole fleet's per_hour that its nodes bill
        return rel.billed_usd(spot_per_hour, held_usd_per_hour=per_hour - spot_per_hour) / per_hour

    rel = assess(elastic)
    if not rel.feasible:
        raise _NoExpectation(
            f"{fleet.nodes} nodes would spend most of the run restarting (the planner refuses such a plan)"
        )
    interruptions = (  # events: spot nodes go several at a time (capacity.nodes_lost_per_event)
        spot * rel.spot_hazard_per_node_hour / rel.nodes_per_spot_event
        + fleet.nodes * rel.failure_hazard_per_node_hour
    ) * rel.wall_hours
    assumptions = [
        f"{useful_h:,.1f} h of useful work at {setup.step.tokens_per_second:,.0f} tokens/s (the planner's "
        f"throughput model for ZeRO-{ds.zero_stage}, micro batch {ds.micro_batch}"
        + (f", TP {layout[0]} x PP {layout[1]}" if layout != (1, 1) else "") + f") + {rel.eval_hours:,.1f} h "
        f"evaluation + {rel.data_stall_hours:,.1f} h data-loader stalls ("
        + work.overheads.assumption(setup.step, setup.checkpointing) + ")",
        f"spot interruption rate {'unknown, taken as >20%/month' if interruption is None else interruption.label} "
        "(worst of the fleet's zones); "
        f"failures {reliability.FAILURES_PER_DEVICE_HOUR:g} per device-hour; a lost node waits "
        f"{reliability.PROVISION_S / 60:.0f} min for a replacement"
        + (f" plus {capacity.wait_s / 60:.0f} min for spot capacity, as before the start ({capacity.source})"
           if capacity else ""),
        f"emergency checkpoint {rel.times.emergency_s:.0f} s vs the {rel.notice_s:.0f} s notice: "
        + ("fits" if rel.emergency_checkpoint_fits else "does not fit, each interruption loses work"),
        f"checkpoint every {config.checkpoint.interval_minutes:g} min (declared)",
    ]
    if fleet.purchase == "mixed":
        assumptions.append(f"{on_demand} on-demand node(s) are never interrupted, {spot} spot")
    if rel.elastic is not None:
        without = assess(None)
        e = rel.elastic
        assumptions.append(
            f"elastic recovery (checkpoint.elastic: min_nodes {e.setting.min_nodes}, wait {e.setting.wait_s:g} s): a "
            f"lost node's survivors shrink to {e.setting.shrink_nodes} of {fleet.nodes} nodes when no replacement is up "
            f"within the wait ({e.shrink_chance:.0%} of losses), converting the checkpoint in {e.shrink_s:,.0f} s and "
            f"back in {e.grow_s:,.0f} s at {reliability.convert_rate_note()} (benchmarks/elastic_recovery.py): "
            f"{e.expected_loss_s:,.0f} s lost per lost node "
            f"against {e.without_loss_s:,.0f} s; expected ${per_hour * billed(rel):,.0f} ({rel.wall_hours:,.1f} h) "
            + (f"against ${per_hour * billed(without):,.0f} ({without.wall_hours:,.1f} h) without it"
               if without.feasible else "; without it the fleet would spend most of the run restarting")
        )  # fmt: skip
    elif declared is not None:
        assumptions.append(f"checkpoint.elastic not priced: {not_elastic}")
    return FleetExpectation(
        fleet=fleet.name, usd_per_hour=per_hour, ideal_hours=rel.worked_hours,
        wall_hours=rel.wall_hours, interruptions=interruptions,
        billed_hours=billed(rel),
        emergency_checkpoint_fits=rel.emergency_checkpoint_fits, assumptions=tuple(assumptions),
    )  # fmt: skip


def _purchase_split(fleet: Fleet) -> tuple[int, int]:
    """(on-demand nodes, spot nodes) the way the fleet's group splits them (an ASG's mixed instances policy)."""
    if fleet.purchase == "on-demand":
        return fleet.nodes, 0
    if fleet.purchase == "spot":
        return 0, fleet.nodes
    base = min(fleet.on_demand_base, fleet.nodes)
    above = -(-(fleet.nodes - base) * fleet.on_demand_percentage_above_base // 100)  # rounded up, as AWS does
    return base + above, fleet.nodes - base - above
