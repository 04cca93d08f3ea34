"""The trainer's figures as run events: tokens/s, MFU and loss beside the plan's tokens/s (PROTOCOL.md section 7).

The trainer's rank 0 replaces `<run dir>/progress.json` after every step (templates/train.py `Progress`); the agent
on that node records it as a `progress` event every TRAINFLEET_PROGRESS_EVENT_SECONDS (default 600) while the step
advances, with `planned_tokens_per_s` (the job's tokens over its planned hours, from trainfleet.env) and the
ratio of the two, so `trainfleet events` shows plan against actual. Off the watch loop's thread: a slow bucket
never delays a notice.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time

from .common import log
from .events import record

EVERY_S = float(os.environ.get("TRAINFLEET_PROGRESS_EVENT_SECONDS", "600"))
FIELDS = ("step", "loss", "tokens_per_s", "mfu", "step_s")


def node_name() -> str:
    """This host's name as an event's node (plain characters only)."""
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:64].lstrip(".-")
    return name or "node"


def planned_tokens_per_s() -> float:
    try:
        return float(os.environ.get("TRAINFLEET_PLANNED_TOKENS_PER_S", "0"))
    except ValueError:
        return 0.0


class ProgressReporter:
    def __init__(self, store, prefix: str, run_dir: str, every_s: float = EVERY_S):
        self.store, self.prefix, self.every_s = store, prefix, every_s
        self.path = os.path.join(run_dir, "progress.json")
        self.reported_step: int | None = None
        self.next_at = 0.0
        self._thread: threading.Thread | None = None

    def read(self) -> dict | None:
        try:
            with open(self.path) as f:
                figures = json.load(f)
        except (OSError, ValueError):
            return None  # none yet (not node rank 0, or no step done), or being replaced
        return figures if isinstance(figures, dict) and isinstance(figures.get("step"), int) else None

    def fields(self, figures: dict) -> dict:
        out = {k: figures[k] for k in FIELDS if isinstance(figures.get(k), (int, float))}
        planned = planned_tokens_per_s()
        if planned > 0 and out.get("tokens_per_s"):
            out["planned_tokens_per_s"] = round(planned, 1)
            out["of_plan"] = round(out["tokens_per_s"] / planned, 3)
        return out

    def tick(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        if self.every_s <= 0 or now < self.next_at or (self._thread and self._thread.is_alive()):
            return
        figures = self.read()
        if figures is None or figures["step"] == self.reported_step:
            return
        self.reported_step, self.next_at = figures["step"], now + self.every_s
        self._thread = threading.Thread(target=self._record, args=(self.fields(figures),), daemon=True,
                                        name="progress")  # fmt: skip
        self._thread.start()

    def _record(self, fields: dict) -> None:
        try:
            record(self.store, self.prefix, node_name(), "progress", fields)
        except Exception as e:  # noqa: BLE001 - a missed report never stops the watch
            log("progress_event_failed", error=f"{type(e).__name__}: {e}"[:300])
