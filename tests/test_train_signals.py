"""templates/train.py's stop signals, issue 29: a two-node bf16 run exited 241 once in CI. Node 0's notice stopped
both ranks (train.py agrees on any rank's request); node 1's agent saw its own notice later and sent SIGTERM while
its rank was exiting. CPython puts every Python-level signal handler back to the default as the interpreter
finalizes (Modules/signalmodule.c `_PySignal_Fini`), so that SIGTERM killed the rank (-15, the launcher's 241).
Once the trainer has stopped it ignores the stop signals and the checkpoint request (`Requests.stopped`): an ignored
signal stays ignored through finalization.

The check floods the trainer's process with SIGTERM, as late as signals can come, from before it decides to stop
until it has exited; it must exit 0. Taken out (the same child without `stopped()`), 5 runs of 5 on this machine
ended -15."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.needs import need_module

need_module("torch", "pip install torch==2.13.0")
need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")

TRAIN = Path(__file__).resolve().parents[1] / "templates" / "train.py"
CHILD = r"""
import importlib.util, pathlib, sys, time
sys.path.insert(0, str(pathlib.Path(sys.argv[1]).parent))  # as `python train.py` puts the script's folder first
spec = importlib.util.spec_from_file_location("train", sys.argv[1])
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)
requests = train.Requests(pathlib.Path(sys.argv[2]))
print("ready", flush=True)
time.sleep(0.3)  # the flood starts: the handler takes each signal as a request (SIGTERM: stop, SIGUSR1: checkpoint)
assert requests.stop if sys.argv[4] == "SIGTERM" else requests.checkpoint
if sys.argv[3] == "stopped":
    requests.stopped()
sys.exit(0)
"""


def flooded_exit(run_dir: Path, how: str, sig: signal.Signals = signal.SIGTERM) -> int:
    """The child's exit status while `sig` is sent to it without pause until it is gone."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(TRAIN), str(run_dir), how, sig.name],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    assert child.stdout is not None
    for line in child.stdout:  # DeepSpeed logs to stdout at import
        if line.strip() == b"ready":
            break
    else:
        raise AssertionError(f"the child ended before it was ready: {child.wait()}")
    while child.poll() is None:
        try:
            os.kill(child.pid, sig)
        except ProcessLookupError:
            break
    return child.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1], ids=lambda s: s.name)
def test_a_stopped_trainer_exits_0_however_late_a_signal_comes(tmp_path, sig):
    """SIGUSR1 too (the agent's checkpoint-and-go-on request): a late one ended a two-node bf16 run's rank -10 in CI
    (at 14deef3, the rank had printed "stopping at step 3 after its checkpoint")."""
    assert flooded_exit(tmp_path, "stopped", sig) == 0


if __name__ == "__main__":  # the cause, shown: python -m tests.test_train_signals
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print("without stopped():", [flooded_exit(Path(d), "plain") for _ in range(5)])
        print("with stopped():   ", [flooded_exit(Path(d), "stopped") for _ in range(5)])
