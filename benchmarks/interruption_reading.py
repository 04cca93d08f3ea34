"""What the README's quick-start plan becomes under each published Azure eviction band, read per hour.

    .venv/bin/python benchmarks/interruption_reading.py

A scenario, not a measurement of Azure: this machine has no Azure credentials, so no real eviction rate is read.
For each band Resource Graph can give ("0-5" ... "20+", per hour, Microsoft's spot-vms.md), every Azure size in
every catalog region is given that band (an azure-eviction-rates.json in a temporary TRAINFLEET_HOME, as
`trainfleet catalog refresh --cloud azure --capacity` writes it), and `trainfleet plan` is run on the quick-start
job. Printed per band: the hazard per node-hour the planner takes, the best plan and its expected cost, and the
best Azure plan still on offer (Azure only). The first line is the snapshot as shipped: Azure at the labelled
10-15%/month assumption.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.catalog.interruption import InterruptionRate, parse_range  # noqa: E402
from infra.catalog.loader import DATA_DIR, read_offers  # noqa: E402

JOB = ["--model", "llama-7b", "--tokens", "200B", "--deadline", "72h"]
BANDS = ["0-5", "5-10", "10-15", "15-20", "20+"]


def plan(home: Path, *extra: str) -> dict | str:
    env = {**os.environ, "TRAINFLEET_HOME": str(home), "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "cli", "plan", *JOB, *extra, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    if done.returncode != 0:
        return done.stderr.strip().splitlines()[-1][:70]
    return json.loads(done.stdout)["best"]


def describe(best: dict | str) -> str:
    if isinstance(best, str):
        return best
    return (f"{best['nodes']} x {best['instance_type']} {best['purchase']} {best['cloud']} {best['region']}, "
            f"${best['expected_cost_usd']:,.0f}, {best['wallclock_hours']:.0f} h")  # fmt: skip


def main() -> None:
    azure = sorted({(o.region, o.instance_type) for o in read_offers(DATA_DIR / "offers.csv") if o.cloud == "azure"})
    print(f"quick-start job: trainfleet plan {' '.join(JOB)}; {len(azure)} Azure (region, size) pairs\n")
    print(f"{'Azure rate':<22} {'per node-h':>10}  best plan / best Azure plan")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "snapshot"
        home.mkdir()
        print(f"{'10-15%/month assumed':<22} {InterruptionRate(0.10, 0.15, 730.0).hazard_per_node_hour:>10.2e}  "
              f"{describe(plan(home))}\n{'':<34}{describe(plan(home, '--clouds', 'azure'))}")  # fmt: skip
        for band in BANDS:
            low, high = parse_range(band)
            home = Path(tmp) / band.replace("+", "plus")
            home.mkdir()
            (home / "azure-eviction-rates.json").write_text(json.dumps(
                {"format": 1, "fetched_at": "2026-11-29T00:00:00Z", "source": "benchmarks/interruption_reading.py",
                 "rates": [[r, s, low, high] for r, s in azure]}))  # fmt: skip
            rate = InterruptionRate(low, high, 1.0)
            print(f"{rate.label:<22} {rate.hazard_per_node_hour:>10.2e}  {describe(plan(home))}\n"
                  f"{'':<34}{describe(plan(home, '--clouds', 'azure'))}")  # fmt: skip


if __name__ == "__main__":
    main()
