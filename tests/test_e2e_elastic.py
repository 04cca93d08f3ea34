"""End to end on CPU, issue 15: elastic recovery. Three "nodes" (one DeepSpeed rank each) run the rendered boot
script and agent against moto's EC2, Auto Scaling and S3. One node is lost and the group does not replace it:
after the stack's wait_for_replacement_s the two survivors convert the bucket's latest checkpoint to DeepSpeed's
universal format (DeepSpeed's own ds_to_universal), resume on two nodes with 3 micro-batches of accumulation
instead of 2 (train_batch_size 24 throughout), and when capacity returns they convert again and grow back to three.
The job ends at the uninterrupted run's step with its loss, within float reduction-order noise.

Needs the `e2e` extra (torch CPU build, deepspeed).
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from tests.conftest import run_trainfleet
from tests.needs import need_module

need_module("torch", "pip install torch==2.13.0")
need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")

from tests.e2e_nodes import (  # noqa: E402
    STEPS,
    BootedNode,
    Group,
    latest_in,
    new_bucket,
    render_for,
    s3,
    wait_for,
)
from tests.token_data import tiny_dataset  # noqa: E402

pytestmark = pytest.mark.e2e

WAIT_S = 8  # checkpoint.elastic.wait_for_replacement_s
# The shrunk run sums the same 24 samples per step in another order (2 ranks x 3 micro-batches, not 3 x 2), so
# its float32 results may differ from the uninterrupted run's in the last bits (3.3e-07 relative seen here). A
# planted bug moves it by far more: drawing samples by rank instead of by global index (train.py before this
# issue) ended a 2 -> 1 rank resume 15% off the uninterrupted loss at step 10 (0.0669 vs 0.0582).
LOSS_RTOL = 1e-4
LAUNCH_LINE = re.compile(r"trainfleet-train: tp 1 pp 1 dp (\d+) accumulation (\d+)")


def launches(log: str) -> list[tuple[int, int]]:
    """(data-parallel ranks, accumulation) of every launch in a node's boot log."""
    return [(int(dp), int(acc)) for dp, acc in LAUNCH_LINE.findall(log)]


