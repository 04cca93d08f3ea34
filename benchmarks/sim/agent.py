"""The real agent (templates/agent/trainfleet_agent) wired to the simulation.

What is replaced, for the length of a run (`agent_on`), and why:
- `time` in checkpoints, watch, notices and common: the virtual clock (its time and sleep);
- `checkpoints.run_parallel`: the same contract (results in order, every call runs, then the first error) on
  clock tasks instead of a ThreadPoolExecutor, whose queue waits the clock cannot see;
- `checkpoints.open`: a simulated data file reads as the identity its checksum token is of (content.py), so
  `same_bytes` can hash it; every other file opens as usual;
- `watch.threading.Thread` (the watch loop's background upload) and `checkpoints.fcntl.flock` (one upload of a
  step's part at a time): the same behaviour as clock tasks, and a lock taken by retrying without blocking;
- `watch.make_store`: the node's shaped store (chosen by the bucket name each node's Watcher is given);
- `watch.complete_lifecycle_action` and `lifecycle.record_heartbeat`: recorded instead of calling the Auto Scaling
  API (the scenario's group honours each heartbeat as AWS does: the hook's timeout restarts); `lifecycle`'s
  `time` and `threading` are the clock's, as watch's are.
The Watcher is the real one; only the thread that polls the metadata service is a clock task here (SimWatcher),
polling the real NoticeSource (its parsing and deadlines) against ScriptedMetadata, which answers what the
scenario posted. The trainer it signals is the simulated job (TrainerHandle). Every log line the agent writes
is kept, with the virtual time and the node it came from (LogSink).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import email.utils
import fcntl
import json
import threading

from templates.agent.trainfleet_agent import checkpoints, common, lifecycle, notices, watch
from templates.agent.trainfleet_agent.metadata import AzureMetadata

from .clock import Clock, VirtualTime

PREFIX = "run"


class LogSink:
    """stderr during a run: each JSON line the agent logs, with the node of the task that wrote it."""

    def __init__(self, clock: Clock):
        self.clock = clock
        self.events: list[dict] = []
        self._buf = ""

    def write(self, text: str) -> int:
        self._buf += text
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            try:
                rec = json.loads(line)
            except ValueError:
                rec = {"event": "text", "text": line}
            tag = self.clock.current.node if self.clock.current else None
            rec.setdefault("node", tag[0] if isinstance(tag, tuple) else None)  # a node's tag: (rank, life)
            rec["tag"] = tag
            rec["t"] = self.clock.elapsed()
            self.events.append(rec)
        return len(text)

    def flush(self) -> None:
        pass

    def of(self, event: str, **match) -> list[dict]:
        return [e for e in self.events if e.get("event") == event and all(e.get(k) == v for k, v in match.items())]


@contextlib.contextmanager
def agent_on(clock: Clock, contents, stores: dict, released: list, heartbeats: list):
    """Point the agent modules at the simulation (see the module docstring); undone on exit."""
    vt = VirtualTime(clock)

    def make_store(cloud, bucket, metadata_url=None):
        return stores[bucket]

    def complete_lifecycle_action(metadata_url):
        released.append(clock.elapsed())
        common.log("lifecycle_action_completed", group="sim", instance="sim")
        return True

    def record_heartbeat(metadata_url):
        heartbeats.append(clock.now)
        common.log("lifecycle_heartbeat", group="sim", instance="sim")
        return True

    patches = [(checkpoints, "time", vt), (watch, "time", vt), (notices, "time", vt), (common, "time", vt),
               (checkpoints, "run_parallel", clock.run_parallel), (checkpoints, "open", contents.open_for_agent),
               (watch, "make_store", make_store), (watch, "complete_lifecycle_action", complete_lifecycle_action),
               (watch, "threading", ClockThreading(clock)), (lifecycle, "time", vt),
               (lifecycle, "threading", ClockThreading(clock)), (lifecycle, "record_heartbeat", record_heartbeat)]  # fmt: skip
    if hasattr(checkpoints, "fcntl"):
        patches.append((checkpoints, "fcntl", ClockFcntl(clock)))
    saved = [(mod, name, mod.__dict__.get(name, _MISSING)) for mod, name, _ in patches]
    sink = LogSink(clock)
    for mod, name, value in patches:
        setattr(mod, name, value)
    try:
        with contextlib.redirect_stderr(sink):
            yield sink
    finally:
        for mod, name, value in saved:
            if value is _MISSING:
                delattr(mod, name)
            else:
                setattr(mod, name, value)


_MISSING = object()


class ClockThreading:
    """`threading` as the watch loop sees it: a Thread is a clock task (same start/is_alive/join); the rest is the
    real module (its locks are never contended: one task runs at a time)."""

    def __init__(self, clock: Clock):
        self._clock = clock

    def Thread(self, group=None, target=None, name=None, args=(), kwargs=None, daemon=None):  # noqa: N802
        return _ClockThread(self._clock, target, name or "thread", args, kwargs or {})

    def __getattr__(self, name):
        return getattr(threading, name)


class _ClockThread:
    def __init__(self, clock: Clock, target, name: str, args, kwargs):
        self._clock, self._target, self.name, self._args, self._kwargs = clock, target, name, args, kwargs
        self._task = None
        self.daemon = True

    def start(self) -> None:
        self._task = self._clock.spawn(lambda: self._target(*self._args, **self._kwargs), self.name)

    def is_alive(self) -> bool:
        return self._task is not None and not self._task.done

    def join(self, timeout: float | None = None) -> None:
        if timeout is None:
            self._clock.join(self._task)
            return
        until = self._clock.now + timeout
        while self.is_alive() and self._clock.now < until:
            self._clock.sleep(min(0.1, until - self._clock.now))


class ClockFcntl:
    """`fcntl` as checkpoints.py sees it: a blocking flock becomes non-blocking tries with a clock sleep between,
    so a task waiting for another's lock lets it run (a real blocking flock would stop the whole simulation)."""

    def __init__(self, clock: Clock):
        self._clock = clock

    def flock(self, fd, operation) -> None:
        if operation & fcntl.LOCK_UN or operation & fcntl.LOCK_NB:
            return fcntl.flock(fd, operation)
        while True:
            try:
                return fcntl.flock(fd, operation | fcntl.LOCK_NB)
            except BlockingIOError:
                self._clock.sleep(0.1)

    def __getattr__(self, name):
        return getattr(fcntl, name)


