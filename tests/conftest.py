"""Shared test helpers: run the real `trainfleet` command in a subprocess, load example stacks."""

from __future__ import annotations

import gc
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


# ---- garbage collection ------------------------------------------------------------------------------------------
# A worker's heap holds the provider SDKs, moto's clients and Hypothesis's engine: a few million objects, which
# CPython's default thresholds (700, 10, 10) re-scan over and over (a quarter of an in-process fuzz test's CPU,
# measured with gc.callbacks). Young collections come less often, and each test starts with everything alive
# frozen: never scanned again, still freed by reference counting when released.
gc.set_threshold(20_000, 20, 100)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    gc.freeze()


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


def run_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """`trainfleet ARGS` in this process (cli.app.main, as the console script runs it): (exit code, stdout, stderr)."""
    from cli.app import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def one_line_error(capsys, *args: str) -> str:
    """In process: exit 2, exactly one non-empty line on stderr, no traceback; returns that line."""
    code, out, err = run_in_process(capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1, err
    assert "Traceback" not in err and "nan" not in out.lower() and "infinity" not in out.lower()
    return lines[0]


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


# ---- order: the longest tests first ------------------------------------------------------------------------------
# .ci/run hands tests to pytest-xdist workers one at a time in collection order (--dist load --maxschedchunk 1),
# each worker holding the test it runs and the next. These tests take from half a minute to three (measured wall
# time, seconds, from .ci/run's --durations on 2 cores), so they go first, each to its own worker, and the short
# ones fill in around them: left in file order, a run ended with one worker still in a three-minute DeepSpeed run
# the others had long finished. A name missing here only loses its place; nothing else depends on the table.
LONGEST = {
    "test_e2e_elastic.py::test_lost_node_continues_on_two_after_the_wait_then_grows_back_to_three": 170,
    "test_e2e_deepspeed.py::test_three_nodes_relaunch_after_a_lost_peer_then_checkpoint_a_notice_and_a_fresh_set_"
    "finishes_identical": 180,
    "test_e2e_deepspeed.py::test_spot_notice_then_fresh_node_finishes_identical_to_an_uninterrupted_run": 70,
    "test_e2e_deepspeed.py::test_the_optimizer_offload_config_the_planner_emits_trains": 55,
    "test_e2e_deepspeed.py::test_bf16_checkpoint_parts_go_to_their_own_nodes_and_two_fresh_nodes_finish_identical": 75,
    "test_provider_definitions.py::test_pyright_finds_no_errors_in_infra": 60,
    "test_checkpoint_layout.py::test_names_and_sizes_are_deepspeeds_own[1]": 30,
    "test_checkpoint_layout.py::test_names_and_sizes_are_deepspeeds_own[3]": 30,
    "test_deepspeed_parallelism.py::test_layout_trains_checkpoints_resumes_and_matches_tp1_pp1[pp2]": 50,
    "test_deepspeed_parallelism.py::test_layout_trains_checkpoints_resumes_and_matches_tp1_pp1[tp2]": 40,
    "test_fuzz_cli.py::test_fuzz_plan": 36,
    "test_fuzz_cli.py::test_fuzz_stack_yaml": 34,
    "test_deepspeed_parallelism.py::test_deepspeed_cannot_run_autotp_inside_a_pipeline": 34,
    "test_fuzz_cli.py::test_fuzz_overlay_csv": 22,
    "test_agent_peers.py::test_gcp_mig_peers_are_consistent_across_nodes": 21,
    "test_fuzz_cli.py::test_fuzz_catalog": 20,
    "test_agent_aws.py::test_a_termination_by_the_group_itself_is_a_notice_and_the_hook_is_completed": 18,
    "test_provider_rules.py::test_stacks_check_refuses_the_two_zone_prod_with_one_line_and_exit_2": 17,
    "test_deepspeed_parallelism.py::test_autotp_trains_under_zero_2_and_zero_3[zero1]": 16,
    "test_agent_azure.py::test_azure_terminate_waits_for_its_not_before_less_the_window": 16,
    "test_deepspeed_parallelism.py::test_autotp_trains_under_zero_2_and_zero_3[zero0]": 15,
}


def pytest_collection_modifyitems(config, items):
    """The LONGEST tests first, longest first, then the rest in file order. Each worker starts with two tests
    (the one it runs and the next), so the long ones open the run one worker apart: long, short, long, short."""
    def cost(item) -> int:
        return LONGEST.get(item.nodeid.removeprefix("tests/"), 0)

    longest = sorted((i for i in items if cost(i)), key=cost, reverse=True)
    rest = [i for i in items if not cost(i)]
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    opening = []
    for long in longest[:workers]:
        opening += [long, *rest[:1]]
        rest = rest[1:]
    items[:] = opening + longest[workers:] + rest
