"""Shared test helpers: run the real `trainfleet` command in a subprocess, load example stacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# Fixtures in one place each: the local stand-ins every agent and node test shares (moto, gcp-storage-emulator,
# Azurite) and the uninterrupted DeepSpeed runs the end-to-end tests compare against.
pytest_plugins = ["tests.server_fixtures", "tests.e2e_nodes"]

REPO = Path(__file__).resolve().parent.parent
STACKS = REPO / "stacks"
SHARED_DATA = REPO.parent / "shared" / "data"


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self):
        return json.loads(self.stdout)


def run_trainfleet(*args: str, cwd: Path = REPO, env: dict | None = None, timeout: float = 120) -> Result:
    """Run `trainfleet ARGS` exactly as a user would (a fresh process, real exit code and streams)."""
    proc = subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(autouse=True, scope="session")
def isolated_trainfleet_home(tmp_path_factory):
    """No test (nor a CLI process it starts) reads or writes a developer's real catalog overlay.

    Session-wide, so the cached default catalog stays valid; refresh tests point TRAINFLEET_HOME elsewhere
    themselves."""
    before = os.environ.get("TRAINFLEET_HOME")
    os.environ["TRAINFLEET_HOME"] = str(tmp_path_factory.mktemp("trainfleet-home"))
    from infra.catalog import default_catalog

    default_catalog.cache_clear()
    yield
    if before is None:
        os.environ.pop("TRAINFLEET_HOME", None)
    else:
        os.environ["TRAINFLEET_HOME"] = before


@pytest.fixture(autouse=True)
def remove_deepspeed_shm_buffers():
    """After each test, delete the shared-memory buffers of the DeepSpeed jobs this process started (by the
    master ports it took: the test's own and any fixture's set up for it), never another process's: tests run in
    parallel, and a live job whose buffer is unlinked hangs its ranks. Left there, a few hundred runs' buffers
    once filled 20 GB of a 24 GB machine's /dev/shm."""
    from tests import deepspeed_runs

    yield
    deepspeed_runs.remove_finished_buffers()


@pytest.fixture
def trainfleet():
    return run_trainfleet


def assert_one_line_error(result: Result, *needles: str) -> None:
    """A user error: exit 2, exactly one line on stderr, no traceback, naming what is wrong."""
    assert result.code == 2, (result.code, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])



def _fail_skip_under_ci(report) -> None:
    """Under CI=true a skip is a failure, wherever it came from (a `pytest.skip`, an `importorskip`, a skip
    marker, a module-level skip at collection): `.ci/run` installs every test dependency, so a skip there
    means a broken install that would otherwise turn into a green run."""
    from tests.needs import in_ci

    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which must not skip: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    _fail_skip_under_ci((yield).get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    _fail_skip_under_ci((yield).get_result())
