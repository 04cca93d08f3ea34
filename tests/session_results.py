"""Results computed once per test session and shared by every pytest-xdist worker.

Session-scoped fixtures run once per worker; some results are expensive (a DeepSpeed reference run, a pyright
run over the provider SDKs) and identical wherever they are computed, so the first worker that asks computes
and the others read its JSON.
"""

from __future__ import annotations

import fcntl
import json
import os


def once_per_session(tmp_path_factory, name: str, compute) -> dict:
    """`compute(folder)`'s JSON-able result, computed once per test session by whichever worker asks first (in
    `folder`, a fresh path under the session's temp root); the others wait on a lock and read it."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: <session>/popen-gwN
    result = root / f"{name}.json"
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if result.is_file():
            return json.loads(result.read_text())
        value = compute(root / name)
        result.with_suffix(".tmp").write_text(json.dumps(value))
        result.with_suffix(".tmp").replace(result)
        return value
