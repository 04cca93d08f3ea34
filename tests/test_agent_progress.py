"""The trainer's figures as `progress` run events (templates/agent/trainfleet_agent/progress.py), written through the
agent's S3 store to moto and read back with the same parser `trainfleet events` uses."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.agent_support import load_agent_module

progress = load_agent_module("progress")
stores = load_agent_module("stores")
events = load_agent_module("events")


@pytest.fixture
def store(moto, monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": moto.url}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    bucket = "progress-" + uuid.uuid4().hex[:10]
    moto.client("s3").create_bucket(Bucket=bucket)
    return stores.S3Store(bucket)


def recorded(store, prefix: str) -> list[dict]:
    keys = sorted(store.list(events.events_prefix(prefix)))
    return [events.parse_event(k, store.get_bytes(k)) for k in keys]


def write(run_dir, **figures) -> None:
    (run_dir / "progress.json").write_text(json.dumps(figures))


def settle(reporter) -> None:
    if reporter._thread is not None:
        reporter._thread.join(30)


def test_progress_is_recorded_beside_the_plan_once_per_interval_while_the_step_advances(store, tmp_path, monkeypatch):
    # The plan: 1T tokens in 1,000 h is 277,777.8 tokens/s.
    monkeypatch.setenv("TRAINFLEET_PLANNED_TOKENS_PER_S", f"{1e12 / (1000 * 3600):.1f}")
    reporter = progress.ProgressReporter(store, "job/fleet", str(tmp_path), every_s=600)
    reporter.tick(now=0)  # no figures yet (the trainer has not finished a step)
    write(tmp_path, step=10, loss=3.5, tokens_per_s=250000.0, mfu=0.41, step_s=16.8, time=1.0)
    reporter.tick(now=1)
    settle(reporter)
    write(tmp_path, step=11, loss=3.4, tokens_per_s=251000.0, mfu=0.41, step_s=16.7, time=2.0)
    reporter.tick(now=300)  # within the interval: not yet
    settle(reporter)
    reporter.tick(now=700)
    settle(reporter)
    reporter.tick(now=1400)  # the step did not advance: nothing new to say
    settle(reporter)
    got = recorded(store, "job/fleet")
    assert [e["event"] for e in got] == ["progress", "progress"]
    assert [e["step"] for e in got] == [10, 11]
    first = got[0]
    assert first["tokens_per_s"] == 250000.0 and first["mfu"] == 0.41 and first["loss"] == 3.5
    assert first["planned_tokens_per_s"] == 277777.8
    assert first["of_plan"] == round(250000.0 / 277777.8, 3) == 0.9


def test_without_a_plan_the_figures_are_recorded_alone(store, tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINFLEET_PLANNED_TOKENS_PER_S", "0.0")
    reporter = progress.ProgressReporter(store, "p", str(tmp_path), every_s=600)
    write(tmp_path, step=3, loss=5.0, tokens_per_s=100.0, step_s=0.5, time=1.0)
    reporter.tick(now=0)
    settle(reporter)
    (only,) = recorded(store, "p")
    assert "planned_tokens_per_s" not in only and "of_plan" not in only and only["tokens_per_s"] == 100.0


def test_a_half_written_or_foreign_file_is_skipped(store, tmp_path):
    reporter = progress.ProgressReporter(store, "p", str(tmp_path), every_s=600)
    (tmp_path / "progress.json").write_text('{"step": 4, "loss"')
    reporter.tick(now=0)
    (tmp_path / "progress.json").write_text('{"step": "four"}')
    reporter.tick(now=1)
    settle(reporter)
    assert recorded(store, "p") == []
