"""Constants, step names and the JSON-lines log every module writes."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
import warnings

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




class _SdkLogHandler(logging.Handler):
    """The SDKs' warnings (their loggers, and Python warnings they raise) as JSON log lines, like every other
    line the agent writes to stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = " ".join(record.getMessage().split())[:500]  # one line
            log("sdk_log", logger=record.name, level=record.levelname, message=message)
        except Exception:  # noqa: BLE001 - logging must never kill the agent
            pass


def route_sdk_logs() -> None:
    """Route the SDKs' warnings into the agent's JSON log, once per process (every SDK user calls this)."""
    root = logging.getLogger()
    if any(isinstance(h, _SdkLogHandler) for h in root.handlers):
        return
    root.addHandler(_SdkLogHandler(logging.WARNING))
    logging.captureWarnings(True)
    # google-api-core warns at each import that it will stop supporting this Python one day: not news per run
    warnings.filterwarnings("ignore", message="You are using a Python version", category=FutureWarning)
