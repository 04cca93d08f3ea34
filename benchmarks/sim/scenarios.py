"""What the simulation runs. Each scenario is a fresh world (bucket, nodes, clock); it returns its figures and the
invariants it checked.

periodic      the agent's periodic checkpoints, keep_last + 1 of them (the disk's steady state)
notice        one durable checkpoint, then one notice of one type to node 0 (the largest part, and the
              committer): the job checkpoints, the agent makes it durable, node 0 is lost at the deadline (or
              when the agent releases the VM)
loss_restart  a node lost mid-upload (LATEST must stay), the restart (survivors keep their disks), a cold
              restart (every node new), then elastic shrink and grow-back (every part fetched)
second_save   issue 29 #1: a step's commit crashes, the step is saved again by the next run: the commit must
              never mix the two saves; #8: each node's relaunch (sync, then restore) gets that step
job_done      issue 29 #11: the job ends, node 0 scales to zero: every node's termination is released at once
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field

from cli.planner.presets import PRESETS
from infra.checkpoint_io import COMMIT_S, azure_terminate_minutes
from infra.checkpoint_layout import CheckpointLayout
from infra.elastic import shrink_to
from templates.agent.trainfleet_agent import checkpoints
from templates.agent.trainfleet_agent.common import ASG_HOOK_S, NOTICE_WINDOW_S, log, step_name
from templates.agent.trainfleet_agent.lifecycle import MAX_WAIT_S

from . import invariants as inv
from .agent import NOTICES, PREFIX, post_notice
from .fleet import World
from .shapes import ideal_download_s, ideal_upload_s, store_shape
from .trainer import save_s

MODELS = {"7b": "llama-7b", "13b": "llama-13b", "70b": "llama-70b"}


@dataclass(frozen=True)
class Spec:
    cloud: str = "aws"
    nodes: int = 64
    model: str = "70b"
    zero: int = 1
    precision: str = "bf16"
    tp: int = 1
    pp: int = 1
    ranks_per_node: int = 8
    step_s: float = 10.0
    keep_last: int = 3
    fault_rate: float = 0.0
    grad_accum: int = 3
    concurrency: int = 8

    @property
    def preset(self):
        return PRESETS[MODELS.get(self.model, self.model)]

    def layout(self, nodes: int | None = None) -> CheckpointLayout:
        p = self.preset
        return CheckpointLayout(p.params, self.zero, self.precision, self.tp, self.pp, nodes or self.nodes,
                                self.ranks_per_node, p.layers)  # fmt: skip

    def shape(self, cloud: str | None = None, nodes: int | None = None):
        return store_shape(cloud or self.cloud, nodes or self.nodes, self.concurrency, self.fault_rate)


@dataclass
class Outcome:
    name: str
    figures: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)
    stats: Counter = field(default_factory=Counter)
    wall_s: float = 0.0
    virtual_s: float = 0.0
    errors: list = field(default_factory=list)
    world: World | None = None  # for a caller that looks further (the tests)
    last_restore: object = None


def upload_bound_s(shape, layout: CheckpointLayout, rank: int) -> float:
    """The model's upload time for node `rank`'s part while every node uploads its own: its link, its largest file
    through its connections, or its share of the account's link (Azure), whichever is slowest."""
    own = ideal_upload_s(shape, [f.size for f in layout.part(rank)])
    account = layout.total_bytes / shape.ingress_bps if shape.ingress_bps else 0.0
    return max(own, account)


def need_s(spec: Spec, shape, layout: CheckpointLayout, rank: int = 0) -> float:
    """Notice to durable, by the model: the running step, the save (the barrier waits for the largest part), the
    noticed node's upload, and the planner's commit allowance."""
    return spec.step_s + save_s(layout) + upload_bound_s(shape, layout, rank) + COMMIT_S


def _finish(world: World, out: Outcome, t0: float) -> Outcome:
    out.wall_s = time.perf_counter() - t0
    out.virtual_s = world.clock.elapsed()
    out.stats.update(world.bucket.stats)
    out.errors = list(world.clock.errors)
    out.world = world
    out.checks.append(inv.one_save_per_manifest(world))
    out.checks.append(inv.latest_only_forward(world))
    return out


def _durable_at(world: World, step: int) -> float | None:
    """When LATEST first named `step` or a later one (virtual seconds)."""
    for t, s in world.bucket.latest:
        if s >= step:
            return t - world.clock.start
    return None


