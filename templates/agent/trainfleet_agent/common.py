"""Constants, step names and the JSON-lines log every module writes."""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time

STEP_RE = re.compile(r"^step-(\d{8})$")
NOTICE_WINDOW_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
# An Auto Scaling group's own terminations (scale-in, rebalancing, health) come with no spot notice; the fleet's
# termination lifecycle hook (infra/aws/fleet.py, same name and timeout) holds the instance in Terminating:Wait
# this long, and IMDS says so at autoscaling/target-lifecycle-state. The agent completes the action when done.
ASG_HOOK_NAME = "trainfleet-checkpoint"
ASG_HOOK_S = float(os.environ.get("TRAINFLEET_ASG_HOOK_SECONDS", "600"))
DEFAULT_METADATA = {
    "aws": "http://169.254.169.254",
    "gcp": "http://metadata.google.internal",
    "azure": "http://169.254.169.254",
}
CHUNK = 1 << 20


def step_name(step: int) -> str:
    return f"step-{step:08d}"




_log_lock = threading.Lock()


def log(event: str, **fields) -> None:
    """One JSON line per event on stderr."""
    rec = {"ts": round(time.time(), 3), "event": event, **fields}
    line = json.dumps(rec, default=str, separators=(",", ":"))
    with _log_lock:
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never kill the agent
            pass


