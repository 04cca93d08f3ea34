"""Spot and maintenance notices from each cloud's metadata service."""

from __future__ import annotations

import datetime as _dt
import email.utils
import json
import random
import threading
import time

from .common import ASG_HOOK_S, log
from .metadata import AwsMetadata, AzureMetadata, GcpMetadata


class Notice:
    def __init__(self, kind: str, hard: bool, detail, deadline: float, event_ids: list[str] | None = None):
        self.kind = kind
        self.hard = hard
        self.detail = detail
        self.deadline = deadline
        self.event_ids = event_ids or []
        self.at = time.time()


class NoticeSource:
    """Polls a cloud's metadata service in its own thread; every poll is wrapped, with backoff."""

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
        self._etag = None
        self._vm_name: str | None = None
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
                    if n.hard:
                        return
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
        return getattr(self, "_poll_" + self.cloud)()

    def _deadline(self, hint: float | None = None) -> float:
        d = time.time() + self.window_s
        return min(d, hint) if hint and hint > time.time() else d

    def _poll_aws(self) -> list[Notice]:
        out = []
        action = self.md.get("spot/instance-action")
        if action:
            doc = json.loads(action)
            hint = None
            try:
                hint = _dt.datetime.fromisoformat(doc["time"].replace("Z", "+00:00")).timestamp()
            except Exception:  # noqa: BLE001
                pass
            hard = doc.get("action") in ("terminate", "stop", "hibernate")
            out.append(Notice("aws-spot-" + str(doc.get("action")), hard, doc, self._deadline(hint)))
            return out
        # https://docs.aws.amazon.com/autoscaling/ec2/userguide/retrieving-target-lifecycle-state-through-imds.html
        target = (self.md.get("autoscaling/target-lifecycle-state") or "").strip()
        if target == "Terminated":
            return [Notice("aws-asg-terminate", True, target, time.time() + ASG_HOOK_S)]
        reb = self.md.get("events/recommendations/rebalance")
        if reb and reb not in self.seen_soft:
            self.seen_soft.add(reb)
            out.append(Notice("aws-rebalance", False, json.loads(reb), self._deadline()))
        return out

    def _poll_gcp(self) -> list[Notice]:
        params = {"wait_for_change": "true", "timeout_sec": str(int(max(1, self.poll_s * 10)))}
        if self._etag:
            params["last_etag"] = self._etag
        val, etag = self.md.get(
            "instance/preempted", params, timeout=float(params["timeout_sec"]) + self.timeout_s
        )
        self._etag = etag or None
        if (val or "").strip().upper() == "TRUE":
            return [Notice("gcp-preempted", True, val.strip(), self._deadline())]
        me, _ = self.md.get("instance/maintenance-event")
        me = (me or "NONE").strip()
        if me.startswith("TERMINATE"):
            return [Notice("gcp-maintenance-terminate", True, me, self._deadline())]
        if me != "NONE" and me not in self.seen_soft:
            self.seen_soft.add(me)
            return [Notice("gcp-maintenance", False, me, self._deadline())]
        if me == "NONE":
            self.seen_soft.clear()
        return []

    def _poll_azure(self) -> list[Notice]:
        if self._vm_name is None:
            try:
                inst = self.md.get_json("/metadata/instance?api-version=2021-02-01")
                self._vm_name = inst.get("compute", {}).get("name", "") or ""
            except Exception as e:  # noqa: BLE001
                log("azure_instance_lookup_failed", error=str(e)[:200])
        doc = self.md.get_json(AzureMetadata.EVENTS)
        hard_ids, soft, hint = [], [], None
        for ev in doc.get("Events", []):
            res = ev.get("Resources") or []
            if self._vm_name and res and self._vm_name not in res:
                continue
            et = ev.get("EventType")
            if et in ("Preempt", "Terminate", "Reboot", "Redeploy"):
                hard_ids.append(ev["EventId"])
                try:
                    nb = email.utils.parsedate_to_datetime(ev.get("NotBefore") or "").timestamp()
                    hint = nb if hint is None else min(hint, nb)
                except Exception:  # noqa: BLE001
                    pass
            elif ev.get("EventId") not in self.seen_soft:
                self.seen_soft.add(ev.get("EventId"))
                soft.append(ev)
        if hard_ids:
            return [
                Notice(
                    "azure-"
                    + "-".join(sorted({e["EventType"] for e in doc["Events"] if e["EventId"] in hard_ids})),
                    True,
                    doc,
                    self._deadline(hint),
                    hard_ids,
                )
            ]
        return [Notice("azure-" + ev.get("EventType", "event"), False, ev, self._deadline()) for ev in soft]


