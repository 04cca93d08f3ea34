"""The PR cost comment under different hash seeds: the same bytes every time, or it is not a comment a bot can
leave alone on a re-run (issue 33).

Builds prod's base and head `pulumi preview --json` documents for a pull request (tests/preview_documents.py:
the engine's rules applied to the program run under mocks) and runs `trainfleet diff --format markdown` (and
`--format json`) on them once per PYTHONHASHSEED, each in a fresh process; prints each body's sha256 and
whether they all agree.

    .venv/bin/python benchmarks/comment_determinism.py [--seeds 1 2 3 4 5] [--nodes 6] [--instance-type p5.48xlarge]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    from tests.preview_documents import declared, deployed_after_run, preview, stack_text

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", default=["1", "2", "3", "4", "5"])
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--instance-type", default=None)
    args = parser.parse_args()

    base_res, base_cfg = declared("prod", stack_text("prod"))
    head_res, head_cfg = declared("prod", stack_text("prod", nodes=args.nodes, instance_type=args.instance_type))
    deployed = deployed_after_run(base_res)
    with tempfile.TemporaryDirectory() as folder:
        base, head = Path(folder) / "base.json", Path(folder) / "head.json"
        base.write_text(json.dumps(preview(deployed, base_res, base_cfg)))
        head.write_text(json.dumps(preview(deployed, head_res, head_cfg)))
        for fmt in ("markdown", "json"):
            digests = set()
            for seed in args.seeds:
                out = subprocess.run(
                    [sys.executable, "-m", "cli", "diff", "--base", str(base), "--head", str(head), "--format", fmt],
                    cwd=ROOT, capture_output=True, text=True, check=True,
                    env={**os.environ, "PYTHONHASHSEED": seed},
                ).stdout  # fmt: skip
                digest = hashlib.sha256(out.encode()).hexdigest()[:16]
                digests.add(digest)
                print(f"{fmt:8} PYTHONHASHSEED={seed:>5}  {len(out):6,} chars  sha256 {digest}")
            print(f"{fmt:8} {'identical' if len(digests) == 1 else 'DIFFERENT'} across {len(args.seeds)} seeds")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