def _start(world: World, spec: Spec, nodes: int, interval_minutes: float = 0.0, notified: tuple = ()) -> None:
    """Boot `nodes` nodes and start their agents; `notified`: the ranks a scenario will send notices to."""
    for r in range(nodes):
        world.boot(r).md.expects_notices = r in notified
        world.start_agent(r, interval_minutes)


# ------------------------------------------------------------------------------------------ periodic


def periodic(spec: Spec, workdir: str) -> Outcome:
    t0 = time.perf_counter()
    shape, layout = spec.shape(), spec.layout()
    world = World(spec.cloud, shape, workdir, spec.keep_last)
    need = need_s(spec, shape, layout)
    interval_min = max(1.0, math.ceil(1.5 * need / 60))  # each checkpoint durable before the next is asked for
    count = spec.keep_last + 1  # the last save's temp folder beside keep_last complete steps: the disk's peak
    out = Outcome("periodic")

    def main():
        _start(world, spec, spec.nodes, interval_min)
        job = world.launch(layout, "run-1", spec.step_s)
        world.wait_for(lambda: len(job.saves) >= count and _durable_at(world, job.saves[count - 1].step) is not None,
                       count * interval_min * 60 + 10 * need)  # fmt: skip
        return job

    job = world.run(main)
    lags, uploads = [], {}
    for s in job.saves[:count]:
        at = _durable_at(world, s.step)
        lags.append(None if at is None else at - s.start)
    for e in world.log.of("part_durable"):
        uploads.setdefault(e["node"], []).append(e["seconds"])
    out.figures.update(
        interval_min=interval_min, saves=len(job.saves), save_s=save_s(layout),
        save_to_durable_s=lags, upload_s={r: max(v) for r, v in uploads.items()},
        upload_bound_s={r: upload_bound_s(shape, layout, r) for r in range(spec.nodes)},
        peak_disk=dict(world.peaks),
        part_bytes=list(layout.saved_bytes), sync_failed=len(world.log.of("sync_failed")),
    )  # fmt: skip
    return _finish(world, out, t0)


# ------------------------------------------------------------------------------------------ notices


def notice_deadline_s(kind: str, spec: Spec) -> float | None:
    cloud, hard, deadline = NOTICES[kind]
    if kind == "azure-Terminate":  # what the stack sets: the minutes the planner says the checkpoint needs, 5-15
        return 60.0 * azure_terminate_minutes(spec.preset.params, spec.nodes, None)
    return deadline


