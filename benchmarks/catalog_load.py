"""How fast the catalog loads and how quickly the CLI answers.

    .venv/bin/python benchmarks/catalog_load.py

Prints: in-process load time of the whole embedded catalog (median of N fresh loads), and the wall
time of whole `trainfleet --help` and `trainfleet catalog list --json` processes (median of N runs).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from infra.catalog import load_catalog

REPO = Path(__file__).resolve().parent.parent
RUNS = 7


def median_ms(fn, runs: int = RUNS) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "cli", *args], cwd=REPO, check=True, capture_output=True)


def main() -> None:
    catalog = load_catalog()
    print(f"catalog: {len(catalog.all_offers)} offers, {len(catalog.accelerators)} accelerators")
    print(f"load_catalog() in process:            {median_ms(load_catalog):7.1f} ms (median of {RUNS})")
    print(f"`trainfleet --help` whole process:     {median_ms(lambda: cli('--help')):7.1f} ms")
    print(
        f"`trainfleet catalog list --json`:      {median_ms(lambda: cli('catalog', 'list', '--json')):7.1f} ms"
    )
    print(
        f"python -c pass (interpreter floor):    {median_ms(lambda: subprocess.run([sys.executable, '-c', 'pass'])):7.1f} ms"
    )


if __name__ == "__main__":
    main()