# ------------------------------------------------------------------------------------------ metadata


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ScriptedMetadata:
    """A node's metadata service, answering what the scenario posted, in the shape each NoticeSource reads:
    AWS IMDS paths (text or None), GCP values (value, etag), Azure JSON and the approvals it receives."""

    def __init__(self, cloud: str, vm: str):
        self.cloud, self.vm = cloud, vm
        self.values: dict[str, str] = {}
        self.events: list[dict] = []
        self.acked: list[str] = []
        self.expects_notices = False  # only a node a scenario will notify is polled every poll_s (saves CPU)

    # AWS and GCP
    def get(self, path, params=None, timeout=None):
        value = self.values.get(path)
        if self.cloud == "gcp":
            if path == "instance/upcoming-maintenance":
                return None, None  # 404: not offered for this machine type
            return (value if value is not None else ("FALSE" if path == "instance/preempted" else "NONE")), "etag"
        return value

    # Azure
    def get_json(self, path, timeout=None):
        if path.startswith("/metadata/instance"):
            return {"compute": {"name": self.vm}}
        if path == AzureMetadata.EVENTS:
            return {"DocumentIncarnation": len(self.events), "Events": list(self.events)}
        raise KeyError(path)

    def ack(self, event_ids):
        self.acked.extend(event_ids)


NOTICES = {
    # kind: (cloud, hard, deadline seconds: the cloud's own, as trainfleet_agent/notices.py cites them)
    "aws-spot-terminate": ("aws", True, notices.AWS_SPOT_NOTICE_S),
    "aws-asg-terminate": ("aws", True, common.ASG_HOOK_S),
    "aws-rebalance": ("aws", False, None),
    "gcp-preempted": ("gcp", True, notices.GCP_PREEMPT_S),
    "gcp-maintenance-terminate": ("gcp", True, notices.GCP_GPU_MAINTENANCE_S),
    "azure-Preempt": ("azure", True, notices.AZURE_MIN_NOTICE_S["Preempt"]),
    "azure-Terminate": ("azure", True, None),  # the stack's notBeforeTimeout (5-15 min): the scenario sets it
    "azure-Redeploy": ("azure", True, notices.AZURE_MIN_NOTICE_S["Redeploy"]),
    "azure-Reboot": ("azure", True, notices.AZURE_MIN_NOTICE_S["Reboot"]),
}


