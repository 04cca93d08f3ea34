"""Notice-to-durable for a multi-node sharded checkpoint, measured, beside the planner's prediction.

    .venv/bin/python benchmarks/notice_to_durable.py [--nodes 3] [--gib 2.1]

Three "nodes" on this machine, each with its own disk folder, its own IMDSv2 stand-in and its own agent process
(`trainfleet_agent.pyz watch`, exactly as the agent unit runs it), against moto's S3 server on 127.0.0.1. Each
node holds one ZeRO shard of the checkpoint (node 0 also the model states), `--gib` in total. At the notice
the benchmark posts an AWS spot notice to every node's IMDS and, standing in for the trainer, publishes each
node's step folder (rename + COMPLETE, as templates/train.py does) once that node's agent has seen the notice
(and signalled its trainer): the trainer's own save time, model-dependent, is not in the measurement. Measured: notice -> LATEST naming the step
(every node's part uploaded by its own agent, node 0's commit), from outside (polling S3) and as each agent
logs it. Then the planner's prediction for the same bytes and node count (cli/planner/reliability.py
`checkpoint_times`: upload + commit, the part of the emergency checkpoint after the save), once at its own
per-node upload rate and once at the bandwidth one node measured here alone, so the two can be compared. All nodes share this machine's cores and loopback: the
aggregate does not scale with nodes here as it does across real machines.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHUNK = 8 << 20


def write_file(path: Path, size: int, seed: int) -> None:
    block = os.urandom(1 << 20)  # incompressible; one random MiB, varied per chunk below
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left, i = size, 0
        while left > 0:
            n = min(left, CHUNK)
            piece = (block * (CHUNK // len(block)))[:n]
            f.write(bytes([(seed + i) & 0xFF]) + piece[1:])
            left -= n
            i += 1


def stage_part(ckpt: Path, step: int, node: int, nodes: int, shard: int, model: int) -> Path:
    """A node's DeepSpeed files for `step`, in a temp folder the 'trainer' publishes at the notice."""
    tmp = ckpt / f".tmp-step-{step:08d}"
    write_file(tmp / f"zero_pp_rank_{node}_mp_rank_00_optim_states.pt", shard, node)
    if node == 0:
        write_file(tmp / "mp_rank_00_model_states.pt", model, 99)
    return tmp


def publish(tmp: Path, step: int, node: int, nodes: int) -> None:
    final = tmp.parent / f"step-{step:08d}"
    os.replace(tmp, final)
    (final / "COMPLETE").write_text(json.dumps({"step": step, "node_rank": node, "nodes": nodes}))


def single_node_bandwidth(store_env: dict, bucket: str, folder: Path, size: int) -> float:
    """Bytes per second one agent uploads one node's part alone (the `sync` command), same server."""
    import subprocess

    from tests.agent_support import AGENT

    ckpt = folder / "solo"
    publish(stage_part(ckpt, 1, 0, 1, size, 0), 1, 0, 1)
    t = time.perf_counter()
    subprocess.run(
        [sys.executable, str(AGENT), "sync", "--cloud", "aws", "--bucket", bucket, "--prefix", "solo",
         "--ckpt-dir", str(ckpt)], check=True, capture_output=True, env={**os.environ, **store_env},
    )  # fmt: skip
    return size / (time.perf_counter() - t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--gib", type=float, default=2.1, help="checkpoint size, all nodes together")
    a = ap.parse_args()

    import boto3

    from cli.planner.reliability import NOTICE_S, checkpoint_times
    from tests.agent_support import AGENT, Proc
    from tests.metadata_servers import AwsImds
    from tests.moto_server import MotoServer

    total = int(a.gib * (1 << 30))
    model = 64 << 20
    shard = (total - model) // a.nodes
    step = 100
    moto = MotoServer()
    imds_servers, agents = [], []
    try:
        env = {"AWS_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t",
               "AWS_REGION": "us-east-1"}  # fmt: skip
        s3 = boto3.client("s3", endpoint_url=moto.url, region_name="us-east-1", aws_access_key_id="t",
                          aws_secret_access_key="t")  # fmt: skip
        bucket = "bench-" + uuid.uuid4().hex[:8]
        s3.create_bucket(Bucket=bucket)
        with tempfile.TemporaryDirectory(prefix="notice-bench-") as tmp_s:
            tmp = Path(tmp_s)
            solo_bw = single_node_bandwidth(env, bucket, tmp, shard)
            t_stage = time.perf_counter()
            staged = [stage_part(tmp / f"node{n}" / "ckpt", step, n, a.nodes, shard, model) for n in range(a.nodes)]
            write_s = time.perf_counter() - t_stage
            for n in range(a.nodes):
                imds = AwsImds().start()
                imds_servers.append(imds)
                run = tmp / f"node{n}" / "run"
                run.mkdir(parents=True)
                agents.append(Proc([
                    sys.executable, str(AGENT), "watch", "--cloud", "aws", "--bucket", bucket, "--prefix", "job",
                    "--ckpt-dir", str(tmp / f"node{n}" / "ckpt"), "--run-dir", str(run), "--interval-minutes", "0",
                    "--keep-last", "2", "--metadata-url", imds.url, "--poll-s", "0.2", "--scan-s", "0.1",
                ], env))  # fmt: skip
            for ag in agents:
                ag.wait_event("watch_start", timeout=30)
            noticed = time.time()
            for imds in imds_servers:
                imds.notice("terminate", in_s=NOTICE_S["aws"])
            for n, folder in enumerate(staged):  # each trainer, signalled by its agent, checkpoints at once
                agents[n].wait_event("notice_wait", timeout=60)  # its baseline taken: a real save takes longer
                publish(folder, step, n, a.nodes)
            latest_at = None
            while time.time() - noticed < 600:
                try:
                    body = s3.get_object(Bucket=bucket, Key="job/LATEST")["Body"].read()
                    if body == f"step-{step:08d}".encode():
                        latest_at = time.time()
                        break
                except s3.exceptions.NoSuchKey:
                    pass
                time.sleep(0.05)
            logged = [ag.wait_event("notice_durable", timeout=600)["notice_to_durable_s"] for ag in agents]
    finally:
        for ag in agents:
            ag.kill()
        for imds in imds_servers:
            imds.stop()
        moto.stop()
    if latest_at is None:
        print("LATEST never named the notice's step within 600 s")
        return 1
    measured = latest_at - noticed
    planned = checkpoint_times("aws", total, a.nodes, None, 0.0)  # the benchmark's trainers are at a step boundary
    at_measured_bw = total / (a.nodes * solo_bw) + planned.commit_s
    print(f"checkpoint: {total / (1 << 30):.2f} GiB over {a.nodes} nodes ({shard / (1 << 20):.0f} MiB shard each, "
          f"+{model >> 20} MiB model states on node 0); local save of all parts {write_s:.1f} s (not in the timing)")
    print(f"measured  notice -> LATEST (seen in S3): {measured:.1f} s; each agent's notice_to_durable_s: "
          f"{', '.join(f'{x:.1f}' for x in logged)} s")
    print(f"planner   upload + commit at its {planned.upload_gbps_per_node:g} GB/s per node: "
          f"{planned.upload_s + planned.commit_s:.2f} s (AWS notice {NOTICE_S['aws']:.0f} s; save not timed here)")
    print(f"planner   same formula at the {solo_bw / 1e6:.0f} MB/s one node measured alone here: {at_measured_bw:.1f} s "
          f"(measured / predicted = {measured / at_measured_bw:.2f}; the nodes share 1 machine here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