def notice(spec: Spec, kind: str, workdir: str) -> Outcome:
    """The job has run a while: one checkpoint is durable, so node 0's agent has measured its save and upload (the
    exit window it keeps, issue 29 #4). Then the notice; node 0 is lost at the deadline, or as soon as its agent
    releases the termination where the cloud lets it (the group's lifecycle action, an approved Azure event). What
    the notice needs, by the model: a step + the save + what that first checkpoint's upload and commit took."""
    t0 = time.perf_counter()
    cloud, hard, _ = NOTICES[kind]
    deadline = notice_deadline_s(kind, spec)
    shape, layout = spec.shape(cloud), spec.layout()
    world = World(cloud, shape, workdir, spec.keep_last)
    out = Outcome(f"notice {kind}")
    state = {}

    def main():
        _start(world, spec, spec.nodes, notified=(0,))
        job = world.launch(layout, "run-1", spec.step_s)
        watcher = world.nodes[0].watcher
        getattr(watcher, "request_checkpoint", lambda: watcher.trainer.request(exit_after=False))()
        world.wait_for(lambda: job.saves and _durable_at(world, job.saves[0].step) is not None,
                       40 * need_s(spec, shape, layout))  # fmt: skip
        if not job.saves or _durable_at(world, job.saves[0].step) is None:
            return job
        state["warm"] = job.saves[0]
        world.clock.sleep(spec.step_s * (math.ceil(world.clock.elapsed() / spec.step_s) + 0.5) - world.clock.elapsed())
        state["at"] = world.clock.elapsed()  # mid-step
        post_notice(world.nodes[0].md, kind, world.clock.now, deadline)
        if hard:
            agent0, noticed = world.nodes[0].watch_task, world.clock.now
            end = noticed + deadline
            releasable = kind == "aws-asg-terminate" or cloud == "azure"  # a lifecycle action, an approved event

            def gone() -> bool:  # the VM goes at the deadline, or once its agent released the termination
                return world.clock.now >= hook_end() or (releasable and not agent0.is_alive())

            def hook_end() -> float:  # each heartbeat restarts the group's hook timeout, up to AWS's most
                if kind != "aws-asg-terminate" or not world.heartbeats:
                    return end
                return min(max(end, world.heartbeats[-1] + ASG_HOOK_S), noticed + MAX_WAIT_S)

            world.wait_for(gone, (MAX_WAIT_S if kind == "aws-asg-terminate" else deadline) + 1, 0.5)
            state["lost_at"] = world.clock.elapsed()
            world.lose(0)
        else:
            world.wait_for(lambda: any(s.start >= state["at"] and _durable_at(world, s.step) for s in job.saves),
                           40 * need_s(spec, shape, layout))  # fmt: skip
        return job

    job = world.run(main)
    warm = state.get("warm")
    if warm is None:  # the warm-up checkpoint never became durable: say so, figures would mean nothing
        out.checks.append(inv.Check(inv.FITS_DURABLE, False, f"{kind}: the checkpoint before the notice never got durable"))
        return _finish(world, out, t0)
    at = state["at"]
    need = spec.step_s + save_s(layout) + (_durable_at(world, warm.step) - warm.end)
    after = [s for s in job.saves if s.start >= at]
    first = after[0] if after else None
    stop = next((s for s in after if s.stop), None)

    def since_notice(save):
        t = _durable_at(world, save.step) if save else None
        return None if t is None else t - at

    exit_asked = [e["t"] - at for e in world.log.of("trainer_signalled", signal="SIGTERM") if e["node"] == 0]
    latest = world.bucket.latest_step()
    fits = deadline is None or deadline >= need
    durable_first = since_notice(first)
    in_time = durable_first is not None and (deadline is None or durable_first <= deadline)
    windows = [e["window_s"] for e in world.log.of("notice_window") if e["node"] == 0]
    out.figures.update(
        kind=kind, cloud=cloud, hard=hard, deadline_s=deadline, window_s=windows[-1] if windows else NOTICE_WINDOW_S[cloud],
        need_s=need, exit_asked_s=exit_asked[0] if exit_asked else None, first_step=first.step if first else None,
        first_durable_s=durable_first, exit_step=stop.step if stop else None, exit_durable_s=since_notice(stop),
        trained_to=job.step, latest=latest, lost_steps=job.step - (latest or 0), fits=fits,
        lost_at_s=state.get("lost_at", at) - at if hard else None,
        notice_durable=[e.get("notice_to_durable_s") for e in world.log.of("notice_durable") if e["node"] == 0],
        lifecycle=len(world.lifecycle), heartbeats=len(world.heartbeats), azure_acked=len(world.nodes[0].md.acked),
    )  # fmt: skip
    when = f"{durable_first:.0f} s after the notice" if durable_first is not None else "never"
    if deadline is None:
        detail = f"{kind} (soft, no deadline): its checkpoint durable {when}"
    else:
        detail = (f"{kind}: deadline {deadline:.0f} s, model needs {need:.0f} s: {'fits' if fits else 'does not fit'}; "
                  f"first checkpoint durable {when}")  # fmt: skip
    out.checks.append(inv.Check(inv.FITS_DURABLE, (not fits) or in_time, detail))
    return _finish(world, out, t0)


# ------------------------------------------------------------------------------------------ issue 29 #11


DONE_KINDS = ("aws-asg-terminate", "azure-Terminate")  # terminations an agent can release; GCP's MIG just deletes
CONVERT_FIXED_S = 2.97  # benchmarks/conversion_rate.py's fit: 2.97 s + bytes / 137 MB/s (conversion_rate.md)
RELEASE_BOUND_S = 10.0  # "at once": the agent's metadata poll (1 s) and loop, with room; the hook holds 600 s


