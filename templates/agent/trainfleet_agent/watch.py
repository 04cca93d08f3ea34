"""The watch loop: trainer signalling, periodic checkpoints, sync, notice handling."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from .checkpoints import commit, complete_steps, ensure_part, prune_local, read_latest, step_part
from .common import NOTICE_WINDOW_S, log
from .lifecycle import HookKeeper, complete_lifecycle_action
from .metadata import metadata_base
from .notices import Notice, NoticeBoard, NoticeSource, read_handled, release_azure_events, write_handled
from .progress import ProgressReporter
from .stores import make_store


class Trainer:
    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def pid(self) -> int | None:
        try:
            with open(os.path.join(self.run_dir, "trainer.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie (exited child of ours) is not alive
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(") ")[-1][:1] != "Z"
        except OSError:
            return True

    def request(self, exit_after: bool) -> None:
        os.makedirs(self.run_dir, exist_ok=True)
        flag = os.path.join(self.run_dir, "checkpoint-requested")
        with open(flag + ".tmp", "w") as f:
            f.write("exit\n" if exit_after else "continue\n")
        os.replace(flag + ".tmp", flag)
        pid = self.pid()
        sig = signal.SIGTERM if exit_after else signal.SIGUSR1
        if pid is not None:
            try:
                os.kill(pid, sig)
                log("trainer_signalled", pid=pid, signal=sig.name)
            except ProcessLookupError:
                log("trainer_gone", pid=pid)
        else:
            log("trainer_pid_missing", flag=flag)

    def done_step(self) -> int | None:
        try:
            with open(os.path.join(self.run_dir, "DONE")) as f:
                txt = f.read().strip()
        except OSError:
            return None
        try:
            return int(txt or "-1")
        except ValueError:
            return -1


class Watcher:
    def __init__(self, args):
        self.args = args
        self.store = make_store(args.cloud, args.bucket, args.metadata_url)
        self.trainer = Trainer(args.run_dir)
        self.progress = ProgressReporter(self.store, args.prefix, args.run_dir)
        self._cadence_rank: str | None = None  # the node rank last read from node-rank (for the log)
        self.window = args.notice_window_s or NOTICE_WINDOW_S[args.cloud]
        self.synced: int | None = None
        self.uploaded: set[int] = set()  # steps whose part this agent uploaded
        self.pending: int | None = None  # a step rank 0 uploaded but could not commit yet
        self.notice: Notice | None = None  # the hard notice with the earliest deadline
        self.board = NoticeBoard(self.window)  # every hard notice in force, by its real deadline
        self.exit_baseline: int | None = None  # the newest complete step when the trainer was asked to exit
        self.done = False  # DONE seen and the final checkpoint synced: only a termination is left to release
        self._syncing: threading.Thread | None = None  # the periodic upload, off the main loop
        # What this node's checkpoint really takes (issue 29 #4): the trainer's save after a request, and the upload
        # and commit of its part. The exit window grows to cover them; the configured window is the floor.
        self.base_window = self.window
        self.requested_at: tuple[float, int | None] | None = None  # (when, newest step then)
        self.save_s: float | None = None
        self.upload_s: float | None = None
        self.commit_s: float | None = None  # node 0 only
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.sigterm_at: float | None = None
        self._sigterm_noticed = False
        self.handled = read_handled(args.run_dir)  # terminations handled before a restart, still being served
        base = metadata_base(args.cloud, args.metadata_url)
        self.source = NoticeSource(args.cloud, base, self.window, args.poll_s, args.http_timeout_s)

    def on_sigterm(self, *_):
        """The node is shutting down (systemd stop: a GCP preemption's ACPI soft-off, an AWS stop/terminate, a
        missed notice): the first SIGTERM is handled as a spot notice, a second one exits at once."""
        if self.sigterm_at is not None:
            log("agent_sigterm", action="exit")
            sys.exit(143)
        self.sigterm_at = time.time()  # only a flag here: the main loop turns it into a notice

    def on_notice(self, n: Notice) -> None:
        """A soft notice asks for a checkpoint and training goes on. A hard one goes on the board, which keeps
        the earliest deadline: with no more than the notice window left, the trainer is asked to checkpoint and
        exit at once; with more, it is asked for a checkpoint now (and goes on), and the main loop asks it to
        exit when only the window is left. Either way the agent keeps watching."""
        if n.hard and not n.cancelled and n.key in self.handled:  # handled before this restart: not again
            log("notice_already_handled", kind=n.kind, deadline_in_s=round(n.deadline - time.time(), 1))
            return
        if n.hard:
            change = self.board.add(n)
            if change == "cancelled":
                log("notice_cancelled", kind=n.kind, detail=n.detail)
            if change in ("same", "cancelled"):
                with self._lock:
                    self.notice = self.board.earliest()
                return
        left = n.deadline - time.time()
        fields = {"deadline_in_s": round(left, 1), "exit_in_s": round(max(0.0, left - self.window), 1)}
        log("notice", kind=n.kind, hard=n.hard, detail=n.detail, **(fields if n.hard else {}))
        try:
            if self.done:
                pass  # training is over: nothing to ask; the main loop releases a termination
            elif not n.hard:
                self.request_checkpoint()
            elif left <= self.window or self.board.exiting:
                self._ask_exit()
            elif change == "new" and left - self.window >= self.window:
                # A checkpoint now, in case, and training goes on; only when it can be durable before the exit
                # is asked (it takes about the window). Else the two saves and uploads would share the node's
                # bandwidth and neither land in time (the scale sim: Azure Reboot's 900 s at 70B).
                self.request_checkpoint()
        except Exception as e:  # noqa: BLE001
            log("signal_failed", error=str(e)[:200])
        if n.hard:
            with self._lock:
                self.notice = self.board.earliest()

    def request_checkpoint(self) -> None:
        """Ask for a checkpoint (training goes on), timing how long the trainer takes to save it."""
        if self.requested_at is None:
            self.requested_at = (time.time(), self.newest())
        self.trainer.request(exit_after=False)

    def _measured(self, newest: int | None) -> None:
        """A checkpoint asked for is complete: its save time, and the exit window it and the upload need."""
        if self.requested_at is None or newest is None:
            return
        at, before = self.requested_at
        if before is None or newest > before:
            self.save_s, self.requested_at = time.time() - at, None
            self._resize_window()

    def _resize_window(self) -> None:
        """The exit window: what this node's save, upload and (node 0) commit took last time, with a quarter more
        for a slower run, and never less than the configured window. A 70B part takes minutes where the default window is
        30 s (GCP, Azure) or 120 s (AWS): a long notice (GCP maintenance's hour, the group's 600 s hook, Azure's
        Terminate) then asks for the exit in time for the checkpoint to be durable before the deadline."""
        needed = 1.25 * sum(x or 0.0 for x in (self.save_s, self.upload_s, self.commit_s))
        window = max(self.base_window, needed)
        if abs(window - self.window) >= 1.0:
            log("notice_window", window_s=round(window, 1), save_s=self.save_s and round(self.save_s, 1),
                upload_s=self.upload_s and round(self.upload_s, 1))  # fmt: skip
            self.window = self.board.window_s = window

    def _ask_exit(self) -> None:
        """Ask the trainer to checkpoint and exit, once; the newest step at that moment is the baseline its
        notice checkpoint must beat."""
        with self._lock:  # the poll thread and the main loop may both get here: the baseline is set first
            if self.board.exiting:
                return
            self.exit_baseline = self.newest()
            self.board.start_exit()
            self.trainer.request(exit_after=True)

    def sync(self, step: int, reason: str) -> bool:
        """True once this node's part of `step` is durable and, on the node that saved it as rank 0, the step
        is committed (every node's part there, MANIFEST.json and LATEST written). Rank 0 waiting for another
        node's part returns False and is called again: its part is uploaded once."""
        a = self.args
        try:
            who = step_part(a.ckpt_dir, step)
            if step not in self.uploaded and not who["restored"]:
                t0 = time.time()
                if ensure_part(self.store, a.prefix, a.ckpt_dir, step):  # False: `sync` had uploaded it already
                    self.upload_s = time.time() - t0
                    self._resize_window()
                self.uploaded.add(step)
                prune_local(a.ckpt_dir, a.keep_last)
            if who["node_rank"] == 0 and not who["restored"]:
                # a notice or the final sync waits a little for the other nodes' parts; a periodic one does not
                until = time.time() + (0.0 if reason == "periodic" else 1.0)
                t0 = time.time()
                while commit(self.store, a.prefix, step, who["nodes"], a.keep_last, who["save"]) is None:
                    if time.time() >= until:
                        if self.pending != step:
                            log("commit_waiting", step=step, nodes=who["nodes"], reason=reason)
                        self.pending = step
                        return False
                    time.sleep(0.2)
                self.commit_s = time.time() - t0  # the last (successful) round: reading every part, writing two
            with self._lock:
                self.pending = None
                self.synced = step if self.synced is None else max(self.synced, step)
            return True
        except Exception as e:  # noqa: BLE001
            log("sync_failed", step=step, reason=reason, error=f"{type(e).__name__}: {e}"[:300])
            return False

    def newest(self) -> int | None:
        steps = complete_steps(self.args.ckpt_dir)
        return steps[-1] if steps else None

    def run(self) -> int:
        a = self.args
        log(
            "watch_start",
            cloud=a.cloud,
            bucket=a.bucket,
            prefix=a.prefix,
            window_s=self.window,
            pid=os.getpid(),
        )
        t = self._start_source()  # first: a slow bucket must not delay noticing a notice
        try:
            self.synced = read_latest(self.store, a.prefix)
        except Exception as e:  # noqa: BLE001
            log("latest_lookup_failed", error=str(e)[:200])
        self.interval = a.interval_minutes * 60.0
        self.next_periodic = time.time() + self.interval if self.interval > 0 else float("inf")
        try:
            while True:
                if not t.is_alive() and not self.stop.is_set():
                    log("metadata_thread_restarted")  # it never ends on its own; never go blind
                    t = self._start_source()
                if self.sigterm_at is not None and not self._sigterm_noticed:
                    self._sigterm_noticed = True  # a real termination: its deadline is within the window
                    deadline = self.sigterm_at + min(self.window, 30.0)
                    self.on_notice(Notice("sigterm", True, "agent received SIGTERM", deadline))
                notice = self.board.due()  # the earliest deadline, once only the notice window is left
                if notice is None and self.done:  # nothing left to save: release a termination at once
                    notice = self.board.earliest()
                if notice is not None:
                    return self.handle_notice(notice)
                try:
                    self.tick()
                except Exception as e:  # noqa: BLE001 - the watch loop never dies on a fault
                    log("watch_error", error=f"{type(e).__name__}: {e}"[:300])
                if time.time() >= self.next_periodic:
                    self.next_periodic = time.time() + self.interval
                    if not self.done and self.trainer.alive() and self.keeps_the_cadence():
                        log("periodic_checkpoint_request")
                        self.request_checkpoint()
                time.sleep(a.scan_s)
        finally:
            self.stop.set()

    def keeps_the_cadence(self) -> bool:
        """One checkpoint cadence per job: only node rank 0's agent asks for periodic checkpoints (the trainer's
        ranks agree on any rank's request, so every node's timer would multiply the checkpoints by the node
        count). The boot script writes the node's rank to `node-rank` in the run dir at each launch; without
        it (a single node, or before the first launch) this node keeps the cadence. Notices always count."""
        try:
            with open(os.path.join(self.args.run_dir, "node-rank")) as f:
                rank = f.read().strip()
        except OSError:
            return True
        keeps = rank in ("", "0")
        if rank != self._cadence_rank:
            self._cadence_rank = rank
            log("periodic_cadence", node_rank=rank, keeps_cadence=keeps)
        return keeps

    def _start_source(self) -> threading.Thread:
        t = threading.Thread(
            target=self.source.run, args=(self.on_notice, self.stop), daemon=True, name="notices"
        )
        t.start()
        return t

    def tick(self) -> None:
        """Upload a new complete checkpoint in the background (the main loop keeps watching for notices while a
        part of hundreds of GB goes up: issue 29 #4); on DONE, the final sync. After DONE the agent keeps watching:
        scaling the group to zero terminates every node, and each must release its termination (the group's
        lifecycle hook, an Azure Terminate event) or wait out its timeout, billed (issue 29 #11)."""
        if self.done:
            return
        self.progress.tick()
        newest = self.newest()
        self._measured(newest)
        if newest is not None and (self.synced is None or newest > self.synced) and not self.syncing():
            self._syncing = threading.Thread(target=self.sync, args=(newest, "periodic"), daemon=True, name="sync")
            self._syncing.start()
        done = self.trainer.done_step()
        if done is None or self.syncing():  # the final sync after the periodic one (often the same step)
            return
        newest = self.newest()
        if newest is not None and (self.synced is None or newest > self.synced):
            if not self.sync(newest, "final"):
                return  # retried on the next tick
        log("training_done", final_step=done, synced=self.synced, still_watching="terminations")
        self.done = True

    def syncing(self) -> bool:
        return self._syncing is not None and self._syncing.is_alive()

    def handle_notice(self, n: Notice) -> int:
        """Only the notice window is left before the earliest deadline: the trainer checkpoints and exits, that
        checkpoint is made durable, then the termination is released (the group's lifecycle action; each Azure
        event once every VM it names is safe) and the agent exits. The deadline is read again throughout: a
        sooner notice may still come."""
        if self.done:  # training over, its last checkpoint durable: release the termination and go
            self.release_terminations(self.board.notices() or [n], ok=True)
            return 0
        try:
            self._ask_exit()
        except Exception as e:  # noqa: BLE001
            log("signal_failed", error=str(e)[:200])
        baseline = self.exit_baseline
        # Leave time to upload: stop waiting for the trainer's notice checkpoint with a quarter of what was left
        # (at least 5 s, at most half) to spare, and fall back to the newest complete checkpoint on disk.
        start = time.time()

        def deadline() -> float:
            return self.board.deadline() or n.deadline

        def wait_until() -> float:  # time to spare for the upload: what it took last time, within the bounds
            span = max(0.0, deadline() - start)
            return deadline() - min(max(5.0, 0.25 * span, self.upload_s or 0.0), 0.5 * span)

        log("notice_wait", kind=n.kind, baseline=baseline, deadline_in_s=round(deadline() - start, 1))
        target = None
        while time.time() < wait_until():
            newest = self.newest()
            if newest is not None and (baseline is None or newest > baseline):
                target = newest
                break
            if not self.trainer.alive() and self.trainer.pid() is not None:
                time.sleep(0.2)  # the trainer may have renamed + marked COMPLETE just before exiting
                newest = self.newest()
                if newest is not None and (baseline is None or newest > baseline):
                    target = newest
                log("trainer_exited_during_notice", newest=newest)
                break
            time.sleep(0.05)
        if target is None:
            target = self.newest()
            log("notice_fallback", step=target, reason="no new checkpoint from the trainer in time")
        ok = True
        if target is not None and (self.synced is None or target > self.synced):
            with self._hook_kept():
                ok = self.sync(target, "notice")  # at least once, even when the deadline is already here
                while not ok and time.time() < deadline():
                    ok = self.sync(target, "notice")
        notices = self.board.notices()
        if ok:
            write_handled(self.args.run_dir, notices)
        if ok and target is not None:
            first = min([x.at for x in notices] or [n.at])
            log("notice_durable", step=target, kind=n.kind, notice_to_durable_s=round(time.time() - first, 3),
                exit_to_durable_s=round(time.time() - start, 3))  # fmt: skip
        self.release_terminations(notices, ok)
        return 0 if ok else 1

    def _hook_kept(self):
        """While the notice checkpoint goes up: the group's lifecycle hook kept from timing out (heartbeats), its
        notice's deadline moved with each; nothing to keep without a group termination on the board."""
        hook = next((x for x in self.board.notices() if x.kind == "aws-asg-terminate"), None)
        if hook is None:
            return contextlib.nullcontext()
        return HookKeeper(self.args.metadata_url, hook.at, lambda deadline: self.board.extend(hook.key, deadline))

    def release_terminations(self, notices: list[Notice], ok: bool) -> None:
        """Let the cloud go on with the termination now rather than at its timeout: the group's lifecycle action
        (AWS); each Azure event once every VM it names is safe."""
        if any(x.kind == "aws-asg-terminate" for x in notices):
            complete_lifecycle_action(self.args.metadata_url)
        azure = [x for x in notices if x.event_ids]
        if self.args.cloud == "azure" and azure:
            if ok:
                release_azure_events(self.store, self.args.prefix, self.source, azure)
            else:
                log("azure_event_not_acknowledged", event_ids=[e for x in azure for e in x.event_ids],
                    reason="this VM's checkpoint is not durable")  # fmt: skip
