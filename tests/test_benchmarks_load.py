"""Benchmarks are not run by the tests (they time things), but they must stay runnable: every one loads
(its imports resolve against the current code) and keeps its work behind `if __name__ == "__main__"`."""

import runpy
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parent.parent / "benchmarks").glob("*.py"))


def test_there_are_benchmarks():
    assert len(BENCHMARKS) >= 5


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_benchmark_loads(path: Path):
    namespace = runpy.run_path(str(path), run_name="benchmark_load_check")
    assert callable(namespace.get("main")), f"{path.name} has no main()"
