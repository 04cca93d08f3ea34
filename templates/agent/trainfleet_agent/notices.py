"""Spot and maintenance notices from each cloud's metadata service, each with its real deadline.

A notice is hard (the VM will go: it has a deadline) or soft (checkpoint and keep going). The deadline of each
hard notice is the cloud's own, per event type:

AWS
- ``spot/instance-action``: the Spot interruption notice, two minutes before the action; its ``time`` field is
  when the action happens (the deadline). The notice stays until then.
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html
- ``events/recommendations/rebalance``: a rebalance recommendation, a soft signal that can come well before an
  interruption notice, with no deadline.
  https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/rebalance-recommendations.html
- ``autoscaling/target-lifecycle-state`` = ``Terminated``: the group's own termination (scale-in, rebalancing,
  health), held in Terminating:Wait by the fleet's termination lifecycle hook until its heartbeat timeout
  (ASG_HOOK_S, the same figure as infra/aws/fleet.py), then it goes on.
  https://docs.aws.amazon.com/autoscaling/ec2/userguide/retrieving-target-lifecycle-state-through-imds.html
  https://docs.aws.amazon.com/autoscaling/ec2/userguide/lifecycle-hooks-overview.html

GCP
- ``instance/preempted`` = ``TRUE``: a Spot (preemptible) VM is stopped 30 s after the preemption notice.
  https://cloud.google.com/compute/docs/instances/spot#preemption-process
- ``instance/maintenance-event`` = ``TERMINATE_ON_HOST_MAINTENANCE``: "Compute Engine gives GPU VMs a 1-hour
  stopping notice, while normal VMs receive only a 60-second notice."
  https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance
  ``MIGRATE_ON_HOST_MAINTENANCE`` is a live migration (soft):
  https://cloud.google.com/compute/docs/metadata/getting-live-migration-notice
- ``instance/upcoming-maintenance?alt=json``: the scheduled maintenance window (``window_start_time``,
  ``maintenance_status`` PENDING or ONGOING; ``{ }`` when none). Its start, when it is sooner than the
  maintenance-event's own notice, is the deadline of that notice; on its own it is only logged (the
  maintenance-event notice still comes before the VM stops).
  https://cloud.google.com/compute/docs/instances/monitor-plan-host-maintenance-event
  https://docs.cloud.google.com/ai-hypercomputer/docs/manage/host-events

Azure Scheduled Events (https://learn.microsoft.com/en-us/azure/virtual-machines/linux/scheduled-events)
- Minimum notice per EventType: Preempt 30 s, Terminate 5 to 15 minutes (the scale set's terminate
  notification), Reboot 15 minutes, Redeploy 10 minutes, Freeze 15 minutes (a pause of seconds: soft here).
  ``NotBefore`` is the deadline ("the event is guaranteed to not start before this time"); it is blank once the
  event has Started (the deadline is now).
- An event canceled before it starts "is removed from the Events array": its notice is dropped.
- Approving an event (POST StartRequests) "allows the event to proceed for all Resources in the event", so the
  agent approves only when every VM the event names has said it is safe (`release_azure_events`).
- "You should expect a delayed response in your first call of up to two minutes": the first call gets
  AZURE_FIRST_CALL_S.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
import os
import random
import re
import threading
import time

from .common import ASG_HOOK_S, log
from .metadata import AwsMetadata, AzureMetadata, GcpMetadata

AWS_SPOT_NOTICE_S = 120.0  # when the instance-action has no readable `time`
GCP_PREEMPT_S = 30.0
GCP_GPU_MAINTENANCE_S = 3600.0
GCP_MAINTENANCE_S = 60.0
# Minimum notice per Scheduled Events type, used when NotBefore cannot be read (Terminate: its shortest setting).
AZURE_MIN_NOTICE_S = {"Preempt": 30.0, "Terminate": 300.0, "Reboot": 900.0, "Redeploy": 600.0}
AZURE_FIRST_CALL_S = 150.0  # up to two minutes while the service is enabled, plus a margin


def _now() -> float:
    return time.time()


class Notice:
    """One notice. `key` names what it is about (one spot notice, one Azure event), so a notice seen again is
    the same notice; `resources` are the VMs an Azure event names."""

    def __init__(
        self,
        kind: str,
        hard: bool,
        detail,
        deadline: float,
        event_ids: list[str] | None = None,
        key: str | None = None,
        resources: list[str] | None = None,
        cancelled: bool = False,
    ):
        self.kind = kind
        self.hard = hard
        self.detail = detail
        self.deadline = deadline
        self.event_ids = event_ids or []
        self.key = key or kind
        self.resources = resources or []
        self.cancelled = cancelled
        self.at = _now()


class NoticeBoard:
    """The hard notices in force. The earliest deadline rules: a later notice never postpones an earlier one,
    and the same notice seen again only ever moves its deadline earlier. A canceled Azure event is dropped,
    unless the trainer was already asked to checkpoint and exit."""

    def __init__(self, window_s: float):
        self.window_s = window_s
        self._lock = threading.Lock()
        self._hard: dict[str, Notice] = {}
        self.exiting = False

    def add(self, n: Notice) -> str:
        """'new', 'earlier' (a known notice, now with a sooner deadline), 'cancelled', or 'same'."""
        with self._lock:
            old = self._hard.get(n.key)
            if n.cancelled:
                if old is None or self.exiting:
                    return "same"
                del self._hard[n.key]
                return "cancelled"
            if old is not None and old.deadline <= n.deadline:
                return "same"
            if old is not None:
                n.at = old.at
            self._hard[n.key] = n
            return "earlier" if old is not None else "new"

    def extend(self, key: str, deadline: float) -> bool:
        """A notice whose deadline its cloud moved later on request (a lifecycle hook's heartbeat): the only way a
        deadline on the board moves later. True when it did."""
        with self._lock:
            n = self._hard.get(key)
            if n is None or deadline <= n.deadline:
                return False
            n.deadline = deadline
            return True

    def start_exit(self) -> bool:
        """True the first time only: the one moment the trainer is asked to checkpoint and exit."""
        with self._lock:
            first, self.exiting = not self.exiting, True
            return first

    def notices(self) -> list[Notice]:
        with self._lock:
            return sorted(self._hard.values(), key=lambda n: n.deadline)

    def earliest(self) -> Notice | None:
        ns = self.notices()
        return ns[0] if ns else None

    def deadline(self) -> float | None:
        n = self.earliest()
        return n.deadline if n else None

    def due(self) -> Notice | None:
        """The earliest notice once only the notice window (what the save and upload need) is left."""
        n = self.earliest()
        if n is not None and (self.exiting or n.deadline - _now() <= self.window_s):
            return n
        return None


def gpu_attached() -> bool:
    """A GPU VM gets GCP's 1-hour maintenance notice. The node's env file names its accelerator; else the
    NVIDIA device nodes tell."""
    if os.environ.get("TRAINFLEET_ACCELERATOR", "").strip():
        return True
    try:
        return any(re.fullmatch(r"nvidia\d+", d) for d in os.listdir("/dev"))
    except OSError:
        return False


def _utc(text) -> float | None:
    """An RFC 3339 time (AWS `time`, GCP `window_start_time`) as a timestamp, or None."""
    try:
        return _dt.datetime.fromisoformat(str(text).strip().replace("Z", "+00:00")).timestamp()
    except (TypeError, ValueError):
        return None


def _http_date(text) -> float | None:
    """An RFC 1123 date (Azure NotBefore, "Mon, 19 Sep 2016 18:29:47 GMT") as a timestamp, or None."""
    try:
        return email.utils.parsedate_to_datetime(str(text or "")).timestamp() if text else None
    except (TypeError, ValueError):
        return None


def upcoming_window_start(text: str | None) -> tuple[float | None, dict | None]:
    """(window start, the document) of GCP's instance/upcoming-maintenance answer; (None, None) when it says
    nothing is scheduled (``{ }``, ``NONE``, an ``error`` object). Read tolerantly: the doc shows the fields
    in snake_case (metadata server) and camelCase (API), sometimes under one wrapping key."""
    try:
        doc = json.loads(text or "")
    except ValueError:
        return None, None
    if isinstance(doc, dict) and len(doc) == 1 and isinstance(next(iter(doc.values())), dict):
        doc = next(iter(doc.values()))
    if not isinstance(doc, dict) or not doc or "error" in doc:
        return None, None
    status = str(doc.get("maintenance_status") or doc.get("maintenanceStatus") or "").upper()
    if status == "COMPLETE":
        return None, None
    for field in ("window_start_time", "windowStartTime", "start_time", "startTime"):
        start = _utc(doc.get(field)) if doc.get(field) else None
        if start is not None:
            return start, doc
    return None, doc


class NoticeSource:
    """Polls a cloud's metadata service in its own thread; every poll is wrapped, with backoff. It keeps polling
    after a hard notice: a sooner notice may follow, and an Azure event may be canceled."""

    def __init__(self, cloud: str, base: str, window_s: float, poll_s: float, timeout_s: float):
        self.cloud = cloud
        self.base = base
        self.window_s = window_s
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.failures = 0
        # the metadata service is local: back off, but never so far that a notice is caught late
        self.max_backoff_s = max(2.0, poll_s)
        self.seen_soft: set[str] = set()
        self._reported: dict[str, float] = {}  # hard notice key -> the deadline it was reported with
        self._etag = None
        self.vm_name: str | None = None
        self._azure_ready = False  # the first Scheduled Events call has been answered
        self._azure_open: set[str] = set()  # hard Azure events reported and still in the document
        self._upcoming_supported = True
        self._upcoming_logged: float | None = None
        self.gpu = gpu_attached() if cloud == "gcp" else False
        if cloud == "aws":
            self.md = AwsMetadata(base, timeout_s)
        elif cloud == "gcp":
            self.md = GcpMetadata(base, timeout_s)
        else:
            self.md = AzureMetadata(base, timeout_s)

    def run(self, on_notice, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                notices = self.poll()
                if self.failures:
                    log("metadata_recovered", after_failures=self.failures)
                self.failures = 0
                for n in notices:
                    on_notice(n)
                wait = self.poll_s
            except Exception as e:  # noqa: BLE001 - a poll never kills the watcher
                self.failures += 1
                wait = min(self.poll_s * 2 ** min(self.failures, 6), self.max_backoff_s) * (
                    0.5 + random.random() / 2
                )
                log(
                    "metadata_error",
                    cloud=self.cloud,
                    failures=self.failures,
                    error=f"{type(e).__name__}: {e}"[:300],
                )
            stop.wait(wait)

    def poll(self) -> list[Notice]:
        """New notices only: a hard notice again only when its deadline came sooner."""
        out = []
        for n in getattr(self, "_poll_" + self.cloud)():
            if n.hard and not n.cancelled:
                last = self._reported.get(n.key)
                if last is not None and n.deadline >= last - 1.0:
                    continue
                self._reported[n.key] = n.deadline
            elif n.cancelled:
                self._reported.pop(n.key, None)
            out.append(n)
        return out

    @staticmethod
    def _deadline(at: float | None, default_s: float) -> float:
        """The cloud's own time when it gave one (a time already past means now), else now + its notice."""
        now = _now()
        if at is None:
            return now + default_s
        return max(at, now)

    def _poll_aws(self) -> list[Notice]:
        out = []
        action = self.md.get("spot/instance-action")
        if action:
            doc = json.loads(action)
            hard = doc.get("action") in ("terminate", "stop", "hibernate")
            deadline = self._deadline(_utc(doc.get("time")), AWS_SPOT_NOTICE_S)
            out.append(Notice("aws-spot-" + str(doc.get("action")), hard, doc, deadline, key="aws-spot"))
        target = (self.md.get("autoscaling/target-lifecycle-state") or "").strip()
        if target == "Terminated":
            out.append(Notice("aws-asg-terminate", True, target, _now() + ASG_HOOK_S, key="aws-asg"))
        reb = self.md.get("events/recommendations/rebalance")
        if reb and reb not in self.seen_soft:
            self.seen_soft.add(reb)
            out.append(Notice("aws-rebalance", False, json.loads(reb), _now()))
        return out

    def _poll_gcp(self) -> list[Notice]:
        params = {"wait_for_change": "true", "timeout_sec": str(int(max(1, self.poll_s * 10)))}
        if self._etag:
            params["last_etag"] = self._etag
        val, etag = self.md.get(
            "instance/preempted", params, timeout=float(params["timeout_sec"]) + self.timeout_s
        )
        self._etag = etag or None
        out = []
        if (val or "").strip().upper() == "TRUE":
            out.append(
                Notice("gcp-preempted", True, val.strip(), _now() + GCP_PREEMPT_S, key="gcp-preempted")
            )
        me, _ = self.md.get("instance/maintenance-event")
        me = (me or "NONE").strip()
        window_start = self._upcoming_maintenance()
        if me.startswith("TERMINATE"):
            deadline = _now() + (GCP_GPU_MAINTENANCE_S if self.gpu else GCP_MAINTENANCE_S)
            if window_start is not None and _now() < window_start < deadline:
                deadline = window_start
            out.append(Notice("gcp-maintenance-terminate", True, me, deadline, key="gcp-maintenance"))
        elif me != "NONE" and me not in self.seen_soft:
            self.seen_soft.add(me)
            out.append(Notice("gcp-maintenance", False, me, _now()))
        elif me == "NONE":
            self.seen_soft.clear()
        return out

    def _upcoming_maintenance(self) -> float | None:
        """The scheduled maintenance window's start, if the metadata server has one; never fails the poll."""
        if not self._upcoming_supported:
            return None
        try:
            text, _ = self.md.get("instance/upcoming-maintenance", {"alt": "json"})
        except Exception:  # noqa: BLE001 - optional: the preempted/maintenance-event answers matter more
            return None
        if text is None:  # 404: not offered for this machine type
            self._upcoming_supported = False
            return None
        start, doc = upcoming_window_start(text)
        if start is not None and start != self._upcoming_logged:
            self._upcoming_logged = start
            log("gcp_upcoming_maintenance", window_start_in_s=round(start - _now(), 1), detail=doc)
        return start

    def _poll_azure(self) -> list[Notice]:
        if self.vm_name is None:
            try:
                inst = self.md.get_json("/metadata/instance?api-version=2021-02-01")
                self.vm_name = inst.get("compute", {}).get("name", "") or ""
            except Exception as e:  # noqa: BLE001
                log("azure_instance_lookup_failed", error=str(e)[:200])
        # The first call enables Scheduled Events and may take up to two minutes: wait for it (here, in the
        # poll thread) rather than time out every 2 s and never get an answer.
        first = not self._azure_ready
        doc = self.md.get_json(AzureMetadata.EVENTS, timeout=AZURE_FIRST_CALL_S if first else None)
        self._azure_ready = True
        if first:
            log("azure_scheduled_events_ready")
        out, open_now = [], set()
        for ev in doc.get("Events", []):
            res = ev.get("Resources") or []
            if self.vm_name and res and self.vm_name not in res:
                continue
            et, eid = ev.get("EventType"), ev.get("EventId")
            if et in AZURE_MIN_NOTICE_S:
                open_now.add(eid)
                at = _http_date(ev.get("NotBefore"))
                if at is None and ev.get("EventStatus") == "Started":
                    at = _now()
                deadline = self._deadline(at, AZURE_MIN_NOTICE_S[et])
                out.append(Notice("azure-" + et, True, ev, deadline, [eid], "azure:" + str(eid), res))
            elif eid not in self.seen_soft:
                self.seen_soft.add(eid)
                out.append(Notice("azure-" + str(et or "event"), False, ev, _now()))
        for eid in sorted(self._azure_open - open_now):  # canceled: it left the document before it started
            out.append(Notice("azure-canceled", True, eid, _now(), [eid], "azure:" + eid, cancelled=True))
        self._azure_open = open_now
        return out


def _marker_prefix(prefix: str, event_id: str) -> str:
    return "/".join(p for p in (prefix.strip("/"), "_events", event_id) if p) + "/"


def release_azure_events(store, prefix: str, source: NoticeSource, notices: list[Notice]) -> None:
    """This VM's checkpoint is durable: say so in the bucket (<prefix>/_events/<EventId>/<vm name>), then approve
    each event once every VM it names has said so. Approving releases the event for all its Resources, so an
    event with a VM not yet safe is not approved: it starts at NotBefore. The last VM to get safe approves it
    (several may: the service answers 200 to every approval of a valid event)."""
    vm = source.vm_name
    if not vm:
        log("azure_event_not_acknowledged", event_ids=[e for n in notices for e in n.event_ids],
            reason="this VM's name is unknown")  # fmt: skip
        return
    waiting: dict[str, tuple[set[str], float]] = {}
    for n in notices:
        for eid in n.event_ids:
            try:
                store.put_bytes(
                    _marker_prefix(prefix, eid) + vm, json.dumps({"vm": vm, "at": _now()}).encode()
                )
                log("azure_event_marker", event_id=eid, vm=vm)
                waiting[eid] = (set(n.resources) or {vm}, n.deadline)
            except Exception as e:  # noqa: BLE001
                log("azure_event_not_acknowledged", event_ids=[eid], reason=f"marker: {e}"[:200])
    missing_logged: dict[str, list[str]] = {}
    while waiting:
        for eid, (names, until) in list(waiting.items()):
            try:
                have = {k.rsplit("/", 1)[-1] for k in store.list(_marker_prefix(prefix, eid))}
            except Exception as e:  # noqa: BLE001
                log("azure_marker_list_failed", event_id=eid, error=str(e)[:200])
                have = set()
            missing = sorted(names - have)
            if not missing:
                try:
                    source.md.ack([eid])
                    log("azure_event_acknowledged", event_ids=[eid], resources=sorted(names))
                except Exception as e:  # noqa: BLE001
                    log("azure_ack_failed", event_id=eid, error=str(e)[:200])
                del waiting[eid]
            elif _now() >= until:
                log("azure_event_not_acknowledged", event_ids=[eid], missing=missing,
                    reason="not every VM it names is safe; it starts at NotBefore")  # fmt: skip
                del waiting[eid]
            elif missing_logged.get(eid) != missing:
                missing_logged[eid] = missing
                log(
                    "azure_event_waiting",
                    event_id=eid,
                    missing=missing,
                    not_before_in_s=round(until - _now(), 1),
                )
        if waiting:
            time.sleep(0.3)


# A handled termination is written down in the run dir: systemd restarts the agent (Restart=always) while the
# notice is still being served, and the restarted agent must not ask a trainer that is gone (or a process that
# took its pid) again. A notice counts as handled until its deadline plus this grace.
HANDLED_FILE = "notice-handled.json"
HANDLED_GRACE_S = 600.0


def read_handled(run_dir: str) -> dict[str, float]:
    """{notice key: its deadline} of the terminations this node already handled, still current."""
    try:
        with open(os.path.join(run_dir, HANDLED_FILE)) as f:
            doc = json.load(f)
        return {str(k): float(v) for k, v in doc.items() if float(v) + HANDLED_GRACE_S > _now()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def write_handled(run_dir: str, notices: list[Notice]) -> None:
    try:
        os.makedirs(run_dir, exist_ok=True)
        path = os.path.join(run_dir, HANDLED_FILE)
        with open(path + ".tmp", "w") as f:
            # a SIGTERM is this boot's shutdown, never one a later start is still being served
            json.dump({n.key: n.deadline for n in notices if n.kind != "sigterm"}, f)
        os.replace(path + ".tmp", path)
    except OSError as e:
        log("notice_handled_write_failed", error=str(e)[:200])
