"""`trainfleet plan` (search the catalog for the best plan) and `trainfleet estimate` (price a fixed choice).

The planner is imported inside the command bodies so `trainfleet --help` stays fast.
"""

from __future__ import annotations

import gc
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from cli.app import app
from cli.options import MaxPriceAgeOpt, comma_list, finite_float
from cli.output import WideOpt
from infra.errors import TrainfleetError, did_you_mean, shown

ModelOpt = Annotated[
    str | None, typer.Option("--model", help="preset: llama-7b, llama-13b, llama-70b, mpt-7b, ...")
]
ParamsOpt = Annotated[str | None, typer.Option("--params", help="parameters, e.g. 7B, 350M (K/M/B/T)")]
TokensOpt = Annotated[str, typer.Option("--tokens", help="training tokens, e.g. 200B, 1T")]
SeqOpt = Annotated[int, typer.Option("--seq-len", min=128, max=1_048_576, help="sequence length (tokens)")]
PrecOpt = Annotated[str, typer.Option("--precision", help="bf16, fp16, fp8 or fp32")]
MethodOpt = Annotated[str, typer.Option("--method", help="full (pre-training / full fine-tune) or lora")]
RankOpt = Annotated[int, typer.Option("--lora-rank", min=1, max=1024, help="LoRA rank")]
BatchOpt = Annotated[
    str | None,
    typer.Option("--global-batch", help="tokens per optimizer step, a whole number of sequences, trained exactly; "
                 "default: the power of two of sequences nearest 4Mi tokens (full) or 256Ki (lora)"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for machines instead of tables.")]
LocalZonesOpt = Annotated[
    bool, typer.Option("--local-zones", help="also use AWS Local Zones (they need an account opt-in)")
]
HeadroomOpt = Annotated[
    float,
    typer.Option(
        "--memory-headroom",
        parser=finite_float("--memory-headroom", minimum=0, maximum=0.9, example="0.15"),
        help="share of device memory every plan leaves available (0 to 0.9; default 0.1 = 10%)",
    ),
]
# Defaults: cli/planner/overheads.py (not imported here: `trainfleet --help` loads no planner module).
EvalEveryOpt = Annotated[
    int | None,
    typer.Option("--eval-every", min=1, max=10**9,
                 help="optimizer steps between evaluations (default 1000, as Megatron-LM's GPT-3 175B example)"),
]
EvalItersOpt = Annotated[
    int | None,
    typer.Option("--eval-iters", min=0, max=10**6,
                 help="forward-only batches per evaluation (default 10; 0: no evaluation during training)"),
]
DataStallOpt = Annotated[
    float | None,
    typer.Option(
        "--data-stall",
        parser=finite_float("--data-stall", minimum=0, maximum=0.9, example="0.05"),
        help="share of the steps' time spent waiting for data (0 to 0.9; default 0: pre-tokenized shards)",
    ),
]
ExplainOpt = Annotated[
    bool, typer.Option("--explain", help="Show the formulas and inputs behind every figure.")
]


def _choice(value: str, allowed: tuple[str, ...], option: str) -> str:
    if value not in allowed:
        raise TrainfleetError(
            f"{option} {shown(value)} is not allowed{did_you_mean(value, list(allowed))}; use one of {', '.join(allowed)}"
        )
    return value


def _csv(value: str | None, known: list[str], option: str) -> frozenset[str] | None:
    if value is None:
        return None
    items = comma_list(value, option, ",".join(known[:2]))
    for item in items:
        if item not in known:
            raise TrainfleetError(f"{option}: {shown(item)} is not in the catalog{did_you_mean(item, known)}")
    return frozenset(items)


def _elastic(value: str | None) -> tuple[int, float] | None:
    """--elastic MIN_NODES[:WAIT_S] -> (min_nodes, wait s), checked by the stack schema's own checkpoint.elastic."""
    if value is None:
        return None
    from infra.config import Elastic  # pydantic: ~60 ms of a plan's start-up, paid only with --elastic

    least, _, wait = value.strip().partition(":")
    try:  # int() first: the schema would take "2.0" as 2; pydantic's ValidationError is a ValueError
        given = {"min_nodes": int(least), **({"wait_for_replacement_s": float(wait)} if wait.strip() else {})}
        setting = Elastic(**given)
    except ValueError:
        raise TrainfleetError(
            f"--elastic {shown(value)} is not MIN_NODES[:WAIT_S]: a whole number of nodes from 1 to 1024, then "
            "optionally the seconds to wait for a replacement, 0 to 86400; e.g. --elastic 4:600"
        ) from None
    return setting.min_nodes, setting.wait_for_replacement_s


def _workload(model, params, tokens, seq_len, precision, method, lora_rank, global_batch, eval_every, eval_iters,
              data_stall):  # fmt: skip
    from cli.planner.batch import default_batch_sequences, whole_sequences_problem
    from cli.planner.overheads import JobOverheads
    from cli.planner.workload import Workload, resolve_shape
    from infra.units import parse_count

    _choice(precision, ("bf16", "fp16", "fp8", "fp32"), "--precision")
    _choice(method, ("full", "lora"), "--method")
    shape = resolve_shape(model, parse_count(params, "--params") if params is not None else None)
    n_tokens = parse_count(tokens, "--tokens")
    if global_batch is None:
        batch = default_batch_sequences(method, seq_len) * seq_len
    else:
        batch = parse_count(global_batch, "--global-batch")
        problem = whole_sequences_problem(batch, seq_len)
        if problem:
            raise TrainfleetError(problem)
    if n_tokens < batch:
        raise TrainfleetError(
            f"--tokens {shown(tokens)} is less than one optimizer step of --global-batch {batch:,} tokens; "
            "raise --tokens or lower --global-batch"
        )
    overheads = JobOverheads.given(eval_every_steps=eval_every, eval_iters=eval_iters, data_stall_share=data_stall)
    return Workload(shape, n_tokens, seq_len, precision, method, lora_rank, batch, overheads)


@app.command("plan")
def plan_command(
    tokens: TokensOpt,
    model: ModelOpt = None,
    params: ParamsOpt = None,
    seq_len: SeqOpt = 2048,
    precision: PrecOpt = "bf16",
    method: MethodOpt = "full",
    lora_rank: RankOpt = 16,
    global_batch: BatchOpt = None,
    clouds: Annotated[str | None, typer.Option(help="comma list: aws,gcp,azure")] = None,
    regions: Annotated[str | None, typer.Option(help="comma list, e.g. us-east-1,us-central1")] = None,
    accelerators: Annotated[str | None, typer.Option(help="comma list, e.g. H100-80GB,A100-80GB")] = None,
    max_nodes: Annotated[int, typer.Option(min=1, max=1024, help="most nodes in the fleet")] = 64,
    deadline: Annotated[str | None, typer.Option(help="latest expected wall time, e.g. 72h, 3d")] = None,
    budget: Annotated[str | None, typer.Option(help="most expected USD, e.g. 40000 or 40K")] = None,
    purchase: Annotated[str, typer.Option(help="spot, on-demand or any")] = "any",
    objective: Annotated[str, typer.Option(help="cost or time")] = "cost",
    time_value: Annotated[
        float,
        typer.Option(parser=finite_float("--time-value", minimum=0, maximum=1e6, example="50"),
                     help="USD per hour of wall time, added to cost"),
    ] = 0.0,
    local_zones: LocalZonesOpt = False,
    memory_headroom: HeadroomOpt = 0.1,
    eval_every: EvalEveryOpt = None,
    eval_iters: EvalItersOpt = None,
    data_stall: DataStallOpt = None,
    elastic: Annotated[
        str | None,
        typer.Option(
            "--elastic",
            metavar="MIN_NODES[:WAIT_S]",
            help="price elastic recovery (shrink to at least MIN_NODES after WAIT_S s, default 600, without a "
            "replacement) into every pure data-parallel multi-node plan; --write-stack writes it",
        ),
    ] = None,
    top: Annotated[int, typer.Option(min=1, max=50, help="plans to list (best + runners-up)")] = 3,
    write_stack: Annotated[
        str | None, typer.Option(help="write stacks/Pulumi.ENV.yaml from the best plan")
    ] = None,
    force: Annotated[
        bool,
        typer.Option(help="update the plan's keys in an existing stack file (all else kept; old file kept as .bak-<UTC time>)"),
    ] = False,
    plot: Annotated[
        str | None,
        typer.Option("--plot", metavar="FILE.svg|-", help="draw the cost/time frontier: FILE.svg, or - for the terminal"),
    ] = None,
    max_price_age: MaxPriceAgeOpt = 90.0,
    json_out: JsonOpt = False,
    explain: ExplainOpt = False,
    wide: WideOpt = False,
) -> None:
    """Search the catalog for the cost-optimal (or fastest) interruption-aware plan."""
    t0 = time.perf_counter()
    from cli.planner.calibration import default_fit
    from cli.planner.optimizer import Request, alternatives, search
    from cli.planner.report import (
        SPOT_PAST_DEADLINE_SLACK,
        impossible,
        notes,
        plan_dict,
        price_notes,
        spot_past_deadline_note,
        unsplit_line,
        wants_spot_past_deadline,
    )
    from cli.planner.standing import Shown
    from infra.catalog import default_catalog
    from infra.catalog.capacity import default_placement_scores
    from infra.units import MAX_HOURS, parse_hours, parse_money

    work = _workload(model, params, tokens, seq_len, precision, method, lora_rank, global_batch, eval_every,
                     eval_iters, data_stall)  # fmt: skip
    catalog = default_catalog()
    offers = catalog.all_offers
    req = Request(
        workload=work,
        clouds=_csv(clouds, ["aws", "gcp", "azure"], "--clouds"),
        regions=_csv(regions, sorted({o.region for o in offers}), "--regions"),
        accelerators=_csv(
            accelerators, sorted({o.accelerator for o in offers if o.accelerator}), "--accelerators"
        ),
        max_nodes=max_nodes,
        deadline_hours=parse_hours(deadline, "--deadline") if deadline is not None else None,
        budget_usd=parse_money(budget, "--budget") if budget is not None else None,
        purchase=_choice(purchase, ("spot", "on-demand", "any"), "--purchase"),
        objective=_choice(objective, ("cost", "time"), "--objective"),
        time_value_usd_per_hour=time_value,
        local_zones=local_zones,
        memory_headroom=memory_headroom,
        elastic=_elastic(elastic),
    )
    stack_target = None
    if write_stack is not None:  # `--write-stack ''` is an error, not "write nothing"
        from infra.stack_file import check_writable_stack, writable_stack_path

        stack_target = writable_stack_path(write_stack)
        if (stack_target.exists() or stack_target.is_symlink()) and not force:
            raise TrainfleetError(
                f"{stack_target} exists; pass --force to update the plan's keys in it (job, fleet, deepspeed, "
                "checkpoint interval; the rest is kept and the old file backed up) or pick another ENV"
            )
        check_writable_stack(stack_target)  # a folder, or a file that is no stack: refused before the search
    plot_target = None
    if plot is not None:  # a bad path fails here, not after the search
        from cli.planner.plot import check_target

        plot_target = check_target(plot, json_out)
    scores = default_placement_scores()
    t_setup = time.perf_counter()
    fit = default_fit()
    t_fit = time.perf_counter()
    gc.disable()  # tens of thousands of plan objects without cycles: collecting them mid-search is wasted time
    try:
        result = search(req, offers, catalog.accelerators, fit, scores=scores, shown=Shown(top, MAX_HOURS))
    finally:
        gc.freeze()  # and at exit: the interpreter's last collection need not walk them either
        gc.enable()
    t_search = time.perf_counter()
    # A run longer than ten years is no plan (and a stack file refuses planned_hours above that).
    selection = result.select(top, max_hours=MAX_HOURS)
    if not selection.count:
        if not result.feasible:  # say which bound failed and what came closest: every plan, none skipped
            raise impossible(search(req, offers, catalog.accelerators, fit, prune=False, scores=scores)
                             if result.pruned else result)  # fmt: skip
        raise TrainfleetError(
            f"the fastest plan would run {min(c.wall_hours for c in result.feasible):,.0f} h, more than "
            f"10 years ({MAX_HOURS:,.0f} h); lower --tokens or raise --max-nodes"
        )
    ranked = selection.leaders  # the best plan of each instance type and purchase, best first
    best = ranked[0]
    alts = alternatives(ranked, top)
    front = selection.frontier
    spot_note = None
    if wants_spot_past_deadline(best, req):  # a second search, of spot fleets a little past the deadline
        spot_req = replace(req, purchase="spot", deadline_hours=req.deadline_hours * SPOT_PAST_DEADLINE_SLACK)
        spot = search(spot_req, offers, catalog.accelerators, fit, scores=scores, shown=Shown(1, MAX_HOURS))
        spot_note = spot_past_deadline_note(best, spot.select(1, max_hours=MAX_HOURS).frontier, req)
    written = None
    if stack_target is not None:
        written = _write(best, req, stack_target)
    out = {
        "best": plan_dict(best, req, explain, fit),
        "alternatives": [plan_dict(c, req, explain, fit) for c in alts],
        "frontier": [plan_dict(c, req, False, fit) for c in front],
        "notes": notes(best, front, req) + ([spot_note] if spot_note else [])
        + price_notes(best, [*alts, *front], max_price_age) + ([unsplit_line(result)] if result.stats.unsplit else []),
        "search": {
            "offers": result.stats.offers_considered,
            "candidates": result.stats.candidates,
            "feasible": selection.count,
            "hardware_node_pairs": result.stats.hardware_evaluated,
            # fleets (hardware x node count) whose plans could not rank among --top nor stand on the frontier:
            # not searched, so `candidates` and `feasible` count the others (cli/planner/standing.py)
            "fleets_skipped": result.stats.not_shown,
            "fleets_not_splitting_batch": sum(result.stats.unsplit.values()),
            "setups_evaluated": result.stats.setups_evaluated,
            "seconds": {
                "setup": round(t_setup - t0, 4),
                "calibration": round(t_fit - t_setup, 4),
                "search": round(t_search - t_fit, 4),
                "rank": round(time.perf_counter() - t_search, 4),
            },
        },
    }
    if written:
        out["stack_file"] = str(written)
    if json_out:
        from cli.output import print_json

        print_json(out)
    else:
        _print_plans(out, req, best, explain, wide)
    if plot is not None:
        _plot(out, req, plot_target, json_out)


def _plot(out: dict, req, target: Path | None, json_out: bool) -> None:
    """The picture after the tables: characters on stdout for `-`, else the SVG (its "wrote" line on stderr
    under --json, so the JSON stays clean)."""
    from cli.output import console, err_console, output_width
    from cli.planner.plot import text_plot, write_svg

    if target is None:
        console.print("\n" + text_plot(out, output_width()), highlight=False, markup=False, soft_wrap=True)
        return
    written = write_svg(out, target, _job_label(req.workload), req.objective)
    (err_console if json_out else console).print(f"wrote {written}", highlight=False, markup=False)


def _job_label(w, more: str = "") -> str:
    """'llama-7b (6.74B params, 200B tokens, full)': the job as the plan's header and its picture name it."""
    return f"{w.shape.name} ({w.params / 1e9:.3g}B params, {w.tokens / 1e9:,.4g}B tokens, {w.method}{more})"


def _write(best, req, target: Path) -> Path:
    """A new stack file, or the plan's keys merged into the existing one (everything else kept, backup beside
    it); what was dropped as stale and where the backup is go to stderr, so --json stays clean."""
    from cli.output import err_console
    from cli.planner.stack import write_plan

    written = write_plan(best, req, target)
    for note in written.notes:
        err_console.print(f"note: {note}", highlight=False, markup=False)
    if written.backup is not None:
        err_console.print(f"note: the previous {target.name} is kept as {written.backup}", highlight=False,
                          markup=False)  # fmt: skip
    return written.path


def _print_plans(out: dict, req, best, explain: bool, wide: bool = False) -> None:
    from cli.output import Col, console, money, show, table

    b = out["best"]
    w = req.workload
    console.print(
        f"[bold]Best plan[/] for {_job_label(w, f', objective {req.objective}')}:",
        highlight=False,
    )
    console.print(
        f"  {b['nodes']} x {b['instance_type']} ({b['devices']} x {b['accelerator']}) {b['purchase']} in "
        f"{b['cloud']} {b['region']} {','.join(b['zones'])}\n"
        f"  ZeRO-{b['zero_stage']}, offload {b['offload']}, micro batch {b['micro_batch']}, grad accum "
        f"{b['grad_accum']}, activation checkpointing {'on' if b['activation_checkpointing'] else 'off'}, "
        f"checkpoint every {b['checkpoint_interval_minutes']:g} min\n"
        f"  {b['wallclock_hours']:,.1f} h wall clock (expected; 80% interval {b['wallclock_hours_low']:,.1f}-"
        f"{b['wallclock_hours_high']:,.1f} h), {money(b['expected_cost_usd'])} expected "
        f"({short_money(b['expected_cost_usd_low'])}-{short_money(b['expected_cost_usd_high'])}), "
        f"{b['tokens_per_second']:,.0f} tokens/s, MFU {b['mfu']:.1%}\n"
        f"  memory per device: {_memory_line(b)}\n"
        f"  price: ${b['price_usd_per_node_hour']:,.4f}/node-h {b['purchase']}, {_price_age_label(b)}"
        + (f"\n  capacity: {_capacity_line(b)}" if b["purchase"] == "spot" else ""),
        highlight=False,
    )
    show(_breakdown_table(b["breakdown"], b["expected_cost_usd"], wide), wide=wide)

    def rows(plans):
        return [
            (f"{p['nodes']} x {p['instance_type']}",
             p["purchase"], f"{p['cloud']} {p['region']}", f"{p['wallclock_hours']:,.1f}",
             money(p["expected_cost_usd"]),
             f"{p['wallclock_hours_low']:,.0f}-{p['wallclock_hours_high']:,.0f} h, "
             f"{short_money(p['expected_cost_usd_low'])}-{short_money(p['expected_cost_usd_high'])}",
             p["interruption"], f"{p['devices']} x {p['accelerator']}",
             f"ZeRO-{p['zero_stage']}, offload {p['offload']}",
             _capacity_cell(p), _age_cell(p), ",".join(p["zones"]))
            for p in plans
        ]  # fmt: skip

    # At 80 columns: what to rent, where, how long and for how much; the rest as width allows.
    cols = [
        Col("nodes x instance"),
        Col("purchase"),
        Col("where"),
        Col("wall (h)", "right"),
        Col("expected cost", "right"),
        Col("80% interval", "right", drop=1),
        Col("interruption", drop=2),
        Col("devices", drop=3),
        Col("setup", drop=4),
        Col("capacity", drop=5),
        Col("price age", drop=6),
        Col("zones", wide=True),
    ]
    if out["alternatives"]:
        show(table("Runners-up", cols, rows(out["alternatives"]), wide=wide), wide=wide)
    show(table("Cost/time frontier (no plan is both faster and cheaper)", cols, rows(out["frontier"]), wide=wide),
         wide=wide)  # fmt: skip
    for line in b["assumptions"]:
        console.print(f"[dim]assumption:[/] {line}", highlight=False)
    for line in out["notes"]:
        console.print(f"[yellow]note:[/] {line}", highlight=False)
    if explain:
        console.print("[bold]Why[/]")
        for line in b["explain"]:
            console.print(f"  {line}", highlight=False, markup=False)
    s = out["search"]
    console.print(
        f"[dim]searched {s['offers']} offers, {s['candidates']} candidates, {s['feasible']} feasible[/]"
    )
    if s["fleets_skipped"]:
        skipped = s["fleets_skipped"]
        console.print(f"[dim]skipped {skipped:,} fleets: none of their plans could rank here or be on the frontier[/]")
    if "stack_file" in out:
        console.print(f"wrote {out['stack_file']}", highlight=False)


def short_money(usd: float) -> str:
    """$5.4K, $11.6K, $1.2M: an interval's ends, to the precision an interval has."""
    for unit, size in (("M", 1e6), ("K", 1e3)):
        if usd >= size:
            return f"${usd / size:,.1f}{unit}"
    return f"${usd:,.0f}"


def _capacity_cell(p: dict) -> str:
    if p["purchase"] != "spot":
        return "on-demand"
    cap = p["capacity"]
    if cap["score"] is None:
        return f"{cap['expected_wait_minutes'] / 60:.1f} h assumed"
    return f"{cap['score']}/10 {'measured' if cap['measured'] else 'assumed'}"


def _capacity_line(p: dict) -> str:
    cap, n = p["capacity"], p["nodes"]
    what = ("no placement score: published spot traces' wait" if cap["score"] is None else
            f"{cap['score']}/10 {'measured placement score' if cap['measured'] else 'assumed, no placement score'}")
    return (f"{what}: {cap['chance_full_set_within_1h']:.0%} chance of holding {f'all {n} nodes' if n > 1 else 'the node'} within "
            f"1 h, {cap['expected_wait_minutes']:,.0f} min expected wait for a full set, {cap['replace_node_minutes']:,.0f} "
            f"min to replace a lost node; waiting for capacity adds "
            f"${cap['risk_usd']:,.2f} to the expected cost")  # fmt: skip


def _age_cell(p: dict) -> str:
    from infra.catalog.price_age import age_text

    days = p["price_age"]["age_days"]
    return "undated" if days is None else age_text(days)


def _price_age_label(p: dict) -> str:
    """'observed 2026-11-25, 2 days old (azure-retail-prices)' or 'undated (skypilot-azure)', from a plan's JSON."""
    age = p["price_age"]
    if age["as_of"] is None:
        return f"undated ({age['source']})"
    return f"observed {age['as_of'][:10]}, {_age_cell(p)} old ({age['source']})"


def _memory_line(p: dict) -> str:
    return (f"{p['memory_used_gib']:.1f} GiB used + {p['memory_reserved_gib']:.1f} GiB reserved, "
            f"{p['memory_available_gib']:.1f} of {p['device_memory_gib']:.1f} GiB available "
            f"(at least {p['memory_headroom']:.0%} kept free)")  # fmt: skip


def _breakdown_table(bd: dict, total: float, wide: bool):
    from cli.output import Col, money, table

    return table(
        "Expected cost breakdown (USD)",
        [Col("compute", "right"), Col("evaluation", "right", drop=4), Col("data stalls", "right", drop=5),
         Col("interruption loss", "right"),
         Col("checkpoint overhead", "right"), Col("capacity wait", "right", drop=3), Col("storage", "right", drop=2),
         Col("egress", "right", drop=1), Col("total", "right")],
        [[money(bd["compute_usd"]), money(bd["evaluation_usd"]), money(bd["data_stalls_usd"]),
          money(bd["interruption_loss_usd"]),
          money(bd["checkpoint_overhead_usd"]), money(bd["capacity_wait_usd"]), money(bd["storage_usd"]),
          money(bd["egress_usd"]), money(total)]],
        wide=wide,
    )  # fmt: skip


def _fixed_setup(zero_stage: int | None, offload: str | None, micro_batch: int | None, tp: int | None = None,
                 pp: int | None = None):  # fmt: skip
    from cli.planner.optimizer import FixedSetup
    from infra.parallelism import TP_SIZES, unsupported

    if offload is not None:
        _choice(offload, ("none", "optimizer", "optimizer+params"), "--offload")
        if offload != "none" and zero_stage == 0:
            raise TrainfleetError("--offload needs ZeRO stage 1-3 (DeepSpeed offloads ZeRO's partitions); raise --zero-stage")
        if offload == "optimizer+params" and zero_stage not in (None, 3):
            raise TrainfleetError("--offload optimizer+params needs --zero-stage 3 (only ZeRO-3 partitions the parameters)")
    if tp is not None and tp not in TP_SIZES:
        raise TrainfleetError(f"--tp {tp} is not one of {', '.join(map(str, TP_SIZES))} (tensor parallelism splits "
                              "one node's accelerators); pick one of those")  # fmt: skip
    offloads = (offload or "none").split("+")
    reason = unsupported(zero_stage or 0, "optimizer" in offloads, "params" in offloads, tp or 1, pp or 1)
    if reason:
        reason = reason.replace("tensor_parallel", "--tp").replace("pipeline_parallel", "--pp")
        raise TrainfleetError(reason.replace("zero_stage", "--zero-stage").replace("set one of them to 1", "drop one"))
    return FixedSetup(zero_stage, offload, micro_batch, tp, pp)


def _pinned(fixed) -> str:
    parts = [f"ZeRO-{fixed.zero_stage}" if fixed.zero_stage is not None else "",
             f"offload {fixed.offload}" if fixed.offload is not None else "",
             f"micro batch {fixed.micro_batch}" if fixed.micro_batch is not None else "",
             f"TP {fixed.tp}" if fixed.tp is not None else "", f"PP {fixed.pp}" if fixed.pp is not None else ""]  # fmt: skip
    return ", ".join(p for p in parts if p)


@app.command("estimate")
def estimate_command(
    tokens: TokensOpt,
    accelerator: Annotated[str, typer.Option(help="e.g. A100-80GB, H100-80GB")],
    devices: Annotated[int, typer.Option(min=1, max=1_000_000, help="accelerators in total")],
    model: ModelOpt = None,
    params: ParamsOpt = None,
    seq_len: SeqOpt = 2048,
    precision: PrecOpt = "bf16",
    method: MethodOpt = "full",
    lora_rank: RankOpt = 16,
    global_batch: BatchOpt = None,
    instance_type: Annotated[
        str | None, typer.Option(help="node type; default: the cheapest that carries it")
    ] = None,
    cloud: Annotated[str | None, typer.Option(help="aws, gcp or azure")] = None,
    region: Annotated[str | None, typer.Option(help="e.g. us-east-1")] = None,
    purchase: Annotated[str, typer.Option(help="spot or on-demand")] = "on-demand",
    local_zones: LocalZonesOpt = False,
    memory_headroom: HeadroomOpt = 0.1,
    eval_every: EvalEveryOpt = None,
    eval_iters: EvalItersOpt = None,
    data_stall: DataStallOpt = None,
    zero_stage: Annotated[
        int | None, typer.Option("--zero-stage", min=0, max=3, help="pin the ZeRO stage (0-3); default: the fastest that fits")
    ] = None,
    offload: Annotated[
        str | None, typer.Option(help="pin CPU offload: none, optimizer or optimizer+params (ZeRO-3 only)")
    ] = None,
    micro_batch: Annotated[
        int | None, typer.Option("--micro-batch", min=1, max=4096, help="pin sequences per device per micro-step")
    ] = None,
    tp: Annotated[
        int | None, typer.Option("--tp", min=1, max=8, help="pin tensor parallelism (1, 2, 4, 8: within a node)")
    ] = None,
    pp: Annotated[
        int | None, typer.Option("--pp", min=1, max=64, help="pin pipeline stages (whole nodes each; ZeRO 0-1)")
    ] = None,
    max_price_age: MaxPriceAgeOpt = 90.0,
    json_out: JsonOpt = False,
    explain: ExplainOpt = False,
    wide: WideOpt = False,
) -> None:
    """Price a fixed hardware choice (accelerator x devices): time, cost, MFU, no search over hardware."""
    from cli.planner.calibration import default_fit
    from cli.planner.optimizer import (
        FixedSetup,
        Request,
        batch_problem,
        best_setup,
        candidate,
        hardware_for,
        plan_setup,
        price_points,
    )
    from cli.planner.outliers import conservative_spot
    from cli.planner.report import (
        assumptions,
        capacity_dict,
        explain_lines,
        interval_figures,
        memory_figures,
        offload_label,
        price_age,
        price_notes,
        price_outlier,
    )
    from infra.catalog import default_catalog
    from infra.catalog.capacity import default_placement_scores
    from infra.parallelism import layout_error

    work = _workload(model, params, tokens, seq_len, precision, method, lora_rank, global_batch, eval_every,
                     eval_iters, data_stall)  # fmt: skip
    _choice(purchase, ("spot", "on-demand"), "--purchase")
    fixed = _fixed_setup(zero_stage, offload, micro_batch, tp, pp)
    catalog = default_catalog()
    known = sorted({o.accelerator for o in catalog.all_offers if o.accelerator})
    if accelerator not in known:
        raise TrainfleetError(
            f"--accelerator {shown(accelerator)} is not in the catalog{did_you_mean(accelerator, known)}"
        )
    offers = [o for o in catalog.offers(cloud=cloud, region=region, accelerator=accelerator)
              if instance_type is None or o.instance_type == instance_type]  # fmt: skip
    if not offers:
        raise TrainfleetError(
            f"no {accelerator} offer matches --instance-type/--cloud/--region; see `trainfleet catalog list --accelerator {accelerator}`"
        )
    if not local_zones:  # as plan does: a Local Zone needs an account opt-in most accounts lack
        if all(o.local_zone for o in offers):
            raise TrainfleetError(
                f"every {accelerator} offer that matches is in an AWS Local Zone, which needs an account opt-in; "
                "add --local-zones if your account has it"
            )
        offers = [o for o in offers if not o.local_zone]
    sizes = sorted({o.accelerators_per_node for o in offers})
    offers = [o for o in offers if devices % o.accelerators_per_node == 0]
    if not offers:
        raise TrainfleetError(
            f"--devices {devices} is not a whole number of {accelerator} nodes ({'/'.join(map(str, sizes))} per node); use a multiple"
        )
    req = Request(work, purchase=purchase, max_nodes=1024, memory_headroom=memory_headroom)
    fit = default_fit()
    best = unbearable = unobtainable = misfit = None
    # the plan's pricing: a spot zone far below its neighbours is priced at their median (cli/planner/outliers.py)
    points = price_points(conservative_spot(offers), purchase)
    scores = default_placement_scores()
    if not points:
        other = "spot" if purchase == "on-demand" else "on-demand"
        raise TrainfleetError(
            f"no {accelerator} offer for {devices} devices has a {purchase} price in the catalog; "
            f"try --purchase {other}, or see `trainfleet catalog list --accelerator {accelerator}`"
        )
    for offer, kind, zones in points:
        hw = hardware_for(offer, catalog.accelerator(offer.accelerator), precision)
        if hw is None:
            raise TrainfleetError(
                f"{accelerator} has no peak TFLOP/s for {precision} in the catalog; try --precision bf16"
            )
        nodes = devices // hw.devices_per_node
        layout = layout_error(tp or 1, pp or 1, hw.devices_per_node, nodes) or batch_problem(work, hw, nodes, fixed)
        if layout:
            misfit = layout
            continue  # another node size of the accelerator may take the pinned layout (or split the batch)
        if fixed == FixedSetup():  # as `plan` chooses: the least expected wall time, checkpoints and restarts included
            setup = plan_setup(work, hw, nodes, fit, offer, kind, zones, memory_headroom, scores)
        else:
            setup = best_setup(work, hw, nodes, fit, headroom=memory_headroom, fixed=fixed)
        if setup is None and fixed != FixedSetup():
            raise TrainfleetError(
                f"{work.shape.name} does not fit in memory on {devices} x {accelerator} with {_pinned(fixed)} while "
                f"keeping {memory_headroom:.0%} of device memory free; drop or change the pinned option (a higher "
                "--zero-stage, --offload optimizer, a smaller --micro-batch) or add devices"
            )
        if setup is None:
            raise TrainfleetError(
                f"{work.shape.name} does not fit in memory on {devices} x {accelerator} with any ZeRO stage or offload "
                f"while keeping {memory_headroom:.0%} of device memory free; add devices, lower --memory-headroom "
                "or use --method lora"
            )
        c = candidate(req, offer, kind, zones, nodes, hw, setup, scores=scores)
        if not c.capacity.obtainable:
            unobtainable = c
        elif not c.rel.feasible:
            unbearable = c
        elif best is None or (c.cost_usd, c.identity()) < (best.cost_usd, best.identity()):
            best = c
    if best is None and unbearable is None and unobtainable is None:
        raise TrainfleetError(f"{devices:,} x {accelerator}: {misfit.replace('tensor_parallel', '--tp').replace('pipeline_parallel', '--pp')}")
    if best is None and unbearable is None:
        raise TrainfleetError(
            f"{devices:,} x {accelerator} spot: {unobtainable.capacity.source}, \"not likely to succeed\"; use "
            "--purchase on-demand, or another --region"
        )
    if best is None:
        rel = unbearable.rel
        per_hour = rel.nodes * (rel.spot_hazard_per_node_hour + rel.failure_hazard_per_node_hour)
        causes = "spot interruptions and hardware failures" if purchase == "spot" else "hardware failures"
        raise TrainfleetError(
            f"{devices:,} x {accelerator} ({rel.nodes:,} nodes, {purchase}) would be interrupted every "
            f"{60 / per_hour:,.1f} min on average ({causes}) and spend most of the run restarting; "
            "use fewer --devices" + (" or --purchase on-demand" if purchase == "spot" else "")
        )
    st = best.setup.step
    interval = interval_figures(best.wall_hours, best.rel.billed_hours * devices, best.cost_usd)
    out = {
        "gpu_hours": round(best.rel.billed_hours * devices, 1),
        "wallclock_hours": round(best.wall_hours, 3),
        "useful_hours": round(best.rel.useful_hours, 3),
        "cost_usd": round(best.cost_usd, 2),
        "cost_usd_low": interval["expected_cost_usd_low"],
        "cost_usd_high": interval["expected_cost_usd_high"],
        **interval,
        "mfu": round(st.effective_mfu, 4),
        "tokens_per_second": round(st.tokens_per_second, 1),
        "tokens_per_second_per_device": round(st.tokens_per_second_per_device, 1),
        "total_flops": work.total_flops,
        "instance_type": best.offer.instance_type,
        "cloud": best.offer.cloud,
        "region": best.offer.region,
        "zones": list(best.zones),
        "nodes": best.nodes,
        "devices": devices,
        "purchase": purchase,
        "price_usd_per_node_hour": best.price_usd_per_node_hour,
        "zero_stage": best.setup.sharding.zero_stage,
        "offload": offload_label(best),
        "tensor_parallel": st.tp,
        "pipeline_parallel": st.pp,
        "micro_batch": st.micro_batch,
        "grad_accum": st.grad_accum,
        "activation_checkpointing": best.setup.checkpointing,
        **memory_figures(best.setup.memory),
        "breakdown": {k: round(v, 2) for k, v in best.breakdown.items()},
        "capacity": capacity_dict(best, req),
        "assumptions": [
            f"node type {best.offer.instance_type} in {best.offer.cloud} {best.offer.region}"
            f"{' (' + ', '.join(best.zones) + ')' if best.zones else ''}: the cheapest {purchase} offer carrying "
            f"{accelerator}"
        ]
        + [x for x in [price_outlier(best)] if x]
        + assumptions(best, req, fit),  # fmt: skip
        "price_age": price_age(best).to_json(),
        "notes": price_notes(best, [], max_price_age),
    }
    if explain:
        out["explain"] = explain_lines(best, req, fit)
    if json_out:
        from cli.output import print_json

        print_json(out)
        return
    from cli.output import console, money, show

    console.print(
        f"{work.shape.name} on {devices} x {accelerator} ({best.nodes} x {best.offer.instance_type}, {purchase}, "
        f"{best.offer.cloud} {best.offer.region}): {out['wallclock_hours']:,.1f} h wall clock "
        f"({out['wallclock_hours_low']:,.1f}-{out['wallclock_hours_high']:,.1f} h, 80%), "
        f"{out['gpu_hours']:,.0f} device-hours ({out['device_hours_low']:,.0f}-{out['device_hours_high']:,.0f}), "
        f"{money(out['cost_usd'])} expected ({short_money(out['cost_usd_low'])}-{short_money(out['cost_usd_high'])}), "
        f"{out['tokens_per_second']:,.0f} tokens/s, MFU {out['mfu']:.1%}\n"
        f"  memory per device: {_memory_line(out)}\n"
        f"  price: ${out['price_usd_per_node_hour']:,.4f}/node-h {purchase}, {_price_age_label(out)}",
        highlight=False,
    )
    show(_breakdown_table(out["breakdown"], out["cost_usd"], wide), wide=wide)
    for line in out["assumptions"]:
        console.print(f"[dim]assumption:[/] {line}", highlight=False)
    for line in out["notes"]:
        console.print(f"[yellow]note:[/] {line}", highlight=False)
    for line in out.get("explain", []):
        console.print(f"  {line}", highlight=False, markup=False)
