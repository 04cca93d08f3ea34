"""End to end on CPU: the rendered node files run a real DeepSpeed job, spot notices from local IMDSv2 servers and
a VM lost without notice interrupt it, the agents make each checkpoint durable in moto's S3, and fresh nodes
restored from the bucket finish at the same step with the same weights and loss as an uninterrupted run.

The harness (tests/e2e_nodes.py) runs what `render_user_data` produced for an AWS fleet: the env file, the fetch
script (the agent and the example trainer from the bucket, sha256-pinned), the agent unit's command line, the boot
script and the DeepSpeed launch script. Needs the `e2e` extra (torch CPU build, deepspeed).
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid

import pytest

from tests.needs import need_module

need_module("torch", "pip install torch==2.13.0")
need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")

from tests.agent_support import Proc  # noqa: E402
from tests.e2e_nodes import (  # noqa: E402
    BF16_STEPS,
    STEPS,
    BootedNode,
    Group,
    Node,
    assert_holds_its_own_part,
    kill_group,
    latest_in,
    new_bucket,
    own_files,
    render_for,
    s3,
    wait_for,
    watch_latest,
)
from tests.metadata_servers import AwsImds  # noqa: E402

pytestmark = pytest.mark.e2e


def test_the_optimizer_offload_config_the_planner_emits_trains(moto, reference, tmp_path):
    """Issue 13 #3: with offload_optimizer: cpu the rendered ds_config had no optimizer block while the trainer
    passed torch.optim.AdamW, and DeepSpeed refused it (ZeRORuntimeException "You are using ZeRO-Offload with
    a client provided optimizer"). Now the config names AdamW, DeepSpeed builds its CPU Adam, and the job trains
    to the end on 2 ranks."""
    rendered, _ = render_for(
        moto, new_bucket(moto), nodes=1, group="tf-e2e-offload", offload_optimizer="cpu"
    )
    assert json.loads(rendered.parts["ds_config.json"])["optimizer"]["type"] == "AdamW"
    node = Node(tmp_path / "node", rendered, moto.url)
    node.fetch()
    log = tmp_path / "offload.log"
    proc = node.launch(log)
    try:
        assert proc.wait(400) == 0, log.read_text()[-4000:]  # the first run builds DeepSpeed's CPU Adam (JIT)
    finally:
        kill_group(proc)
    result = node.final()
    assert result["step"] == STEPS and math.isfinite(result["loss"])
    assert "trainfleet-train: optimizer DeepSpeedCPUAdam" in log.read_text()
    # It learns like the uninterrupted run (same data and lr; DeepSpeed's AdamW betas and weight decay differ).
    assert result["loss"] < 2 * reference["loss"]


def test_spot_notice_then_fresh_node_finishes_identical_to_an_uninterrupted_run(moto, reference, tmp_path):
    bucket = new_bucket(moto)
    rendered, prefix = render_for(moto, bucket, nodes=1, group="tf-e2e-cpu")

    # Node A: agent + trainer; periodic checkpoints reach the bucket; then a spot notice.
    a = Node(tmp_path / "node-a", rendered, moto.url)
    a.fetch()
    with AwsImds(slow_s=2.0) as imds:
        agent = Proc(a.agent_command("--metadata-url", imds.url, "--poll-s", "0.2", "--scan-s", "0.1"), a.env)
        log_a = tmp_path / "node-a.log"
        proc = a.launch(log_a)
        try:
            agent.wait_event("durable", timeout=120)  # a periodic checkpoint made it to the bucket
            wait_for(lambda: re.search(r"step (\d+)/", log_a.read_text()), 60, "training progress")
            before = latest_in(moto, bucket, prefix)
            seen = watch_latest(moto, bucket, prefix)
            imds.notice("terminate", in_s=120)
            noticed_at = time.time()
            assert proc.wait(60) == 0, log_a.read_text()[-4000:]  # checkpointed at a step boundary, exit 0
            durable = agent.wait_event("notice_durable", timeout=60)
            assert agent.wait(30) == 0
        finally:
            kill_group(proc)
            agent.kill()
    stopped = int(re.search(r"stopping at step (\d+) after its checkpoint", log_a.read_text()).group(1))
    assert 0 < stopped < STEPS, "the notice must land mid-training"
    assert not (a.run_dir / "DONE").exists()
    latest = latest_in(moto, bucket, prefix)
    steps_lost = stopped - int(latest.removeprefix("step-"))
    assert steps_lost == 0, f"the bucket's latest is {latest}, the trainer stopped at {stopped}"
    notice_to_durable = durable["notice_to_durable_s"]
    assert notice_to_durable < 120, "AWS gives 120 s from the notice"
    assert durable["step"] == stopped
    # Measured here too, from outside: the notice was posted -> LATEST names the notice's checkpoint.
    seen.set()
    durable_seen_at = next(t for t, value in seen.changes if value == latest)
    measured = durable_seen_at - noticed_at
    assert latest != before and 0 < measured < 120

    # Node B: empty disks; the boot script's restore step brings the bucket's latest, then launch.
    b = Node(tmp_path / "node-b", rendered, moto.url)
    b.fetch()
    assert not list(b.ckpt_dir.glob("step-*"))
    r = b.boot_step("NODE_RANK=0; restore")
    assert r.returncode == 0, r.stderr
    assert (b.ckpt_dir / latest / "COMPLETE").is_file(), r.stderr
    log_b = tmp_path / "node-b.log"
    proc = b.launch(log_b)
    try:
        assert proc.wait(170) == 0, log_b.read_text()[-4000:]
    finally:
        kill_group(proc)
    assert f"resumed from {latest}" in log_b.read_text()
    resumed = b.final()
    assert resumed["step"] == reference["step"] == STEPS
    assert resumed["weights_sha256"] == reference["weights_sha256"]
    assert resumed["loss"] == reference["loss"]
    assert (b.run_dir / "DONE").read_text().strip() == str(STEPS)
    print(
        f"\ne2e spot notice: stopped at step {stopped}, bucket LATEST {latest}, steps lost {steps_lost}, "
        f"notice-to-durable {notice_to_durable:.2f}s (agent) / {measured:.2f}s (seen in S3 by the test), "
        f"final step {resumed['step']}, "
        f"loss {resumed['loss']:.6f} = reference"
    )


def test_bf16_checkpoint_parts_go_to_their_own_nodes_and_two_fresh_nodes_finish_identical(
    moto, reference_bf16, tmp_path
):
    """bf16, the product's default precision, on two nodes of one CPU rank each: DeepSpeed names the ZeRO-2
    optimizer shards `bf16_zero_pp_rank_<r>_mp_rank_00_optim_states.pt` (engine.py `_get_zero_ckpt_prefix`). A spot
    notice stops the job; each node's agent uploads its own part (rank 0's shard and the model states from node 0,
    rank 1's shard from node 1) and node 0 commits. Two fresh nodes restore through the boot script: each fetches
    its own shard and the model states, never the other rank's shard, and the job ends with the weights and loss of
    the uninterrupted bf16 run. With one node the agent never tells shards apart (its part is every file), so two."""
    bucket = new_bucket(moto)
    rendered, prefix = render_for(
        moto, bucket, nodes=2, group="tf-e2e-bf16", precision="bf16", steps=BF16_STEPS
    )
    ds = json.loads(rendered.parts["ds_config.json"])
    assert ds["bf16"] == {"enabled": True} and ds["zero_optimization"]["stage"] == 2

    def two_nodes(name: str) -> list[Node]:
        nodes = []
        for r in range(2):
            n = Node(tmp_path / f"{name}{r}", rendered, moto.url, {"TRAINFLEET_SLOTS": "1"}, slots=1, world=2)
            n.hostfile.write_text("127.0.0.1 slots=1\n127.0.0.2 slots=1\n")  # what the boot script writes
            n.fetch()
            nodes.append(n)
        return nodes

    def launch(nodes: list[Node], name: str) -> list:
        return [n.launch(tmp_path / f"{name}{r}.log", node_rank=r) for r, n in enumerate(nodes)]

    def log_of(name: str, r: int = 0) -> str:
        return (tmp_path / f"{name}{r}.log").read_text()

    # Nodes a0 and a1: agent + trainer; a spot notice to both once training is under way.
    started = time.time()
    a = two_nodes("a")
    imds, agents, procs = [], [], []
    try:
        for n in a:
            imds.append(AwsImds(slow_s=2.0).start())
            command = n.agent_command("--metadata-url", imds[-1].url, "--poll-s", "0.2", "--scan-s", "0.1")
            agents.append(Proc(command, n.env))
        procs = launch(a, "a")
        step_file = a[0].run_dir / "step"
        wait_for(lambda: step_file.is_file() and int(step_file.read_text() or 0) >= 2, 150, "training progress")
        # Node 0's notice first: its request stops both ranks (train.py agrees on any rank's). Node 1's agent
        # sees its own notice only as its rank is exiting, and signals it then. CPython puts a Python signal
        # handler back to the default when the interpreter finalizes, so that late SIGTERM killed the exiting
        # rank (-15, the launch 241) once in CI; train.py now ignores the stop signals once it has stopped.
        imds[0].notice("terminate", in_s=120)
        wait_for(lambda: "stopping at step" in log_of("a", 1), 60, "node 1's rank stopping on node 0's request")
        imds[1].notice("terminate", in_s=120)
        for r, p in enumerate(procs):
            assert p.wait(60) == 0, log_of("a", r)[-4000:]  # checkpointed at a step boundary, exit 0
        durable = [agent.wait_event("notice_durable", timeout=60) for agent in agents]
        assert [agent.wait(30) for agent in agents] == [0, 0]
    finally:
        for p in procs:
            kill_group(p)
        for agent in agents:
            agent.kill()
        for m in imds:
            m.stop()
    stopped = int(re.search(r"stopping at step (\d+) after its checkpoint", log_of("a")).group(1))
    assert 0 < stopped < BF16_STEPS, "the notice must land mid-training"
    latest = latest_in(moto, bucket, prefix)
    assert latest == f"step-{stopped:08d}" and [d["step"] for d in durable] == [stopped, stopped]

    # What each node saved and its agent uploaded: its own rank's bf16 shard, the model states on node 0 only.
    for r, n in enumerate(a):
        assert_holds_its_own_part(n, latest, r, 2, model_states=r == 0)
        assert own_files(n, latest) == [f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt"] + (
            ["mp_rank_00_model_states.pt"] if r == 0 else []
        )
    listing = s3(moto).list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/{latest}/")
    keys = sorted(o["Key"].removeprefix(f"{prefix}/{latest}/") for o in listing["Contents"])
    shards = [k for k in keys if "zero_pp_rank_" in k]
    assert shards == [
        "node-0/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "node-1/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ], keys
    manifest = json.loads(
        s3(moto).get_object(Bucket=bucket, Key=f"{prefix}/{latest}/MANIFEST.json")["Body"].read()
    )
    assert manifest["nodes"] == 2 and [p["node"] for p in manifest["parts"]] == [0, 1]

    # Nodes b0 and b1: empty disks; the boot script's restore step brings each its part of the bucket's latest.
    a_done = time.time()
    b = two_nodes("b")
    for r, n in enumerate(b):
        assert not list(n.ckpt_dir.glob("step-*"))
        res = n.boot_step(f"NODE_RANK={r}; restore")
        assert res.returncode == 0, res.stderr
        assert f"restored for node rank {r} of 2" in res.stderr, res.stderr
        restored = [json.loads(x) for x in res.stderr.splitlines() if x.startswith('{"ts"') and '"restored"' in x]
        assert (restored[0]["node"], restored[0]["files"], restored[0]["fetched_files"]) == (r, 2, 2), restored
        assert (n.ckpt_dir / latest / "COMPLETE").is_file()
        # its own shard and the model states every rank loads, never the other rank's shard
        assert_holds_its_own_part(n, latest, r, 2)
    procs = launch(b, "b")
    try:
        for r, p in enumerate(procs):
            assert p.wait(170) == 0, log_of("b", r)[-4000:]
    finally:
        for p in procs:
            kill_group(p)
    assert f"resumed from {latest}" in log_of("b")
    resumed = b[0].final()
    assert resumed["step"] == reference_bf16["step"] == BF16_STEPS
    assert resumed["weights_sha256"] == reference_bf16["weights_sha256"]
    assert resumed["loss"] == reference_bf16["loss"]
    print(
        f"\ne2e bf16: 2 nodes stopped by a notice at step {stopped}, bucket shards {shards}; two fresh nodes "
        f"restored their own parts and finished at step {resumed['step']}, loss {resumed['loss']:.6f} = the "
        f"uninterrupted bf16 run's, same weights (nodes a {a_done - started:.0f}s, "
        f"nodes b {time.time() - a_done:.0f}s)"
    )


STEP_S = 0.2  # slow enough that the relaunched job is still training when the notice comes


def test_three_nodes_relaunch_after_a_lost_peer_then_checkpoint_a_notice_and_a_fresh_set_finishes_identical(
    moto, reference3, tmp_path
):
    """Three nodes (one rank each) run the rendered boot script and agent (peers -> restore -> launch), through
    what a fleet meets in one job:

    1. A VM vanishes without notice and the group replaces it: the survivors' boot scripts notice, relaunch from
       the bucket's latest checkpoint with the new membership, and the replacement restores its part and joins.
    2. A spot notice reaches every node: the trainer checkpoints at a step boundary, every node's agent uploads
       its own part (nothing is gathered to one node), node rank 0 commits the step.
    3. The capacity comes back as three fresh VMs with empty disks: each restores only its own part, training
       ends identical to the uninterrupted three-rank run, and the group is scaled to zero."""
    bucket = new_bucket(moto)
    group = Group(moto, "tf-e2e-mn-" + uuid.uuid4().hex[:6], nodes=3)
    rendered, prefix = render_for(moto, bucket, nodes=3, group=group.name, step_seconds=STEP_S)
    (id0, ip0), (id1, ip1), (id2, ip2) = group.in_rank_order()
    nodes: dict[str, BootedNode] = {}
    try:
        nodes["a"] = BootedNode(tmp_path / "a", rendered, moto.url, id0, ip0)  # node rank 0
        nodes["b"] = BootedNode(tmp_path / "b", rendered, moto.url, id1, ip1)
        nodes["c"] = BootedNode(tmp_path / "c", rendered, moto.url, id2, ip2)
        a, b, c = nodes["a"], nodes["b"], nodes["c"]
        a.agent.wait_event("durable", timeout=180)  # every node's part in the bucket, rank 0 committed
        durable_before = latest_in(moto, bucket, prefix)
        wait_for(lambda: "step 10/" in a.log.read_text(), 90, "training progress on node a")

        # 1. Node b's VM vanishes; the group launches a replacement at another address.
        b.lose()
        group.replace(id1)
        lost_at = time.time()
        progress_at_loss = int((a.node.run_dir / "step").read_text())
        ((id3, ip3),) = [(i, ip) for i, ip in group.in_rank_order() if i not in (id0, id1, id2)]
        assert ip3 not in (ip0, ip1, ip2)
        nodes["d"] = BootedNode(tmp_path / "d", rendered, moto.url, id3, ip3)
        d = nodes["d"]
        job = {"a": a, "c": c, "d": d}
        rank = {ip: r for r, (_, ip) in enumerate(group.in_rank_order())}

        def resumes(n: BootedNode) -> list[str]:
            return re.findall(r"resumed from (step-\d+)", n.log.read_text())

        wait_for(lambda: all(resumes(n) for n in job.values()), 240, "nodes a, c and d to launch together")
        relaunched_at = time.time()
        resumed_step = int(resumes(a)[0].removeprefix("step-"))
        ahead = max(resumed_step, progress_at_loss) + 2  # a step only the relaunched job can have finished
        wait_for(lambda: int((a.node.run_dir / "step").read_text()) >= ahead, 90, "training after the relaunch")

        # 2. A spot notice reaches every node of the relaunched job.
        for n in job.values():
            n.imds.notice("terminate", in_s=120)
        noticed_at = time.time()
        durable = {name: n.agent.wait_event("notice_durable", timeout=110) for name, n in job.items()}
        committed_at = time.time()
    finally:
        for n in nodes.values():
            n.stop()

    # The relaunch: every node of the new membership resumed from the same durable step, none lost.
    a_log = a.log.read_text()
    assert re.search(r"membership changed|relaunching", a_log), a_log[-3000:]
    for n in (c, d):
        assert resumes(a)[:1] == resumes(n)[:1], "same step"
    assert resumed_step >= int(durable_before.removeprefix("step-"))
    redone = progress_at_loss - resumed_step  # a VM lost without notice: steps since the last durable one
    assert 0 <= redone <= progress_at_loss

    # The notice: its checkpoint is the bucket's latest, each node uploaded its own part once, rank 0 committed.
    stopped = int(re.findall(r"stopping at step (\d+) after its checkpoint", a_log)[-1])
    latest = latest_in(moto, bucket, prefix)
    assert latest == f"step-{stopped:08d}", "the notice checkpoint is the bucket's latest: no step lost"
    assert stopped >= ahead, "the notice came to the relaunched job"
    parts = {
        name: [e for e in n.agent.events if e.get("event") == "part_durable" and e.get("step") == stopped]
        for name, n in job.items()
    }
    assert sorted(rank.values()) == [0, 1, 2]
    assert [[p["node"] for p in parts[name]] for name in job] == [[rank[n.ip]] for n in job.values()], (
        "each its own part, once"
    )
    assert all(e["step"] == stopped for e in durable.values())
    for n in job.values():  # what each saved: its own rank's files only
        assert_holds_its_own_part(n.node, latest, rank[n.ip], 3, model_states=rank[n.ip] == 0)
    manifest = json.loads(
        s3(moto).get_object(Bucket=bucket, Key=f"{prefix}/{latest}/MANIFEST.json")["Body"].read()
    )
    assert manifest["nodes"] == 3 and [p["node"] for p in manifest["parts"]] == [0, 1, 2]

    # 3. The spot capacity comes back: three new instances, empty disks.
    for iid in (id0, id2, id3):
        group.replace(iid)
    fresh = [(i, ip) for i, ip in group.in_rank_order() if i not in (id0, id1, id2, id3)]
    assert len(fresh) == 3
    nodes = {}
    try:
        for i, (iid, ip) in enumerate(fresh):
            nodes[f"f{i}"] = BootedNode(tmp_path / f"f{i}", rendered, moto.url, iid, ip)
        for n in nodes.values():
            assert n.boot.wait(240) == 0, n.log.read_text()[-4000:]
    finally:
        for n in nodes.values():
            n.stop()
    for r, n in enumerate(nodes.values()):
        log = n.log.read_text()
        assert f"resumed from {latest}" in log
        # restored: its own ZeRO shard and the model states every rank loads (DeepSpeed's ZeRO-2 files), no other
        restored = [json.loads(x) for x in log.splitlines() if x.startswith('{"ts"') and '"restored"' in x]
        assert (restored[0]["node"], restored[0]["files"], restored[0]["fetched_files"]) == (r, 2, 2), restored
        assert re.search(rf"restored for node rank {r}", log), log[-3000:]
    final = nodes["f0"].node.final()
    assert final["step"] == reference3["step"] == STEPS
    assert final["weights_sha256"] == reference3["weights_sha256"]
    assert final["loss"] == reference3["loss"]
    assert (nodes["f2"].node.run_dir / "DONE").read_text().strip() == str(STEPS)
    assert latest_in(moto, bucket, prefix) == f"step-{STEPS:08d}", "final checkpoint durable before scaling down"
    assert group.desired() == 0, "the fleet scaled itself to zero"
    print(
        f"\ne2e 3 nodes: node {ip1} lost at step {progress_at_loss} (no notice), replacement {ip3} joined, all "
        f"resumed from step {resumed_step} ({redone} steps redone, no durable step lost) "
        f"{relaunched_at - lost_at:.0f}s after the loss; a spot notice stopped them at step {stopped}, parts of "
        f"{[p[0]['bytes'] for p in parts.values()]} B uploaded by their own nodes, committed "
        f"{committed_at - noticed_at:.1f}s after the notice; three fresh nodes resumed from {latest} and finished "
        f"identical to the uninterrupted 3-rank run; group scaled to 0"
    )