def job_done(spec: Spec, kind: str, workdir: str) -> Outcome:
    """The job reaches its last step: its final checkpoint, every node's agent syncs it, node 0 scales the group to
    zero, and every node is held by its termination (the group's lifecycle hook, an Azure Terminate event) until
    its agent releases it. Before the fix no agent did (each exited at DONE), and every node waited out the hook's
    600 s or the notBeforeTimeout, billed. Checks: the last step is LATEST, and every node is released within
    RELEASE_BOUND_S of the scale to zero; the figure is the slowest node's seconds from its notice to its
    release."""
    t0 = time.perf_counter()
    cloud = NOTICES[kind][0]
    deadline = notice_deadline_s(kind, spec)
    shape, layout = spec.shape(cloud), spec.layout()
    world = World(cloud, shape, workdir, spec.keep_last)
    n, last_step = spec.nodes, 3
    out = Outcome(f"job done ({kind})")
    state = {}

    def main():
        _start(world, spec, n, notified=tuple(range(n)))
        job = world.launch(layout, "run-1", spec.step_s, last_step=last_step)
        finished = lambda: len({e["node"] for e in world.log.of("training_done")}) == n  # noqa: E731
        world.wait_for(finished, 40 * need_s(spec, shape, layout))
        state["done"] = job.done
        state["noticed"] = world.clock.elapsed()  # node 0's scale to zero: every node's termination at once
        for r in range(n):
            post_notice(world.nodes[r].md, kind, world.clock.now, deadline)
        world.wait_for(lambda: all(not world.nodes[r].watch_task.is_alive() for r in range(n)), deadline + 1, 0.5)
        return job

    world.run(main)
    release = "azure_event_acknowledged" if cloud == "azure" else "lifecycle_action_completed"
    released = {e["node"]: e["t"] for e in world.log.of(release)}
    noticed = state.get("noticed")
    waits = [released[r] - noticed for r in range(n) if r in released and noticed is not None]
    latest = world.bucket.latest_step()
    ok = state.get("done") == last_step == latest and len(waits) == n and max(waits) <= RELEASE_BOUND_S
    out.figures.update(kind=kind, cloud=cloud, deadline_s=deadline, released=len(waits), nodes=n,
                       release_max_s=max(waits) if waits else None, latest=latest, done=state.get("done"))  # fmt: skip
    slowest = f"{max(waits):.1f} s" if waits else "never"
    out.checks.append(inv.Check(inv.RELEASED_AT_DONE, ok, f"{kind}: {len(waits)} of {n} nodes released, the slowest "
                                f"{slowest} after the scale to zero (at most {RELEASE_BOUND_S:g} s; the deadline {deadline:.0f} s); "
                                f"LATEST step {latest}"))  # fmt: skip
    return _finish(world, out, t0)


# ------------------------------------------------------------------------------------------ loss, restart, elastic


def _restore_phase(world: World, name: str, ranks, nodes: int, resize: bool) -> tuple[dict, list]:
    results = world.restore_all(list(ranks), nodes, resize)
    fetched = [r.fetched for r in results]
    figures = {
        "ranks": len(results), "step": sorted({r.step for r in results}, key=lambda s: (s is None, s)),
        "seconds_max": max(r.seconds for r in results), "seconds": [r.seconds for r in results],
        "fetched_min": min(fetched), "fetched_max": max(fetched), "fetched": fetched,
        "failed_tries": sum(len(r.errors) for r in results), "failed_nodes": sum(1 for r in results if r.step is None),
        "first_error": next((r.errors[0] for r in results if r.errors), None),
    }  # fmt: skip
    checks = [inv.restores_hold_committed(world, results, resize)]
    if not resize:
        checks.append(inv.no_foreign_shards(results))
    for c in checks:
        c.detail = f"{name}: {c.detail}"
    return figures, checks