def test_lost_node_continues_on_two_after_the_wait_then_grows_back_to_three(moto, reference3, tmp_path):
    bucket = new_bucket(moto)
    group = Group(moto, "tf-e2e-el-" + uuid.uuid4().hex[:6], nodes=3)
    rendered, prefix = render_for(
        moto,
        bucket,
        nodes=3,
        group=group.name,
        elastic={"min_nodes": 2, "wait_for_replacement_s": WAIT_S},
        step_seconds=0.6,
    )
    env = rendered.parts["trainfleet.env"]
    assert "TRAINFLEET_ELASTIC_MIN_NODES=2\n" in env and "TRAINFLEET_ELASTIC_SIZES=2\n" in env
    (id0, ip0), (id1, ip1), (id2, ip2) = group.in_rank_order()
    nodes: dict[str, BootedNode] = {}
    try:
        nodes["a"] = BootedNode(tmp_path / "a", rendered, moto.url, id0, ip0)  # node rank 0
        nodes["b"] = BootedNode(tmp_path / "b", rendered, moto.url, id1, ip1)
        nodes["c"] = BootedNode(tmp_path / "c", rendered, moto.url, id2, ip2)
        a, b, c = nodes["a"], nodes["b"], nodes["c"]
        a.agent.wait_event("durable", timeout=180)  # a 3-node checkpoint committed
        wait_for(lambda: "step 10/" in a.log.read_text(), 90, "training progress on node a")

        # Node b's spot VM is reclaimed and the pool is dry: the group shrinks and launches nothing.
        b.lose()
        group.asg.terminate_instance_in_auto_scaling_group(InstanceId=id1, ShouldDecrementDesiredCapacity=True)
        lost_at = time.time()
        assert set(group.members()) == {id0, id2}

        # The survivors wait WAIT_S, convert and train on two nodes; a checkpoint saved by 2 nodes is committed.
        wait_for(lambda: re.search(r"continuing on 2 of 3 node\(s\)", a.log.read_text()), 240, "the shrink")
        two = wait_for(
            lambda: [e for e in a.agent.events if e.get("event") == "durable" and e.get("nodes") == 2],
            240,
            "a checkpoint committed by the two survivors",
        )[0]
        shrunk_at = time.time()
        assert latest_in(moto, bucket, prefix) == f"step-{two['step']:08d}"

        # Capacity returns: the group is asked for three again and launches a new instance.
        group.asg.set_desired_capacity(AutoScalingGroupName=group.name, DesiredCapacity=3)
        ((id3, ip3),) = wait_for(
            lambda: [(i, ip) for i, ip in group.members().items() if i not in (id0, id1, id2)], 30, "a new instance"
        )
        nodes["d"] = BootedNode(tmp_path / "d", rendered, moto.url, id3, ip3)
        d = nodes["d"]
        for n in (a, c, d):
            assert n.boot.wait(360) == 0, n.log.read_text()[-4000:]
        finished_at = time.time()
    finally:
        for n in nodes.values():
            n.stop()

    a_log, c_log, d_log = a.log.read_text(), c.log.read_text(), d.log.read_text()
    waited = int(re.search(r"no replacement in (\d+)s: continuing on 2 of 3", a_log).group(1))
    assert waited >= WAIT_S, "the survivors waited the stack's wait_for_replacement_s before shrinking"
    # The global batch never changed: 3 ranks x 2 micro-batches, 2 x 3 while shrunk, back to 3 x 2 (micro 4).
    seen = launches(a_log)
    assert (2, 3) in seen and seen[-1] == (3, 2), seen
    assert all(dp * acc * 4 == 24 for dp, acc in seen + launches(c_log) + launches(d_log)), seen
    # Each conversion used DeepSpeed's universal checkpoint: both directions, on the nodes that resumed.
    conversions = [json.loads(x.split(": ", 2)[2]) for x in a_log.splitlines() if "converted the checkpoint" in x]
    assert [(e["from_nodes"], e["to_nodes"]) for e in conversions] == [(3, 2), (2, 3)], conversions
    assert all(e["bytes"] > 0 and e["universal"] for e in conversions)
    assert any("converted the checkpoint for 3 node(s)" in line for line in d_log.splitlines())
    # The job ends where the uninterrupted run ended, at its loss within float reduction-order noise.
    final = a.node.final()
    assert final["step"] == reference3["step"] == STEPS
    assert final["loss"] == pytest.approx(reference3["loss"], rel=LOSS_RTOL)
    assert (d.node.run_dir / "DONE").read_text().strip() == str(STEPS)
    assert latest_in(moto, bucket, prefix) == f"step-{STEPS:08d}"
    manifest = json.loads(s3(moto).get_object(Bucket=bucket, Key=f"{prefix}/step-{STEPS:08d}/MANIFEST.json")["Body"].read())
    assert manifest["nodes"] == 3, "the last checkpoint was saved by the grown-back job"
    # Nothing written outside a destination: no conversion or restore leftovers, no DeepSpeed `latest` files.
    for n in (a, c, d):
        names = {p.name for p in n.node.ckpt_dir.iterdir()}
        assert all(re.fullmatch(r"step-\d{8}", x) for x in names - {".tmp"}), names
    # In the bucket, the fleet's prefix and the token data the test uploaded, which no node wrote to.
    keys = [o["Key"] for page in s3(moto).get_paginator("list_objects_v2").paginate(Bucket=bucket) for o in page.get("Contents", [])]
    data = {k for k in keys if k.startswith(a.node.env_values["TRAINFLEET_DATA_PREFIX"] + "/")}
    assert sorted(k.rsplit("/", 1)[1] for k in data) == sorted(p.name for p in tiny_dataset().iterdir())
    for k in data:
        assert s3(moto).get_object(Bucket=bucket, Key=k)["Body"].read() == (tiny_dataset() / k.rsplit("/", 1)[1]).read_bytes()
    outside = [k for k in keys if k not in data and not k.startswith(prefix + "/")]
    assert keys and not outside, outside[:5]
    # The run's story, as a user reads it back from the bucket: `trainfleet events`.
    listed = run_trainfleet(
        "events", "--cloud", "aws", "--bucket", bucket, "--prefix", prefix, "--json", "--limit", "0",
        env={"AWS_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
             "AWS_REGION": "us-east-1"},
    )  # fmt: skip
    assert listed.code == 0, listed.stderr
    events = json.loads(listed.stdout)
    story = [(e["node"], e["event"], e.get("reason"), e.get("from_nodes"), e.get("nodes")) for e in events]
    mine = [x[1:] for x in story if x[0] == ip0]
    shrink = mine.index(("membership", "shrink", None, 2))
    assert mine[shrink + 1 : shrink + 3] == [("conversion", None, 3, None), ("resume", None, 3, 2)], mine
    # Capacity back: the survivor whose peer poll sees the third member first records the change and stops the
    # job (every rank stops with it); the other finds its trainer stopped and relaunches. Either may be node a.
    shrunk = story.index((ip0, "membership", "shrink", None, 2))
    grow = next(i for i, x in enumerate(story) if i > shrunk and x[0] in (ip0, ip2) and x[1:3] == ("membership", "changed"))
    after = [x[1:] for x in story[grow:] if x[0] == ip0]
    assert ("conversion", None, 2, None) in after and after[-1] == ("resume", None, 2, 3), story
    assert any(x[0] == ip3 and x[1] == "resume" and x[4] == 3 for x in story), story
    print(
        f"\ne2e elastic: node {ip1} lost at {lost_at:.0f}; survivors waited {waited}s, converted "
        f"{conversions[0]['bytes']} B in {conversions[0]['seconds']}s and committed step {two['step']} on 2 nodes "
        f"{shrunk_at - lost_at:.0f}s after the loss; grew back to 3 (conversion {conversions[1]['seconds']}s); "
        f"final loss {final['loss']:.8f} vs uninterrupted {reference3['loss']:.8f} "
        f"({abs(final['loss'] / reference3['loss'] - 1):.1e} relative); {finished_at - lost_at:.0f}s from loss to end"
    )
