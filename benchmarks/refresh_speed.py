"""Refresh time for the test fixtures: `python benchmarks/refresh_speed.py [--repeat N]`.

Runs the real `trainfleet catalog refresh` (a fresh process, as a user would) against moto's server
(EC2 zones and spot price history) and the local fake price APIs (AWS Price List, Azure Retail
Prices, GCP Billing Catalog), into a throwaway TRAINFLEET_HOME, and prints wall time per cloud
plus the in-process refresh time each run reports. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.fake_price_apis import FakePriceApis, isolated_env  # noqa: E402
from tests.moto_server import MotoServer  # noqa: E402

CASES = [
    ("aws", ["--regions", "us-east-1,us-west-2"]),
    ("aws", ["--regions", "us-east-1,us-west-2,us-east-2,eu-central-1"]),
    ("azure", []),
    ("gcp", []),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    moto, fake = MotoServer(), FakePriceApis().start()
    try:
        with tempfile.TemporaryDirectory() as home:
            env = {
                **os.environ,
                **isolated_env(Path(home)),
                **fake.env(),
                **moto.env(),
                "GOOGLE_API_KEY": fake.token,
            }
            print(
                f"{'cloud':6} {'regions':>7} {'offers':>7} {'wall s (median)':>16} {'refresh s (median)':>19} {'runs':>5}"
            )
            for cloud, extra in CASES:
                walls, inner, offers, regions = [], [], 0, 0
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    proc = subprocess.run(
                        [sys.executable, "-m", "cli", "catalog", "refresh", "--cloud", cloud, *extra, "--json"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                    )  # fmt: skip
                    walls.append(time.perf_counter() - t0)
                    if proc.returncode != 0:
                        sys.exit(f"refresh --cloud {cloud} failed: {proc.stdout[-500:]} {proc.stderr[-500:]}")
                    report = json.loads(proc.stdout)
                    inner.append(report["seconds"])
                    offers = sum(r["offers"] for r in report["regions"])
                    regions = len(report["regions"])
                print(
                    f"{cloud:6} {regions:>7} {offers:>7} {statistics.median(walls):>16.2f} "
                    f"{statistics.median(inner):>19.2f} {args.repeat:>5}"
                )
            overlay = Path(home) / "catalog-overlay.csv"
            print(f"overlay rows after all refreshes: {sum(1 for _ in overlay.open()) - 1}")
    finally:
        fake.stop()
        moto.stop()


if __name__ == "__main__":
    main()
