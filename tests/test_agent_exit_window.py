"""The watch loop against a slow bucket and a slow save (issue 29 #4): a notice is handled while a large part is
still going up, and a long notice asks for the exit early enough for what this node's checkpoint really takes.

In process: the real Watcher, with the in-memory bucket of tests/test_agent_commit_restore.py made slow, a trainer
stand-in that saves a step some time after each request, and the notices played from a script. Times are seconds
of wall clock, with margins of a second or more either side."""

from __future__ import annotations

import argparse
import threading
import time

import pytest

from tests.agent_support import load_agent_module
from tests.test_agent_commit_restore import PREFIX, BucketStandIn, write_step

watch = load_agent_module("watch")
notices = load_agent_module("notices")


class SlowBucket(BucketStandIn):
    """Every file takes `file_s` to go up (files in parallel, as the real stores send them); LATEST's writes timed."""

    def __init__(self, file_s: float):
        super().__init__()
        self.file_s = file_s
        self.latest_at: list[tuple[float, bytes]] = []
        self.concurrency = 8

    def put_file(self, key, path):
        time.sleep(self.file_s)
        return super().put_file(key, path)

    def put_bytes(self, key, data):
        if key.endswith("/LATEST"):
            self.latest_at.append((time.time(), bytes(data)))
        super().put_bytes(key, data)


class SavingTrainer:
    """Saves the next step `save_s` after each request (COMPLETE last); an exit request saves and is gone."""

    def __init__(self, ckpt, save_s: float, first_step: int = 0):
        self.ckpt, self.save_s, self.step = ckpt, save_s, first_step
        self.requests: list[tuple[float, bool]] = []
        self.gone = False

    def pid(self):
        return None

    def alive(self):
        return not self.gone

    def done_step(self):
        return None

    def request(self, exit_after: bool) -> None:
        self.requests.append((time.time(), exit_after))
        threading.Timer(self.save_s, self._save, (exit_after,)).start()

    def _save(self, exit_after: bool) -> None:
        if self.gone:
            return
        self.step += 1
        write_step(self.ckpt, self.step)
        self.gone = exit_after


class ScriptedNotices:
    """The metadata poller's stand-in: each (seconds after the start, notice maker) delivered on time."""

    def __init__(self, script):
        self.script = script

    def run(self, on_notice, stop: threading.Event) -> None:
        t0 = time.time()
        for after, make in self.script:
            if stop.wait(max(0.0, t0 + after - time.time())):
                return
            on_notice(make())
        stop.wait()


def watcher(tmp_path, monkeypatch, bucket, trainer_save_s: float, window_s: float, script):
    monkeypatch.setattr(watch, "make_store", lambda *a: bucket)
    args = argparse.Namespace(cloud="aws", bucket="b", prefix=PREFIX, metadata_url="http://127.0.0.1:9",
                              ckpt_dir=str(tmp_path / "ckpt"), run_dir=str(tmp_path / "run"), interval_minutes=0.0,
                              keep_last=0, notice_window_s=window_s, poll_s=0.2, scan_s=0.05, http_timeout_s=1.0)  # fmt: skip
    (tmp_path / "ckpt").mkdir()
    w = watch.Watcher(args)
    w.source = ScriptedNotices(script)
    w.trainer = SavingTrainer(tmp_path / "ckpt", trainer_save_s)
    return w


def run_in_thread(w):
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("code", w.run()), daemon=True)
    t.start()
    return t, result


def hard(deadline_in_s: float):
    return lambda: notices.Notice("aws-spot-terminate", True, {}, time.time() + deadline_in_s, key="aws-spot")


def test_a_notice_is_handled_while_a_large_part_is_still_uploading(tmp_path, monkeypatch):
    """The periodic upload of step 1 takes 4 s (a 150 GB part at 1 GB/s, scaled). A notice 0.5 s in with 3 s to its
    deadline and a 1 s window must ask for the exit once only the window is left (~2.5 s in), not after the upload:
    the old loop uploaded on the main thread and saw the notice only when the upload was done, past the deadline."""
    bucket = SlowBucket(file_s=4.0)
    w = watcher(tmp_path, monkeypatch, bucket, trainer_save_s=0.2, window_s=1.0, script=[(0.5, hard(3.0))])
    write_step(tmp_path / "ckpt", 1)
    w.trainer.step = 1
    t0 = time.time()
    t, result = run_in_thread(w)
    t.join(60)
    exits = [at - t0 for at, exit_after in w.trainer.requests if exit_after]
    assert exits and exits[0] < 3.6, f"exit asked {exits} s in: the upload held the notice up"
    assert result["code"] == 0
    assert bucket.latest_at[-1][1] == f"step-{w.trainer.step:08d}".encode(), "the exit's checkpoint made durable"


def test_a_long_notice_asks_for_the_exit_as_early_as_the_save_and_upload_need(tmp_path, monkeypatch):
    """This node's save takes 1.5 s and its part 1.5 s to go up (measured on a rebalance recommendation's
    checkpoint), the configured window is 0.5 s. A hard notice with 8 s to go: the exit must be asked with at
    least the 3 s those take left, and the notice's checkpoint be durable before the deadline. With the fixed 0.5 s
    window the exit came 0.5 s before the deadline and the checkpoint 2.5 s after it."""
    bucket = SlowBucket(file_s=1.5)
    soft = lambda: notices.Notice("aws-rebalance", False, {}, time.time())  # noqa: E731
    deadline = {}

    def long_notice():
        deadline["at"] = time.time() + 8.0
        return notices.Notice("aws-spot-terminate", True, {}, deadline["at"], key="aws-spot")

    w = watcher(tmp_path, monkeypatch, bucket, trainer_save_s=1.5, window_s=0.5, script=[(0.1, soft), (4.5, long_notice)])
    t, result = run_in_thread(w)
    t.join(60)
    assert result["code"] == 0
    assert w.window >= 3.0, f"the window grew only to {w.window} s"
    (exit_at,) = [at for at, exit_after in w.trainer.requests if exit_after]
    assert exit_at <= deadline["at"] - 3.0, f"exit asked {deadline['at'] - exit_at:.1f} s before the deadline"
    durable_at, latest = bucket.latest_at[-1]
    assert latest == f"step-{w.trainer.step:08d}".encode(), "the exit's checkpoint is the durable one"
    assert durable_at <= deadline["at"], f"durable {durable_at - deadline['at']:.1f} s after the deadline"


@pytest.mark.parametrize("measured", [False, True])
def test_the_window_never_shrinks_below_the_configured_one(tmp_path, monkeypatch, measured):
    w = watcher(tmp_path, monkeypatch, BucketStandIn(), trainer_save_s=0.0, window_s=120.0, script=[])
    if measured:
        w.save_s, w.upload_s = 1.0, 2.0
        w._resize_window()
    assert w.window == w.board.window_s == 120.0