def post_notice(md: ScriptedMetadata, kind: str, now: float, deadline_s: float | None) -> None:
    """Put the notice into the node's metadata service as its cloud serves it."""
    if kind == "aws-spot-terminate":
        md.values["spot/instance-action"] = json.dumps({"action": "terminate", "time": iso(now + deadline_s)})
    elif kind == "aws-asg-terminate":
        md.values["autoscaling/target-lifecycle-state"] = "Terminated"
    elif kind == "aws-rebalance":
        md.values["events/recommendations/rebalance"] = json.dumps({"noticeTime": iso(now)})
    elif kind == "gcp-preempted":
        md.values["instance/preempted"] = "TRUE"
    elif kind == "gcp-maintenance-terminate":
        md.values["instance/maintenance-event"] = "TERMINATE_ON_HOST_MAINTENANCE"
    elif kind.startswith("azure-"):
        et = kind.split("-", 1)[1]
        md.events.append({"EventId": f"ev-{et}-{len(md.events)}", "EventType": et, "ResourceType": "VirtualMachine",
                          "Resources": [md.vm], "EventStatus": "Scheduled",
                          "NotBefore": email.utils.formatdate(now + deadline_s, usegmt=True)})  # fmt: skip
    else:
        raise ValueError(kind)


# ------------------------------------------------------------------------------------------ the watcher


def watch_args(cloud: str, bucket: str, ckpt_dir: str, run_dir: str, interval_minutes: float, keep_last: int):
    """The arguments `trainfleet_agent watch` gets on a node (cli.py defaults for the rest)."""
    return argparse.Namespace(cloud=cloud, bucket=bucket, prefix=PREFIX, ckpt_dir=ckpt_dir, run_dir=run_dir,
                              interval_minutes=interval_minutes, keep_last=keep_last, metadata_url=None,
                              notice_window_s=None, poll_s=1.0, scan_s=0.5, http_timeout_s=2.0)  # fmt: skip


class SimWatcher(watch.Watcher):
    """The real Watcher; its metadata poll thread is a clock task that runs the same loop as NoticeSource.run
    (poll, hand each notice over, wait poll_s), against the node's ScriptedMetadata."""

    def __init__(self, args, clock: Clock, md: ScriptedMetadata, trainer):
        super().__init__(args)
        self.clock = clock
        self.source.md = md
        self.source.gpu = True  # a GPU VM: GCP's 1-hour maintenance notice
        self.trainer = trainer

    def _start_source(self):
        return self.clock.spawn(self._poll, "notices")

    def _poll(self) -> None:
        while not self.stop.is_set():
            try:
                for n in self.source.poll():
                    self.on_notice(n)
            except Exception as e:  # noqa: BLE001 - as NoticeSource.run: a poll never kills the watcher
                common.log("metadata_error", error=str(e)[:200])
            # A node no scenario notifies has nothing to read: polling it every second only costs this machine CPU.
            self.clock.sleep(self.source.poll_s if self.source.md.expects_notices else 60.0)


class TrainerHandle:
    """What the Watcher's Trainer does (pid, alive, request, done_step), against the simulated job."""

    def __init__(self, fleet, rank: int):
        self.fleet, self.rank = fleet, rank

    def _job(self):
        return self.fleet.job

    def pid(self) -> int | None:
        job = self._job()
        return None if job is None or self.rank >= job.nodes else 1000 + self.rank  # the pid file stays

    def alive(self) -> bool:
        job = self._job()
        return job is not None and job.running and self.rank < job.nodes

    def request(self, exit_after: bool) -> None:
        job = self._job()
        if job is None or not self.alive():
            common.log("trainer_gone", pid=self.pid())
            return
        job.request(self.rank, exit_after)
        common.log("trainer_signalled", pid=self.pid(), signal="SIGTERM" if exit_after else "SIGUSR1")

    def done_step(self) -> int | None:
        job = self._job()
        return job.done if job is not None and self.rank < job.nodes else None

