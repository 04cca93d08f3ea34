"""Scale simulation of the node protocol (issue 29): N real node agents against an object store shaped like the
cloud's, on a virtual clock, with DeepSpeed 0.19's checkpoint files as sparse files.

    .venv/bin/python benchmarks/scale_sim.py --nodes 64 --model 70b --zero 1 --precision bf16 --cloud aws
    .venv/bin/python benchmarks/scale_sim.py --nodes 16 --model 13b
    .venv/bin/python benchmarks/scale_sim.py --nodes 8 --model 7b --profile ci

Every node runs the agent's own code (trainfleet_agent: the Watcher's loop and notice handling, upload_part,
commit, restore, upload_step) on a virtual clock (benchmarks/sim/clock.py: threads run one at a time in
virtual-time order, so hours of checkpoint traffic take seconds and every run is the same). The store
(benchmarks/sim/store.py) moves bytes at the rates of infra/catalog/data/calibration/checkpoint_io.csv
(benchmarks/sim/shapes.py cites each row), with request latency, per-second request limits answered as each
service does (S3 503 SlowDown, GCS 429, Azure 503) and retried like the SDK, and `--fault-rate` failed requests.
The trainer (benchmarks/sim/trainer.py) saves each node's files of infra/checkpoint_layout.py as sparse files.

Rates (checkpoint_io.csv rows, as benchmarks/sim/shapes.py cites them): upload per node S3 1.0 GB/s (Mountpoint
sequential write), GCS 0.35 GB/s and 0.19 GB/s beyond 35 nodes (Dataflux), Azure 0.35 GB/s (the GCS figure: no
Azure row); download per node S3 6.269 GB/s (s3-benchmark, p3dn.24xlarge), GCS and Azure their upload rate (no
row); S3 85 MB/s per connection; Azure account 60 Gbit/s in, 200 Gbit/s out; requests per second: S3 3,500 PUT
and 5,500 GET per prefix, GCS ~1,000 writes and ~5,000 reads per bucket, Azure 40,000 per account; the local save
2 GB/s (infra/checkpoint_io.py LOCAL_SAVE_GBPS). Modelled, not sourced: 30 ms per request.

It runs periodic checkpoints; a notice of every type at its deadline (each on its own cloud); a node lost
mid-upload, the restart, a cold restart, an elastic shrink and grow-back; and a step saved again after a crashed
commit (issue 29 #1). It prints the figures beside the planner's (cli/planner/reliability.py) for the same job,
and the invariants (benchmarks/sim/invariants.py): a FAIL exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CI_NOTICES = ["aws-spot-terminate", "aws-asg-terminate", "gcp-preempted", "azure-Terminate"]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="64", help="node count, or several: 8,16,64 (each runs every scenario)")
    ap.add_argument("--model", default="70b", help="7b, 13b, 70b or a preset name (cli/planner/presets.py)")
    ap.add_argument("--zero", type=int, default=1, choices=[1, 2, 3])
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp32"])
    ap.add_argument("--cloud", default="aws", choices=["aws", "gcp", "azure"])
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--step-s", type=float, default=10.0, help="one training step (virtual seconds)")
    ap.add_argument("--keep-last", type=int, default=3)
    ap.add_argument("--grad-accum", type=int, default=3, help="for the elastic shrink size (infra/elastic.py)")
    ap.add_argument("--fault-rate", type=float, default=0.001, help="chance a request fails (500) and is retried")
    ap.add_argument("--profile", choices=["full", "ci"], default="full",
                    help=f"ci: notices {', '.join(CI_NOTICES)} only")  # fmt: skip
    ap.add_argument("--workdir", default=None, help="where the nodes' sparse files go (default: a temp folder)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    from benchmarks.sim.report import render
    from benchmarks.sim.scenarios import Spec, run_all

    a = parse_args(argv)
    notices = CI_NOTICES if a.profile == "ci" else None
    started, all_ok = time.perf_counter(), True

    def progress(o) -> None:
        print(f"  {o.name}: {o.virtual_s:,.0f} s virtual in {o.wall_s:.1f} s", file=sys.stderr, flush=True)

    for nodes in [int(n) for n in str(a.nodes).split(",")]:
        spec = Spec(cloud=a.cloud, nodes=nodes, model=a.model, zero=a.zero, precision=a.precision, tp=a.tp,
                    pp=a.pp, ranks_per_node=a.ranks_per_node, step_s=a.step_s, keep_last=a.keep_last,
                    fault_rate=a.fault_rate, grad_accum=a.grad_accum)  # fmt: skip
        print(f"{nodes} nodes:", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix="scale-sim-", dir=a.workdir) as work:
            check_sparse(work)
            outcomes = run_all(spec, work, notices, progress)
        text, ok = render(spec, outcomes)
        all_ok &= ok
        print(text + "\n")
    print(f"wall time of the whole simulation on this machine: {time.perf_counter() - started:.1f} s")
    return 0 if all_ok else 1


def check_sparse(folder: str) -> None:
    """The nodes' files are sparse: a 1 TB file must take no blocks here."""
    probe = os.path.join(folder, "sparse-probe")
    with open(probe, "wb") as f:
        f.truncate(10**12)
    blocks = os.stat(probe).st_blocks
    os.remove(probe)
    if blocks > 1024:
        raise SystemExit(f"{folder}: this filesystem does not keep sparse files sparse ({blocks} blocks for 1 TB)")


if __name__ == "__main__":
    sys.exit(main())
