"""Plan wall time over the full embedded catalog: as a whole CLI process, and per stage in-process.

    .venv/bin/python benchmarks/plan_speed.py [--repeat 5] [--instructions]

Whole process: `trainfleet plan ... --json` in a fresh interpreter (start-up, imports, argument parsing, catalog
load, calibration fit, search, ranking, JSON), the way an installed trainfleet runs: from byte-compiled modules
(pip compiles a package it installs). Here they are compiled once into a temporary PYTHONPYCACHEPREFIX by an
untimed first run, since some machines (this one) set PYTHONDONTWRITEBYTECODE and would compile every module in
every run. Per stage: the same work in this process, timed separately (catalog load and calibration fit are cached
after the first call, so they are timed cold once); the search as the CLI runs it (`shown`: only the fleets whose
plans could be shown) and over every fleet.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = [
    ["--model", "llama-7b", "--tokens", "200B", "--deadline", "72h"],
    ["--params", "13B", "--tokens", "1T", "--budget", "400000", "--clouds", "aws,gcp", "--purchase", "spot"],
    ["--params", "70B", "--tokens", "100B", "--objective", "time", "--max-nodes", "16"],
    ["--params", "70B", "--tokens", "1T", "--max-nodes", "128"],
    ["--model", "llama-7b", "--tokens", "1B", "--method", "lora"],
]


def whole_process(args: list[str], repeat: int, env: dict[str, str]) -> list[float]:
    """Seconds of each of `repeat` runs of `trainfleet ARGS`, after one untimed run that compiles what it imports."""
    command = [sys.executable, "-m", "cli", *args]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, env=env)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - t)
    return times


def instructions(args: list[str], env: dict[str, str]) -> float | None:
    """Millions of instructions one `trainfleet ARGS` process runs (valgrind's callgrind; None without valgrind):
    the same on a busy machine as on an idle one, so a change's effect shows where wall time is noise."""
    if shutil.which("valgrind") is None:
        return None
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m", "cli", *args]
    out = subprocess.run(command, cwd=ROOT, check=True, capture_output=True, text=True, env=env).stderr
    found = re.search(r"Collected : (\d+)", out)
    return int(found.group(1)) / 1e6 if found else None


def stages(args: list[str]) -> dict[str, float]:
    from cli.planner.calibration import default_fit
    from cli.planner.optimizer import Request, alternatives, search
    from cli.planner.report import plan_dict
    from cli.planner.standing import Shown
    from cli.planner.workload import Workload, resolve_shape
    from infra.catalog import load_catalog
    from infra.catalog.capacity import default_placement_scores
    from infra.units import MAX_HOURS, parse_count, parse_hours

    opts = dict(zip(args[::2], args[1::2], strict=True))
    out = {}
    t = time.perf_counter()
    catalog = load_catalog()
    out["catalog load"] = time.perf_counter() - t
    t = time.perf_counter()
    fit = default_fit.__wrapped__()  # as the CLI's (with each family's evidence), not the cached one: timed cold
    out["calibration fit"] = time.perf_counter() - t
    shape = resolve_shape(opts.get("--model"), parse_count(opts["--params"]) if "--params" in opts else None)
    w = Workload(shape, parse_count(opts["--tokens"]), method=opts.get("--method", "full"))
    req = Request(
        w,
        clouds=frozenset(opts["--clouds"].split(",")) if "--clouds" in opts else None,
        max_nodes=int(opts.get("--max-nodes", 64)),
        deadline_hours=parse_hours(opts["--deadline"]) if "--deadline" in opts else None,
        budget_usd=float(opts["--budget"]) if "--budget" in opts else None,
        purchase=opts.get("--purchase", "any"),
        objective=opts.get("--objective", "cost"),
    )
    t = time.perf_counter()
    scores = default_placement_scores()  # as the CLI: the embedded spot placement scores
    every = search(req, catalog.all_offers, catalog.accelerators, fit, scores=scores)
    out["search, every fleet"] = time.perf_counter() - t
    t = time.perf_counter()
    result = search(req, catalog.all_offers, catalog.accelerators, fit, scores=scores, shown=Shown(3, MAX_HOURS))
    out["search, fleets that could show (the CLI's)"] = time.perf_counter() - t
    out["_fleets"] = (result.stats.hardware_evaluated, result.stats.not_shown, every.stats.hardware_evaluated)
    t = time.perf_counter()
    selection = result.select(3, MAX_HOURS)
    ranked, front = selection.leaders, selection.frontier
    alts = alternatives(ranked, 3)
    out["select (count, rank, frontier)"] = time.perf_counter() - t
    t = time.perf_counter()
    if ranked:  # as the CLI without --explain
        [plan_dict(c, req, False, fit) for c in [ranked[0], *alts, *front]]
    out["report"] = time.perf_counter() - t
    out["_candidates"] = result.stats.candidates
    out["_setups"] = result.stats.setups_evaluated
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--instructions", action="store_true",
                        help="also count each case's instructions under valgrind (about 20 s a case)")
    opts = parser.parse_args()
    repeat = opts.repeat
    import typer

    from infra.catalog import default_catalog

    print(f"catalog: {len(default_catalog().all_offers)} offers; python {sys.version.split()[0]}, "
          f"typer {typer.__version__}")  # fmt: skip
    medians = []
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPYCACHEPREFIX": cache}
        print(f"trainfleet --help: {whole_process(['--help'], 1, env)[0]:.3f} s")
        for args in CASES:
            times = whole_process(["plan", *args, "--json"], repeat, env)
            medians.append(statistics.median(times))
            st = stages(args)
            print(f"\ntrainfleet plan {' '.join(args)}")
            print(f"  whole CLI process: median {statistics.median(times):.3f} s, min {min(times):.3f} s "
                  f"over {repeat} runs")  # fmt: skip
            if opts.instructions and (count := instructions(["plan", *args, "--json"], env)) is not None:
                print(f"  instructions (valgrind, one run): {count:,.0f} M")
            searched, skipped, every = st.pop("_fleets")
            print(f"  candidates {st.pop('_candidates'):,}, DeepSpeed setups evaluated {st.pop('_setups'):,}; "
                  f"fleets searched {searched:,}, skipped {skipped:,} (of {every:,})")  # fmt: skip
            for name, sec in st.items():
                print(f"  {name:<48} {sec * 1000:8.1f} ms")
    print(f"\nwhole process, the five cases: median {statistics.median(medians):.3f} s, slowest {max(medians):.3f} s")


if __name__ == "__main__":
    main()
