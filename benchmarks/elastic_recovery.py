"""Elastic recovery, measured: from a node's loss to training again on the nodes left, conversion included.

    .venv/bin/python benchmarks/elastic_recovery.py [--hidden 1024 --depth 6] [--wait-s 10]

Two "nodes" (one DeepSpeed CPU rank each) run the rendered boot script and agent against moto's EC2, Auto Scaling
and S3 on 127.0.0.1, as tests/test_e2e_elastic.py does, training templates/train.py (its Llama at hidden 1024 with
--depth decoder layers, tests/token_data.py `model_config`) on the tests' token data: a ZeRO-2 checkpoint over
1 GiB at 6 layers (77M parameters; fp32: 4 bytes of weights and 12 of optimizer states per parameter). After the
first checkpoint is durable, node b's VM vanishes (every process killed, no notice) and the group launches nothing.
The stack says `elastic: {min_nodes: 1, wait_for_replacement_s: --wait-s}`. Node a's boot script notices,
waits, restores the whole checkpoint (its own part reused, b's part fetched from the bucket), converts it with
DeepSpeed's ds_to_universal and relaunches on one node with twice the accumulation.

Printed: each phase as seen from outside (the boot log and the step file, polled every 0.1 s), the total from
the loss to the first step trained again, and the planner's prediction for the same checkpoint
(cli/planner/reliability.py), once at its own rates for a real node and once at the rates measured here. This
machine has 2 cores shared by both nodes, moto and the converter.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))



class LogWatch:
    """First time each pattern appears in a growing log file."""

    def __init__(self, path: Path, patterns: dict[str, str]):
        self.path, self.patterns, self.seen = path, {k: re.compile(v) for k, v in patterns.items()}, {}

    def poll(self, since: int = 0) -> None:
        text = self.path.read_text(errors="replace")[since:] if self.path.exists() else ""
        for name, rx in self.patterns.items():
            if name not in self.seen and rx.search(text):
                self.seen[name] = time.time()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--wait-s", type=int, default=10, help="checkpoint.elastic.wait_for_replacement_s")
    a = ap.parse_args()

    from cli.planner import reliability
    from tests.e2e_nodes import BootedNode, Group, new_bucket, render_for, wait_for
    from tests.moto_server import MotoServer
    from tests.token_data import model_args, model_config

    n_params = model_config(a.hidden, a.depth).params
    expected_bytes = 16 * n_params
    print(f"model: {n_params / 1e6:.1f}M parameters, fp32 ZeRO-2: about {expected_bytes / 2**30:.2f} GiB per checkpoint")
    moto = MotoServer()
    nodes: dict[str, BootedNode] = {}
    try:
        bucket = new_bucket(moto)
        group = Group(moto, "tf-bench-el-" + uuid.uuid4().hex[:6], nodes=2)
        rendered, prefix = render_for(
            moto, bucket, nodes=2, group=group.name,
            elastic={"min_nodes": 1, "wait_for_replacement_s": a.wait_s}, step_seconds=0.0,
            args=("--steps", "100000", *model_args(a.hidden, a.depth)),
        )  # fmt: skip
        (id0, ip0), (id1, ip1) = group.in_rank_order()
        tmp = Path(tempfile.mkdtemp(prefix="tf-bench-elastic-"))
        nodes["a"] = BootedNode(tmp / "a", rendered, moto.url, id0, ip0, nodes=2)
        nodes["b"] = BootedNode(tmp / "b", rendered, moto.url, id1, ip1, nodes=2)
        node_a, node_b = nodes["a"], nodes["b"]
        durable = node_a.agent.wait_event("durable", timeout=900)
        print(f"first checkpoint durable: step {durable['step']}, {durable['bytes'] / 2**30:.2f} GiB in the bucket")
        log_size = node_a.log.stat().st_size

        node_b.lose()
        group.asg.terminate_instance_in_auto_scaling_group(InstanceId=id1, ShouldDecrementDesiredCapacity=True)
        lost_at = time.time()
        step_at_loss = int((node_a.node.run_dir / "step").read_text())
        watch = LogWatch(
            node_a.log,
            {
                "noticed": r"membership changed|trainer exited",
                "decided": r"continuing on 1 of 2",
                "restored": r'"event":"restored"',
                "converted": r"converted the checkpoint",
                "launched": r"launching: node rank 0 of 1",
                "loaded": r"resumed from step-",
            },
        )

        def trained_again() -> bool:
            watch.poll(log_size)
            if "loaded" not in watch.seen:
                return False
            resumed = re.findall(r"resumed from step-(\d+)", node_a.log.read_text()[log_size:])
            return int((node_a.node.run_dir / "step").read_text()) > int(resumed[-1])

        wait_for(trained_again, 1800, "training again on one node")
        again_at = time.time()
        text = node_a.log.read_text()[log_size:]
    finally:
        for n in nodes.values():
            n.stop()
        moto.stop()

    restored = json.loads(re.search(r'(\{"ts":[^\n]*"event":"restored"[^\n]*\})', text).group(1))
    converted = json.loads(re.search(r"converted the checkpoint for 1 node\(s\): (\{.*\})", text).group(1))
    resumed_step = int(re.findall(r"resumed from step-(\d+)", text)[-1])
    total = again_at - lost_at
    print(f"\nnode b lost at step {step_at_loss}; node a resumed from step {resumed_step} on 1 node")
    last = lost_at
    for name in ("noticed", "decided", "restored", "converted", "launched", "loaded"):
        when = watch.seen.get(name)
        if when is not None:
            print(f"  {name:<10} +{when - lost_at:7.1f} s  (+{when - last:6.1f} s)")
            last = when
    print(f"  trained    +{total:7.1f} s  (first step on 1 node)")
    print(f"restore: {restored['fetched_bytes'] / 2**30:.2f} GiB fetched in {restored['seconds']:.1f} s "
          f"({restored['fetched_bytes'] / max(restored['seconds'], 1e-9) / 1e6:.0f} MB/s from moto)")  # fmt: skip
    rate = converted["bytes"] / converted["seconds"]
    print(f"conversion (ds_to_universal): {converted['bytes'] / 2**30:.2f} GiB in {converted['seconds']:.1f} s "
          f"= {rate / 1e6:.0f} MB/s on this machine")  # fmt: skip
    print(f"loss -> training again: {total:.1f} s measured, of which {a.wait_s} s is the configured wait")

    # The planner's shrink: the wait, then one conversion onto the nodes left (reliability.conversion_s: download
    # every part, convert, load the node's share); what it leaves out (noticing the loss, stopping the hung
    # trainer, DeepSpeed's launch) is the measured total less these.
    ckpt = converted["bytes"]
    own = reliability.conversion_s("aws", ckpt, 1, None)
    print(f"planner, its own rates (S3 {reliability.upload_gbps_per_node('aws', 1, None):g} GB/s per node, "
          f"{reliability.convert_rate_note()}): {a.wait_s + own:.1f} s = wait {a.wait_s} s + conversion {own:.1f} s")  # fmt: skip
    download = restored["fetched_bytes"] / max(restored["seconds"], 1e-9)
    here = reliability.conversion_s("aws", ckpt, 1, None, download_bytes_per_s=download, convert_bytes_per_s=rate)
    print(f"planner, at the rates measured here: {a.wait_s + here:.1f} s = wait {a.wait_s} s + conversion {here:.1f} s "
          f"(measured: {total:.1f} s; the {total - a.wait_s - here:.1f} s between is noticing the loss, stopping "
          "the hung trainer and DeepSpeed's launch, which the planner leaves out)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
