"""The watch loop: trainer signalling, periodic checkpoints, sync, notice handling."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from .checkpoints import complete_steps, read_latest, upload_step
from .common import ASG_HOOK_NAME, NOTICE_WINDOW_S, log
from .membership import _aws_query
from .metadata import AwsMetadata, metadata_base
from .notices import Notice, NoticeSource
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
        self._cadence_rank: str | None = None  # the node rank last read from node-rank (for the log)
        self.window = args.notice_window_s or NOTICE_WINDOW_S[args.cloud]
        self.synced: int | None = None
        self.notice: Notice | None = None
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.sigterm_at: float | None = None
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
        log(
            "notice",
            kind=n.kind,
            hard=n.hard,
            detail=n.detail,
            deadline_in_s=round(n.deadline - time.time(), 1),
        )
        try:
            self.trainer.request(exit_after=n.hard)
        except Exception as e:  # noqa: BLE001
            log("signal_failed", error=str(e)[:200])
        if n.hard:
            with self._lock:
                self.notice = n

    def sync(self, step: int, reason: str) -> bool:
        try:
            upload_step(self.store, self.args.prefix, self.args.ckpt_dir, step, self.args.keep_last)
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
                if not t.is_alive() and self.notice is None and not self.stop.is_set():
                    log("metadata_thread_restarted")  # it only ends on a hard notice; never go blind
                    t = self._start_source()
                if self.sigterm_at is not None and self.notice is None:
                    self.on_notice(
                        Notice(
                            "sigterm",
                            True,
                            "agent received SIGTERM",
                            self.sigterm_at + min(self.window, 30.0),
                        )
                    )
                with self._lock:
                    notice = self.notice
                if notice is not None:
                    return self.handle_notice(notice)
                try:
                    finished = self.tick()
                except Exception as e:  # noqa: BLE001 - the watch loop never dies on a fault
                    log("watch_error", error=f"{type(e).__name__}: {e}"[:300])
                    finished = None
                if finished is not None:
                    return finished
                if time.time() >= self.next_periodic:
                    self.next_periodic = time.time() + self.interval
                    if self.trainer.alive() and self.keeps_the_cadence():
                        log("periodic_checkpoint_request")
                        self.trainer.request(exit_after=False)
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

    def tick(self) -> int | None:
        """Sync a new complete checkpoint; on DONE do the final sync and return the exit code."""
        newest = self.newest()
        if newest is not None and (self.synced is None or newest > self.synced):
            self.sync(newest, "periodic")
        done = self.trainer.done_step()
        if done is None:
            return None
        newest = self.newest()
        if newest is not None and (self.synced is None or newest > self.synced):
            if not self.sync(newest, "final"):
                return None  # retried on the next tick
        log("training_done", final_step=done, synced=self.synced)
        return 0

    def handle_notice(self, n: Notice) -> int:
        baseline = self.newest()
        # Leave time to upload: stop waiting for the trainer's notice checkpoint with a quarter of the window
        # (at least 5 s, at most half) to spare, and fall back to the newest complete checkpoint on disk.
        span = max(0.0, n.deadline - n.at)
        wait_until = n.deadline - min(max(5.0, 0.25 * span), 0.5 * span)
        log("notice_wait", baseline=baseline, deadline_in_s=round(n.deadline - time.time(), 1))
        target = None
        while time.time() < wait_until:
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
            ok = False
            while not ok and time.time() < n.deadline:
                ok = self.sync(target, "notice")
        if ok and target is not None:
            log("notice_durable", step=target, notice_to_durable_s=round(time.time() - n.at, 3), kind=n.kind)
        if n.kind == "aws-asg-terminate":
            complete_lifecycle_action(self.args.metadata_url)
        if self.args.cloud == "azure" and n.event_ids:
            try:
                self.source.md.ack(n.event_ids)
                log("azure_event_acknowledged", event_ids=n.event_ids)
            except Exception as e:  # noqa: BLE001
                log("azure_ack_failed", error=str(e)[:200])
        return 0 if ok else 1


def complete_lifecycle_action(metadata_url: str | None) -> None:
    """Let the group finish terminating this instance now that its checkpoint is safe (otherwise it waits out the
    hook's timeout, GPUs billing). Best effort: the hook's default result continues the termination anyway."""
    group = os.environ.get("TRAINFLEET_GROUP", "")
    try:
        instance = (AwsMetadata(metadata_base("aws", metadata_url)).get("instance-id") or "").strip()
        _aws_query(
            "autoscaling",
            {
                "Action": "CompleteLifecycleAction",
                "Version": "2011-01-01",
                "AutoScalingGroupName": group,
                "LifecycleHookName": ASG_HOOK_NAME,
                "InstanceId": instance,
                "LifecycleActionResult": "CONTINUE",
            },
            metadata_url,
        )
        log("lifecycle_action_completed", group=group, instance=instance)
    except Exception as e:  # noqa: BLE001
        log("lifecycle_action_failed", group=group, error=str(e)[:200])


