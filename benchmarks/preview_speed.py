"""Preview wall time per stack: `trainfleet preview --stack X --json` as a user runs it (a fresh process,
imports included), and the offline run itself in a warm process (program under mocks + pricing).

    .venv/bin/python benchmarks/preview_speed.py [--repeat 3]

Prints one line per stack: cold CLI seconds (median), warm in-process seconds (median), resources,
monthly, planned-job and expected planned-job cost; then the same for the largest third-party preview
document of the corpus (tests/fixtures/preview/corpus, `trainfleet preview --pulumi-json FILE --json`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from cli.preview.engine import estimate_stack
    from infra.errors import TrainfleetError
    from infra.stack_file import list_stack_files, stack_name

    stacks = [stack_name(p) for p in list_stack_files(REPO)]
    print(
        f"{'stack':<10} {'cli cold s':>10} {'warm s':>8} {'resources':>9} {'monthly USD':>14} {'job USD':>14} {'job h':>7}"
    )
    for stack in stacks:
        cold = []
        data = {}
        for _ in range(args.repeat):
            t = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "cli", "preview", "--stack", stack, "--json"],
                cwd=REPO,
                capture_output=True,
                text=True,
            )
            cold.append(time.perf_counter() - t)
            if proc.returncode not in (0, 1):  # 1: over the stack's guardrail, still an estimate
                break
            data = json.loads(proc.stdout)
        if not data:
            print(
                f"{stack:<10} failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
            )
            continue
        warm = []
        try:
            for i in range(args.repeat + 1):
                t = time.perf_counter()
                estimate_stack(stack, start=REPO)
                if i:  # the first run in this process also imports the cloud's SDK
                    warm.append(time.perf_counter() - t)
        except TrainfleetError as exc:
            print(f"{stack:<10} failed in process: {exc}")
            continue
        expected = data.get("expected_job_usd")
        print(
            f"{stack:<10} {statistics.median(cold):>10.2f} {statistics.median(warm):>8.2f} "
            f"{len(data['resources']):>9} {data['monthly_cost']:>14,.2f} {data['job_cost']:>14,.2f} "
            f"{data['usage']['job_hours']['value']:>7g}  expected job: "
            + (f"{expected:,.2f}" if expected is not None else f"none ({data.get('expected_note', '')[:60]})")
        )
    largest_document(args.repeat)


def largest_document(repeat: int) -> None:
    from cli.preview.pulumi_json import price_file
    from cli.preview.usage import resolve_usage

    corpus = sorted(
        (REPO / "tests" / "fixtures" / "preview" / "corpus").glob("*.json"), key=lambda p: -p.stat().st_size
    )
    path = corpus[0]
    cold = []
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "cli", "preview", "--pulumi-json", str(path), "--json"],
                              cwd=REPO, capture_output=True, text=True, check=True)  # fmt: skip
        cold.append(time.perf_counter() - t)
    usage = resolve_usage(None)
    warm = []
    for _ in range(repeat):
        t = time.perf_counter()
        priced = price_file(path, usage)
        warm.append(time.perf_counter() - t)
    steps = len(json.loads(path.read_text())["steps"])
    print(
        f"largest corpus document {path.name} ({path.stat().st_size / 1024:,.0f} KiB, {steps} steps, "
        f"{len(priced.after.resources)} resources after): cli cold {statistics.median(cold):.2f} s, "
        f"warm {statistics.median(warm) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
