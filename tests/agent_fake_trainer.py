"""A tiny stdlib trainer that honours the trainfleet trainer protocol (templates/agent/PROTOCOL.md).

Writes its pid to RUN_DIR/trainer.pid; resumes from the newest CKPT_DIR/step-<N>/COMPLETE; takes one
"step" every --step-s seconds. SIGUSR1 (or RUN_DIR/checkpoint-requested containing "continue") checkpoints
at the next step boundary and goes on; SIGTERM (or the file containing "exit") checkpoints and exits 0.
A checkpoint is written to a temp dir, renamed to step-<N:08d>, then COMPLETE is written last. With
--ckpt-every K it also checkpoints every K steps on its own. At the end it checkpoints and writes
RUN_DIR/DONE with the final step.

The model state is deterministic in the step (state.json) plus a --blob-mb payload (model.bin) whose bytes
depend on the step, so a restored checkpoint can be checked byte for byte.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import time

requested = {"save": False, "exit": False}


def payload(step: int, size: int) -> bytes:
    seed = hashlib.sha256(f"step-{step}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def newest_complete(ckpt_dir: str) -> int | None:
    best = None
    for name in os.listdir(ckpt_dir):
        m = re.fullmatch(r"step-(\d{8})", name)
        if m and os.path.isfile(os.path.join(ckpt_dir, name, "COMPLETE")):
            best = max(best or 0, int(m.group(1)))
    return best


def save(ckpt_dir: str, step: int, blob_bytes: int, slow_s: float) -> None:
    final = os.path.join(ckpt_dir, f"step-{step:08d}")
    if os.path.isfile(os.path.join(final, "COMPLETE")):
        return
    tmp = os.path.join(ckpt_dir, f".tmp-step-{step:08d}-{os.getpid()}")
    os.makedirs(os.path.join(tmp, "shards"), exist_ok=True)
    with open(os.path.join(tmp, "state.json"), "w") as f:
        json.dump({"step": step, "loss": 1.0 / (step + 1)}, f)
    with open(os.path.join(tmp, "shards", "model.bin"), "wb") as f:
        f.write(payload(step, blob_bytes))
    time.sleep(slow_s)
    os.rename(tmp, final)
    open(os.path.join(final, "COMPLETE"), "w").close()
    print(json.dumps({"trainer": "saved", "step": step, "ts": time.time()}), flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt-dir", required=True)
    p.add_argument("--run-dir", required=True)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--blob-mb", type=float, default=1.0)
    p.add_argument("--ckpt-every", type=int, default=0)
    p.add_argument("--save-slow-s", type=float, default=0.0)
    p.add_argument("--no-signals", action="store_true", help="ignore signals; poll the request file only")
    a = p.parse_args()
    os.makedirs(a.ckpt_dir, exist_ok=True)
    os.makedirs(a.run_dir, exist_ok=True)
    blob = int(a.blob_mb * (1 << 20))
    flag = os.path.join(a.run_dir, "checkpoint-requested")

    if a.no_signals:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGUSR1, lambda *_: requested.__setitem__("save", True))

        def on_term(*_):
            requested["save"] = True
            requested["exit"] = True

        signal.signal(signal.SIGTERM, on_term)

    start = newest_complete(a.ckpt_dir) or 0
    with open(os.path.join(a.run_dir, "trainer.pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(a.run_dir, "trainer.pid.tmp"), os.path.join(a.run_dir, "trainer.pid"))
    print(json.dumps({"trainer": "start", "from_step": start}), flush=True)

    step = start
    while step < a.steps:
        time.sleep(a.step_s)  # "compute"
        step += 1
        if os.path.exists(flag):
            with open(flag) as f:
                what = f.read().strip()
            requested["save"] = True
            requested["exit"] = requested["exit"] or what == "exit"
        if requested["save"] or (a.ckpt_every and step % a.ckpt_every == 0):
            save(a.ckpt_dir, step, blob, a.save_slow_s)
            requested["save"] = False
            if os.path.exists(flag):
                os.remove(flag)
            if requested["exit"]:
                print(json.dumps({"trainer": "exit-on-notice", "step": step}), flush=True)
                return 0
    save(a.ckpt_dir, step, blob, a.save_slow_s)
    with open(os.path.join(a.run_dir, "DONE"), "w") as f:
        f.write(str(step))
    print(json.dumps({"trainer": "done", "step": step}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
