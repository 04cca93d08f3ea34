"""The simulation's figures as tables, beside the planner's for the same job (cli/planner/reliability.py:
`checkpoint_times` with the layout's total bytes, and its restart model: PROVISION_S + download + load)."""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

from cli.planner.reliability import PROVISION_S, checkpoint_times, conversion_s
from infra.checkpoint_io import LOCAL_SAVE_GBPS

from .scenarios import Outcome, Spec

GB = 1e9


def stop_grace_s(saved_bytes: int) -> float:
    """What the boot script gives the trainer to checkpoint and exit before it kills it: the fleet's rendered
    TRAINFLEET_STOP_GRACE_SECONDS (infra/disk_need.py, from the largest part) where the program computes it, else
    the fixed value of templates/node/trainfleet.env.j2."""
    try:
        from infra.disk_need import stop_grace_s as rendered
    except ImportError:
        env = Path(__file__).resolve().parents[2] / "templates" / "node" / "trainfleet.env.j2"
        m = re.search(r"^TRAINFLEET_STOP_GRACE_SECONDS=(\d+)\s*$", env.read_text(), re.M)
        return float(m.group(1)) if m else math.nan
    return float(rendered(saved_bytes))


def table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def s(x, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def gb(x) -> str:
    return "-" if x is None else f"{x / GB:,.1f}"


def planner_checkpoint(spec: Spec, nodes: int | None = None):
    """The checkpoint as the planner prices this job: its parts by the same DeepSpeed layout where the planner has
    them (reliability.layout_parts), else its bytes, which the planner splits evenly over the nodes."""
    layout = spec.layout(nodes)
    try:
        from cli.planner.reliability import layout_parts
    except ImportError:
        return float(layout.total_bytes)
    p = spec.preset
    return layout_parts(p.params, spec.zero, spec.precision, spec.tp, spec.pp, layout.nodes, spec.ranks_per_node,
                        p.layers)  # fmt: skip


def planner_times(spec: Spec, cloud: str | None = None, nodes: int | None = None):
    n = nodes or spec.nodes
    return checkpoint_times(cloud or spec.cloud, planner_checkpoint(spec, n), n, None, spec.step_s)


def planner_parts(spec: Spec) -> tuple[float, float]:
    """(the largest part a node saves, the most a node restores) as the planner prices them."""
    t = planner_times(spec)
    parts = getattr(t, "parts", None)
    if parts is not None:
        return parts.saved_bytes, parts.restored_bytes
    even = spec.layout().total_bytes / spec.nodes
    return even, even


def planner_load_s(t) -> float:
    return getattr(t, "load_s", 0.0) or t.save_s


def by_name(outcomes: list[Outcome], prefix: str) -> list[Outcome]:
    return [o for o in outcomes if o.name.startswith(prefix)]


def checkpoint_table(spec: Spec, o: Outcome) -> str:
    f, p = o.figures, planner_times(spec)
    n = spec.nodes
    parts, uploads = f["part_bytes"], f["upload_s"]
    others = [uploads[r] for r in range(1, n) if r in uploads]
    lags = [x for x in f["save_to_durable_s"] if x is not None]
    largest, _ = planner_parts(spec)
    peak = f["peak_disk"]
    grace = stop_grace_s(max(parts))
    rows = [
        ["largest part (GB)", f"node 0 {gb(parts[0])}, others <= {gb(max(parts[1:], default=None))}", gb(largest),
         "what the slowest node saves and uploads"],
        ["save, trainer blocked (s)", s(f["save_s"]), s(p.save_s, 1), "largest part / 2 GB/s: the barrier waits for it"],
        ["upload of the part (s)", f"node 0 {s(uploads.get(0))}, others <= {s(max(others, default=None))}",
         s(p.upload_s, 1), f"planner at {p.upload_gbps_per_node:g} GB/s per node"],
        ["save -> durable (LATEST) (s)", f"{s(min(lags, default=None))} .. {s(max(lags, default=None))}",
         s(p.save_s + p.durable_lag_s, 1), "planner: save + upload + commit"],
        ["stop grace needed (s)", s(spec.step_s + f["save_s"]), s(spec.step_s + p.save_s, 1),
         f"a step + the save; the boot script gives {s(grace)} s"],
        ["peak local disk per node (GB)", f"node 0 {gb(peak.get(0))}, others <= {gb(max((v for r, v in peak.items() if r), default=None))}",
         gb((spec.keep_last + 1) * largest), f"keep_last {spec.keep_last} + the save in progress (planner: none)"],
    ]  # fmt: skip
    head = (f"Checkpoints: {f['saves']} periodic saves every {f['interval_min']:g} min, {len(lags)} durable; "
            f"{f['sync_failed']} failed syncs (retried)")  # fmt: skip
    return head + "\n" + table(["figure", "simulation", "planner", "note"], rows)


def notice_table(spec: Spec, outcomes: list[Outcome]) -> str:
    rows = []
    for o in outcomes:
        f = o.figures
        p = planner_times(spec, f["cloud"])
        ok = all(c.ok for c in o.checks if c.name.startswith("(4)"))
        deadline = f["deadline_s"]
        planner_fits = "-" if deadline is None else ("fits" if p.emergency_s <= deadline else "no")
        if "kind" not in f:  # its warm-up checkpoint never got durable (the FAIL says so)
            continue
        rows.append([f["kind"], s(deadline) if deadline is not None else "soft", s(f["need_s"]),
                     "yes" if f["fits"] else "no", s(f["window_s"]), s(f["exit_asked_s"]), s(f["first_durable_s"]),
                     s(f["exit_durable_s"]), f["lost_steps"], f"{s(p.emergency_s)} ({planner_fits})",
                     "PASS" if ok else "FAIL"])  # fmt: skip
    head = ("Notices to node 0 (its part is the largest; it commits), each on its own cloud's store, after one durable "
            "checkpoint (the agent has measured its save and upload). Seconds after the notice. needs: a step + the "
            "save + the upload and commit that checkpoint took; window: the agent's exit window at the end; steps "
            "lost: trained but not durable when node 0 went")  # fmt: skip
    return head + "\n" + table(["notice", "deadline", "needs", "fits", "window", "exit asked", "1st ckpt durable",
                                "exit ckpt durable", "steps lost", "planner emergency", "(4)"], rows)  # fmt: skip


def restore_table(spec: Spec, o: Outcome) -> str:
    f = o.figures
    p = planner_times(spec)
    _, restored = planner_parts(spec)
    rows = []
    for key, label in (("restart", "restart after a node loss (survivors keep disks)"),
                       ("cold", "cold restart (every node new)")):  # fmt: skip
        if key in f:
            r = f[key]
            rows.append([label, r["ranks"], f"{gb(r['fetched_min'])} .. {gb(r['fetched_max'])}", s(r["seconds_max"]),
                         f"{gb(restored)} / {s(p.download_s)} s"])  # fmt: skip
    small = f.get("shrink_to")
    for key, label, nodes in (("shrink", f"elastic shrink to {small} nodes (every part)", small),
                              ("grow", f"grow back to {spec.nodes} (every part)", spec.nodes)):  # fmt: skip
        if key in f and nodes:
            r = f[key]
            whole = spec.layout(nodes if key == "grow" else spec.nodes).total_bytes
            rate = planner_times(spec, nodes=nodes).upload_gbps_per_node * GB
            rows.append([label, r["ranks"], f"{gb(r['fetched_min'])} .. {gb(r['fetched_max'])}", s(r["seconds_max"]),
                         f"{gb(whole)} / {s(whole / rate)} s"])  # fmt: skip
    text = "Restores (bytes fetched per node, the slowest node's time)\n" + table(
        ["phase", "nodes", "fetched per node (GB)", "slowest (s)", "planner: bytes per node / download"], rows)
    for key in ("restart", "cold", "shrink", "grow"):
        r = f.get(key)
        if r and r["failed_tries"]:
            text += (f"\n{key}: {r['failed_tries']} restore tries failed and were retried 10 s later by the boot "
                     f"script ({r['failed_nodes']} node(s) never restored); first: {r['first_error']}")  # fmt: skip
    cold = f.get("cold")
    if cold:
        load = max(spec.layout().restored_bytes) / (LOCAL_SAVE_GBPS * GB)
        sim = PROVISION_S + cold["seconds_max"] + load
        plan = PROVISION_S + p.download_s + planner_load_s(p)
        text += (f"\nrestart time (provision {PROVISION_S:.0f} s + restore + load): simulation {s(sim)} s "
                 f"(restore {s(cold['seconds_max'])} s, load {s(load)} s of the largest restored part), planner "
                 f"{s(plan)} s (download {s(p.download_s, 1)} s, load {s(planner_load_s(p), 1)} s)")  # fmt: skip
        if small:
            conv = f.get("conversion") or {}
            text += (f"\nplanner's conversion onto {small} nodes (download + convert + load): "
                     f"{s(conversion_s(spec.cloud, spec.layout().total_bytes, small, None))} s; the simulation "
                     f"fetches in {s(f['shrink']['seconds_max'])} s")  # fmt: skip
            if conv:
                text += (f" and converts in {s(conv['seconds'])} s (the measured 2.97 s + bytes / 137 MB/s, not run), "
                         f"a survivor's disk peaking at {conv['peak_disk'] / GB:,.1f} GB ({conv['peak_per_input']:g} x "
                         f"the {conv['input_bytes'] / GB:,.1f} GB input in the conversion's folder and beside it)")  # fmt: skip
    return text


def check_lines(outcomes: list[Outcome]) -> tuple[str, bool]:
    lines, ok = [], True
    for o in outcomes:
        for c in o.checks:
            ok &= c.ok
            if not c.ok or not c.name.startswith(("(1)", "LATEST")) or o.name == "periodic":
                lines.append(f"{'PASS' if c.ok else 'FAIL'}  {o.name}: {c.name}: {c.detail}")
        if o.errors:
            lines.append(f"note  {o.name}: {len(o.errors)} task error(s), first: {o.errors[0][1].strip().splitlines()[-1]}")
    passed = {(o.name, c.name) for o in outcomes for c in o.checks if c.ok}
    lines.append(f"{len(passed)} checks passed, {sum(1 for o in outcomes for c in o.checks if not c.ok)} failed")
    return "\n".join(lines), ok


def store_lines(outcomes: list[Outcome]) -> str:
    total = Counter()
    for o in outcomes:
        total.update(o.stats)
    parts = [f"{k} {v:,}" for k, v in sorted(total.items())]
    times = ", ".join(f"{o.name} {o.wall_s:.1f} s" for o in outcomes)
    wall = sum(o.wall_s for o in outcomes)
    virtual = sum(o.virtual_s for o in outcomes)
    return (f"store: {'; '.join(parts)}\nsimulated {virtual:,.0f} s of virtual time in {wall:.1f} s on this machine "
            f"({times})")  # fmt: skip


def findings(spec: Spec, outcomes: list[Outcome]) -> list[str]:
    """Where the simulation and the planner disagree (by more than a quarter), one line each."""
    out = []

    def differ(sim, plan) -> bool:
        return sim is not None and plan and abs(sim - plan) > 0.25 * plan

    layout, p = spec.layout(), planner_times(spec)
    largest, restored = planner_parts(spec)
    if differ(max(layout.saved_bytes), largest):
        out.append(f"node 0 saves and uploads {gb(max(layout.saved_bytes))} GB; the planner prices a part of "
                   f"{gb(largest)} GB ({max(layout.saved_bytes) / largest:.1f}x)")  # fmt: skip
    if differ(max(layout.restored_bytes), restored):
        out.append(f"a restore fetches up to {gb(max(layout.restored_bytes))} GB per node (its part and the model "
                   f"states every rank loads); the planner prices {gb(restored)} GB")  # fmt: skip
    per = by_name(outcomes, "periodic")
    if per:
        f = per[0].figures
        grace = stop_grace_s(max(layout.saved_bytes))
        if spec.step_s + f["save_s"] > grace:
            out.append(f"stop grace: a step + the save is {s(spec.step_s + f['save_s'])} s, more than the boot "
                       f"script's TRAINFLEET_STOP_GRACE_SECONDS={s(grace)}: the trainer is killed mid-save")  # fmt: skip
        up = f["upload_s"].get(0)
        if differ(up, p.upload_s):
            out.append(f"node 0's upload takes {s(up)} s; the planner's upload_s is {s(p.upload_s, 1)} s")
        lags = [x for x in f["save_to_durable_s"] if x is not None]
        if lags and differ(max(lags), p.save_s + p.durable_lag_s):
            out.append(f"save -> durable takes {s(max(lags))} s; the planner's save + upload + commit is "
                       f"{s(p.save_s + p.durable_lag_s, 1)} s")  # fmt: skip
    for o in by_name(outcomes, "notice"):
        f = o.figures
        if f.get("deadline_s") is None:
            continue
        q = planner_times(spec, f["cloud"])
        if (q.emergency_s <= f["deadline_s"]) != f["fits"]:
            out.append(f"{f['kind']}: the planner says the emergency checkpoint "
                       f"{'fits' if q.emergency_s <= f['deadline_s'] else 'does not fit'} ({s(q.emergency_s)} s in "
                       f"{s(f['deadline_s'])} s); the simulation needs {s(f['need_s'])} s")  # fmt: skip
        if f["lost_steps"] and f["fits"]:
            out.append(f"{f['kind']}: {f['lost_steps']} step(s) lost although the deadline covers a checkpoint: "
                       f"exit asked {s(f['exit_asked_s'])} s after the notice, first checkpoint durable "
                       f"{s(f['first_durable_s'])} s, exit checkpoint {s(f['exit_durable_s'])} s")  # fmt: skip
    for o in by_name(outcomes, "loss"):
        cold = o.figures.get("cold")
        if cold and differ(cold["seconds_max"], p.download_s):
            out.append(f"cold restore: the slowest node takes {s(cold['seconds_max'])} s; the planner's download_s "
                       f"is {s(p.download_s, 1)} s")  # fmt: skip
    return out


def render(spec: Spec, outcomes: list[Outcome]) -> tuple[str, bool]:
    layout = spec.layout()
    how = "by the same layout" if not isinstance(planner_checkpoint(spec), float) else "split evenly over the nodes"
    title = (f"scale simulation: {spec.nodes} nodes x {spec.ranks_per_node} ranks, {spec.preset.name} "
             f"({spec.preset.params / 1e9:.1f}B params), ZeRO-{spec.zero} {spec.precision}, TP {spec.tp} x PP "
             f"{spec.pp}, {spec.cloud}; checkpoint {gb(layout.total_bytes)} GB in {len(layout.files)} files; "
             f"step {s(spec.step_s)} s; the planner's figures: cli/planner/reliability.py checkpoint_times for this "
             f"job, its parts {how}")  # fmt: skip
    parts = [title]
    per = by_name(outcomes, "periodic")
    if per:
        parts.append(checkpoint_table(spec, per[0]))
    notices = by_name(outcomes, "notice")
    if notices:
        parts.append(notice_table(spec, notices))
    loss = by_name(outcomes, "loss")
    if loss:
        parts.append(restore_table(spec, loss[0]))
    lines = findings(spec, outcomes)
    if lines:
        parts.append("Disagreements with the planner\n" + "\n".join(f"- {x}" for x in lines))
    checks, ok = check_lines(outcomes)
    parts.append("Invariants\n" + checks)
    parts.append(store_lines(outcomes))
    return "\n\n".join(parts), ok