def loss_restart(spec: Spec, workdir: str) -> Outcome:
    t0 = time.perf_counter()
    shape, layout = spec.shape(), spec.layout()
    world = World(spec.cloud, shape, workdir, spec.keep_last)
    n, last = spec.nodes, spec.nodes - 1
    need = need_s(spec, shape, layout)
    out = Outcome("loss and restart")
    fig = out.figures

    def checkpoint(job, stop=False) -> int:
        before = len(job.saves)
        job.request(0, stop)
        world.wait_for(lambda: len(job.saves) > before, 4 * need)
        return job.saves[-1].step

    def main():
        _start(world, spec, n)
        job = world.launch(layout, "run-1", spec.step_s)
        s1 = checkpoint(job)
        world.wait_for(lambda: world.bucket.latest_step() == s1, 4 * need)
        s2 = checkpoint(job)
        # node `last` is lost halfway through its upload of s2: LATEST must stay on s1
        world.wait_for(lambda: world.log.of("upload_start", step=s2, node=last), 2 * need, 0.1)
        world.clock.sleep(upload_bound_s(shape, layout, last) / 2)
        world.lose(last)
        world.clock.sleep(2 * need)  # every other part lands; node 0 waits for the lost one's
        fig["loss"] = {"s1": s1, "s2": s2, "latest": world.bucket.latest_step()}
        out.checks.append(inv.Check("a node lost mid-upload leaves LATEST on the previous step",
                                    world.bucket.latest_step() == s1,
                                    f"lost node {last} mid-upload of step {s2}; LATEST step {world.bucket.latest_step()}"))  # fmt: skip
        # the replacement joins; the survivors restart their software on the same disks; all restore
        for r in range(n):
            world.boot(r, fresh=(r == last))
        fig["restart"], checks = _restore_phase(world, "restart", range(n), n, False)
        out.checks.extend(checks)
        # a cold restart: every node new (a whole-job interruption)
        for r in range(n):
            world.boot(r, fresh=True)
        fig["cold"], checks = _restore_phase(world, "cold restart", range(n), n, False)
        out.checks.extend(checks)
        if (spec.tp, spec.pp) == (1, 1) and n > 1:
            _elastic(world, spec, s1)

    def _elastic(world, spec, s1):
        small = shrink_to(n, spec.grad_accum, max(1, n // 2))
        fig["shrink_to"] = small
        if small is None:
            return
        # node `last` lost again and no replacement within the wait: the job shrinks to `small` nodes
        world.lose(last)
        for r in range(small):
            world.boot(r, fresh=False)
        out.checks.append(_without_elastic(world, small))
        fig["shrink"], checks = _restore_phase(world, "shrink", range(small), small, True)
        out.checks.extend(checks)
        fig["conversion"] = _convert_all(world, spec, small, s1, out)
        # the shrunk job (converted to universal, not simulated) trains and saves at `small` nodes
        for r in range(small):
            world.start_agent(r)
        job = world.launch(spec.layout(small), "run-2", spec.step_s, start_step=s1)
        s3 = checkpoint(job, stop=True)
        ok = world.wait_for(lambda: world.bucket.latest_step() == s3, 10 * need_s(spec, shape, spec.layout(small)))
        fig["shrunk_step"], fig["shrunk_durable"] = s3, ok
        # capacity is back: every node restores the shrunk job's step at the full size
        for r in range(n):
            world.boot(r, fresh=(r >= small))
        fig["grow"], checks = _restore_phase(world, "grow back", range(n), n, True)
        out.checks.extend(checks)

    world.run(main)
    fig["peak_disk"] = dict(world.peaks)
    fig["restored_bytes_layout"] = list(layout.restored_bytes)
    fig["download_bound_s"] = max(ideal_download_s(shape, [f.size for _, f in _needed(layout, r)]) for r in range(n))
    return _finish(world, out, t0)


def _convert_all(world: World, spec: Spec, nodes: int, step: int, out: Outcome) -> dict:
    """Issue 29 #12 and #7: every survivor converts the whole checkpoint (trainfleet-resize.py's ds_to_universal,
    in `.convert-<step>-<pid>`). Not run here: it takes what benchmarks/conversion_rate.py measured, 2.97 s +
    bytes / 137 MB/s, and its work folder holds (peak - 1) x the input beside it (disk_need's measured peak). The
    last survivor is lost halfway and comes back on the same disk: its restore must clear the dead conversion's
    folder, and no node keeps a temp folder after its restore."""
    from cli.planner.reliability import UNIVERSAL_CONVERT_BYTES_PER_S
    from infra.disk_need import CONVERSION_PEAK_PER_INPUT_BYTE, CONVERSION_PEAK_PER_INPUT_BYTE_ZERO3

    total = spec.layout().total_bytes
    peak = CONVERSION_PEAK_PER_INPUT_BYTE_ZERO3 if spec.zero == 3 else CONVERSION_PEAK_PER_INPUT_BYTE
    seconds = CONVERT_FIXED_S + total / UNIVERSAL_CONVERT_BYTES_PER_S

    def convert(rank: int) -> None:
        node = world.nodes[rank]
        work = os.path.join(node.ckpt_dir, f".convert-{step}-{4000 + rank}")
        os.makedirs(work, exist_ok=True)
        with open(os.path.join(work, "universal.partial"), "wb") as f:
            f.truncate(int((peak - 1) * total))  # sparse: the fragments and merged files, beside the input
        world.measure(rank)
        world.clock.sleep(seconds)
        shutil.rmtree(work)  # the universal checkpoint takes the step folder's place (not modelled further)
        world.measure(rank)

    lost = nodes - 1
    tasks = [world.clock.spawn(lambda r=r: convert(r), "convert", node=world.nodes[r].tag) for r in range(nodes)]
    world.clock.sleep(seconds / 2)
    world.lose(lost)
    for t in tasks:
        world.clock.join(t)
    world.boot(lost, fresh=False)
    left_before = _temp_folders(world.nodes[lost].ckpt_dir)
    world.restore_all([lost], nodes, resize=True)
    leftovers = {r: left for r in range(nodes) if (left := _temp_folders(world.nodes[r].ckpt_dir))}
    out.checks.append(inv.Check(inv.NO_TEMP_LEFT, bool(left_before) and not leftovers,
                                f"node {lost} lost mid-conversion left {left_before}; after its restore, temp folders "
                                f"left: {leftovers or 'none'}"))  # fmt: skip
    return {"seconds": seconds, "input_bytes": total, "peak_per_input": peak,
            "peak_disk": max(world.nodes[r].peak_disk for r in range(nodes))}  # fmt: skip


def _temp_folders(ckpt_dir: str) -> list[str]:
    """What a killed save, restore or conversion leaves in a checkpoint folder (named here, not taken from the
    agent's own cleanup rule, so that a folder the agent forgets is caught)."""
    return sorted(x for x in os.listdir(ckpt_dir) if x == ".tmp" or x.startswith((".restore-step-", ".convert-")))


def _without_elastic(world: World, nodes: int) -> inv.Check:
    """Issue 29 #2: the same survivors without elastic recovery. Each node's restore refuses the checkpoint saved
    by another node count (exit 6: the boot script logs node_count_changed and stops the job), fetching nothing,
    deleting no local step and leaving LATEST where it was; before the fix every step was skipped, local steps
    were deleted and training restarted from step 0."""
    latest = world.bucket.latest_step()
    disks = {r: sorted(os.listdir(world.nodes[r].ckpt_dir)) for r in range(nodes)}
    results = world.restore_all(list(range(nodes)), nodes, resize=False)
    stopped = [r.rank for r in results if r.stopped and r.fetched == 0 and r.step is None]
    kept = [r for r in range(nodes) if sorted(os.listdir(world.nodes[r].ckpt_dir)) == disks[r]]
    ok = len(stopped) == len(kept) == nodes and world.bucket.latest_step() == latest
    detail = (f"without elastic at {nodes} nodes: {len(stopped)} of {nodes} stopped (node_count_changed), {len(kept)} "
              f"kept their local steps, LATEST step {world.bucket.latest_step()}")  # fmt: skip
    return inv.Check(inv.NODE_COUNT_STOPS, ok, detail)


def _needed(layout: CheckpointLayout, rank: int):
    """(node, file) a node of `layout` restores (the agent's needed_files, on the layout's manifest)."""
    by_path = {(f.node, f.path): f for f in layout.files}
    return [(n, by_path[(n, e["path"])]) for n, e in checkpoints.needed_files(layout.manifest(), rank)]


# ------------------------------------------------------------------------------------------ issue 29 #1


def second_save(spec: Spec, workdir: str, slow_rank: int | None = None, upload: str = "sync") -> Outcome:
    """Run 1 saves step S2 and node 0 is lost before committing it; run 2 restores S1, trains to S2 again and saves
    it (a second save: same names, same sizes, new bytes); its nodes upload with `upload` ("sync": the `sync`
    command, upload_step, as the boot script runs it; "watch": the agent's watch loop). `slow_rank`: that node's
    links are 20 times slower in run 2 (a degraded NIC), so its new part lands after node 0's."""
    t0 = time.perf_counter()
    shape, layout = spec.shape(), spec.layout()
    world = World(spec.cloud, shape, workdir, spec.keep_last)
    n = spec.nodes
    need = need_s(spec, shape, layout)
    name = f"second save ({upload}" + (f", node {slow_rank} slow" if slow_rank is not None else "") + ")"
    out = Outcome(name)

    def main():
        _start(world, spec, n)
        job = world.launch(layout, "run-1", spec.step_s)
        job.request(0, False)
        world.wait_for(lambda: job.saves and world.bucket.latest_step() == job.saves[0].step, 4 * need)
        s1 = job.saves[0].step
        job.request(0, False)
        world.wait_for(lambda: len(job.saves) > 1, 4 * need)
        s2 = job.saves[1].step

        def parts_in(step):
            return {r for r in range(n) if f"{PREFIX}/{step_name(step)}/node-{r}/PART.json" in world.bucket.objects}

        # node 0 is lost once the other parts are durable (or its own is), before it commits
        world.wait_for(lambda: parts_in(s2) >= set(range(1, n)) or 0 in parts_in(s2), 4 * need, 0.2)
        world.lose(0)
        out.figures["run1"] = {"s1": s1, "s2": s2, "parts_durable": len(parts_in(s2)), "latest": world.bucket.latest_step()}
        # run 2: node 0 replaced, the others restart on their disks; the boot script restores S1
        for r in range(n):
            world.boot(r, fresh=(r == 0))
        restored = world.restore_all(list(range(n)), n)
        out.checks.append(inv.restores_hold_committed(world, restored, False))
        if slow_rank is not None:
            node = world.nodes[slow_rank]
            node.store.up.capacity /= 20
            node.store.down.capacity /= 20
        if upload == "watch":
            for r in range(n):
                world.start_agent(r)
        job2 = world.launch(layout, "run-2", spec.step_s, start_step=restored[0].step or 0)
        while job2.step < s2 - 1 and job2.running:
            world.clock.sleep(spec.step_s)
        job2.request(0, True)  # the save of S2 again, then the trainer stops
        world.wait_for(lambda: job2.saves, 4 * need)
        if upload == "sync":

            relaunched = {}

            def sync(r):  # the boot script after the trainer stopped: `sync` (a failure is logged and it goes on),
                node = world.nodes[r]  # then the relaunch's `restore`, each node on its own
                try:
                    checkpoints.upload_step(node.store, PREFIX, node.ckpt_dir, s2, spec.keep_last, 20 * need)
                except Exception as e:  # noqa: BLE001
                    log("sync_failed", step=s2, error=f"{type(e).__name__}: {e}"[:300])
                relaunched[r] = world.boot_restore(r, n)

            tasks = [world.clock.spawn(lambda r=r: sync(r), "sync", node=world.nodes[r].tag) for r in range(n)]
            for t in tasks:
                world.clock.join(t)
            # issue 29 #8: a node whose part is in before node 0's commit waits for it, and restores S2; restoring
            # S1 would delete its S2 and cost the next launch (and a full download). Without the wait (planted
            # here once): 7 of 8 nodes restored S1.
            steps = Counter(x.step for x in relaunched.values())
            out.checks.append(inv.Check(inv.RESTORES_AFTER_COMMIT, steps == Counter({s2: n}),
                                        f"relaunch after the save of step {s2}: nodes restored {dict(steps)}"))  # fmt: skip
            out.checks.append(inv.restores_hold_committed(world, list(relaunched.values()), False))
        else:
            world.wait_for(lambda: world.bucket.latest_step() == s2, 40 * need)
        out.figures["run2"] = {"step": job2.saves[0].step if job2.saves else None, "latest": world.bucket.latest_step()}
        # what a node restoring it now gets
        world.boot(n - 1, fresh=True)
        cold = world.restore_all([n - 1], n)
        out.checks.append(inv.restores_hold_committed(world, cold, False))
        out.figures["cold_restore_step"] = cold[0].step
        out.last_restore = cold[0]

    world.run(main)
    return _finish(world, out, t0)


def run_all(spec: Spec, workdir: str, notices: list[str] | None = None, progress=None) -> list[Outcome]:
    """Every scenario at the spec's size; `notices`: the notice types (default all)."""
    outcomes = []

    def step(fn, *args):
        sub = os.path.join(workdir, f"s{len(outcomes):02d}")
        os.makedirs(sub)
        o = fn(*args, sub)
        outcomes.append(o)
        if progress:
            progress(o)

    step(periodic, spec)
    for kind in notices if notices is not None else list(NOTICES):
        step(lambda sub, k=kind: notice(spec, k, sub))
    for kind in DONE_KINDS:
        step(lambda sub, k=kind: job_done(spec, k, sub))
    step(loss_restart, spec)
    step(second_save, spec)
    step(lambda sub: second_save(spec, sub, slow_rank=spec.nodes - 1, upload="watch"))
    return outcomes

