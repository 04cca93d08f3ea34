"""The on-node agent on AWS, for real on loopback: IMDSv2 server (tests/metadata_servers.py), moto's S3/EC2/ASG
server, the agent and a fake trainer as separate processes.

Notice-to-durable is measured from the moment the IMDS starts answering spot/instance-action to the moment an
independent S3 client (boto3) sees LATEST point at the new step with its manifest in place. Run
``pytest tests/test_agent_aws.py -k "notice or faults" -s`` to see the figures.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid

import pytest

from tests.agent_support import agent, aws_job_order, make_step, run_agent, trainer
from tests.metadata_servers import AwsImds

AWS_WINDOW_S = 120.0


@pytest.fixture
def env(moto):
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto.url,
    }


def client(moto, service="s3"):
    return moto.client(service)


@pytest.fixture
def bucket(moto):
    name = "ckpt-" + uuid.uuid4().hex[:12]
    client(moto).create_bucket(Bucket=name)
    return name


@pytest.fixture
def imds():
    srv = AwsImds(slow_s=3.0).start()
    yield srv
    srv.stop()


def latest(s3, bucket, prefix="run1"):
    try:
        return s3.get_object(Bucket=bucket, Key=f"{prefix}/LATEST")["Body"].read().decode()
    except s3.exceptions.NoSuchKey:
        return None


def restore(bucket, dest, env, prefix="run1"):
    """`trainfleet_agent.py restore` into `dest`, as the boot script runs it."""
    return run_agent(
        "restore", "--cloud", "aws", "--bucket", bucket, "--prefix", prefix, "--dest", str(dest), env=env
    )


def sync(bucket, ckpt, env, prefix="run1"):
    """`trainfleet_agent.py sync`: one upload of the newest complete checkpoint in `ckpt`."""
    return run_agent(
        "sync", "--cloud", "aws", "--bucket", bucket, "--prefix", prefix, "--ckpt-dir", str(ckpt), env=env
    )


def bucket_steps(s3, bucket, prefix="run1"):
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])]
    return sorted({k.split("/")[1] for k in keys if k.split("/")[1].startswith("step-")}), keys


def watch_args(bucket, tmp_path, imds, *extra, poll_s="0.5"):
    return (
        "watch",
        "--cloud",
        "aws",
        "--bucket",
        bucket,
        "--prefix",
        "run1",
        "--ckpt-dir",
        str(tmp_path / "ckpt"),
        "--run-dir",
        str(tmp_path / "run"),
        "--metadata-url",
        imds.url,
        "--poll-s",
        poll_s,
        "--scan-s",
        "0.2",
        "--http-timeout-s",
        "1",
        *extra,
    )


def exit_step_of(tr) -> int | None:
    for line in list(tr.stdout_lines):
        if line.startswith("{"):
            e = json.loads(line)
            if e["trainer"] == "exit-on-notice":
                return e["step"]
    return None


def wait_notice_checkpoint_durable(s3, bucket, tr, deadline_s: float) -> tuple[str, float]:
    """Poll S3 until LATEST names the checkpoint the trainer wrote on the notice, with its manifest."""
    end = time.time() + deadline_s
    while time.time() < end:
        target = exit_step_of(tr)
        cur = latest(s3, bucket)
        if target is not None and cur == f"step-{target:08d}":
            s3.head_object(Bucket=bucket, Key=f"run1/{cur}/MANIFEST.json")
            return cur, time.time()
        time.sleep(0.02)
    raise AssertionError(
        f"the notice checkpoint was not durable within {deadline_s}s (LATEST={latest(s3, bucket)})"
    )


def notice_run(moto, env, bucket, imds, tmp_path, faults=(), poll_s="0.5", rebalance=False):
    s3 = client(moto)
    tr = trainer(
        tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "8", "--ckpt-every", "20"
    )
    ag = agent(*watch_args(bucket, tmp_path, imds, "--keep-last", "3", poll_s=poll_s), env=env)
    try:
        first = ag.wait_event("durable", timeout=30)  # a periodic checkpoint went up: the agent is watching
        if rebalance:  # a rebalance recommendation: checkpoint now (SIGUSR1), keep training
            imds.rebalance_recommendation()
            ag.wait_event("trainer_signalled", timeout=10, pred=lambda e: e["signal"] == "SIGUSR1")
            n = ag.wait_event("notice", timeout=1)
            assert n["kind"] == "aws-rebalance" and n["hard"] is False
            time.sleep(0.5)
            assert tr.alive() and ag.alive()
        if faults:
            imds.inject(list(faults))
            end = time.time() + 60
            while imds.faults and time.time() < end:
                assert ag.alive(), "\n".join(ag.stderr_lines)
                time.sleep(0.1)
            assert not imds.faults, "the agent stopped polling during faults"
            time.sleep(1.0)
            assert ag.alive()
        t_notice = time.time()
        imds.notice("terminate", in_s=AWS_WINDOW_S)
        step, t_durable = wait_notice_checkpoint_durable(s3, bucket, tr, AWS_WINDOW_S)
        assert tr.wait(30) == 0, "the trainer must checkpoint and exit 0 on SIGTERM"
        assert ag.wait(30) == 0, "\n".join(ag.stderr_lines)
        exit_step = exit_step_of(tr)
        return {
            "agent": ag,
            "first": first,
            "step": step,
            "exit_step": exit_step,
            "seconds": t_durable - t_notice,
        }
    finally:
        ag.kill()
        tr.kill()


def test_spot_notice_mid_run_makes_the_checkpoint_durable_within_the_window(
    moto, env, bucket, imds, tmp_path
):
    r = notice_run(moto, env, bucket, imds, tmp_path, rebalance=True)
    ag = r["agent"]
    sig = ag.wait_event("trainer_signalled", timeout=1, pred=lambda e: e["signal"] == "SIGTERM")
    assert sig
    # The checkpoint the trainer wrote on the notice is the one made durable: no completed step lost.
    assert r["step"] == f"step-{r['exit_step']:08d}"
    assert r["seconds"] < AWS_WINDOW_S
    reported = ag.wait_event("notice_durable", timeout=1)
    print(
        f"\nAWS notice-to-durable: {r['seconds']:.2f}s measured by an S3 client "
        f"(agent-reported {reported['notice_to_durable_s']}s), step {r['step']}, steps lost 0"
    )
    # A fresh node restores exactly that checkpoint, byte for byte.
    dest = tmp_path / "fresh"
    res = restore(bucket, dest, env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(r["exit_step"])
    src = tmp_path / "ckpt" / r["step"]
    for rel in ("state.json", "shards/model.bin"):
        assert (dest / r["step"] / rel).read_bytes() == (src / rel).read_bytes()
    # COMPLETE last, naming the part it holds and that it was restored (so it is never uploaded again)
    marker = json.loads((dest / r["step"] / "COMPLETE").read_text())
    assert marker == {"step": int(r["exit_step"]), "node_rank": 0, "nodes": 1, "restored": True, "whole": False}
    # keep_last=3 held while periodic checkpoints and the notice checkpoint went up
    steps, _ = bucket_steps(client(moto), bucket)
    assert len(steps) <= 3 and r["step"] in steps


def test_faults_never_crash_the_watcher_and_the_notice_is_still_caught(moto, env, bucket, imds, tmp_path):
    faults = ["expire", "500", "timeout", "hang", "503"]
    r = notice_run(moto, env, bucket, imds, tmp_path, faults=faults, poll_s="0.2")
    ag = r["agent"]
    assert imds.faults_served == faults
    expired = ag.named("imds_token_expired")
    assert len(expired) >= 1
    errors = ag.named("metadata_error")
    assert len(errors) >= 3, errors
    assert any("timed out" in e["error"] or "Timeout" in e["error"] for e in errors), errors
    assert any("503" in e["error"] for e in errors) and any("500" in e["error"] for e in errors)
    assert ag.named("metadata_recovered")
    # the "expire" fault is served on whichever notice poll comes first (the Spot instance-action or the
    # rebalance recommendation, by where the agent's poll cycle stood when the faults were queued) and that
    # very request is a 401, which the agent retries with a fresh token (another GET may meet the stale
    # token too, so that one is looked for among the expiries)
    notice = [e["path"] for e in expired if e["path"] in ("spot/instance-action", "events/recommendations/rebalance")]
    assert notice, expired
    assert imds.count("/" + notice[0], 401) >= 1
    assert r["step"] == f"step-{r['exit_step']:08d}"
    assert r["seconds"] < AWS_WINDOW_S
    print(f"\nAWS notice-to-durable after faults {faults}: {r['seconds']:.2f}s")


def test_kill9_during_upload_leaves_the_previous_checkpoint_restorable(moto, env, bucket, imds, tmp_path):
    s3 = client(moto)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    make_step(ckpt, 10, {"state.json": b'{"step": 10}', "model.bin": 1 << 20})
    big_env = {**env, "TRAINFLEET_PART_SIZE": str(5 << 20)}
    ag = agent(*watch_args(bucket, tmp_path, imds), env=big_env)
    try:
        ag.wait_event("durable", timeout=30, pred=lambda e: e["step"] == 10)
        assert latest(s3, bucket) == "step-00000010"
        make_step(ckpt, 20, {"a.bin": 1 << 20, "b.bin": 1 << 20, "z-big.bin": 24 << 20})
        ag.wait_event("upload_start", timeout=30, pred=lambda e: e["step"] == 20)
        end = time.time() + 30
        while time.time() < end:
            keys = [
                o["Key"]
                for o in s3.list_objects_v2(Bucket=bucket, Prefix="run1/step-00000020/").get("Contents", [])
            ]
            if keys:
                break
            time.sleep(0.005)
        ag.kill()  # SIGKILL mid-upload
    finally:
        ag.kill()
    steps, keys = bucket_steps(s3, bucket)
    assert "run1/step-00000020/MANIFEST.json" not in keys, "killed too late: the upload had finished"
    assert any(k.startswith("run1/step-00000020/") for k in keys), (
        "killed too early: nothing was uploaded yet"
    )
    assert latest(s3, bucket) == "step-00000010"
    res = restore(bucket, tmp_path / "r", env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "10"
    assert (tmp_path / "r" / "step-00000010" / "model.bin").read_bytes() == (
        ckpt / "step-00000010" / "model.bin"
    ).read_bytes()
    assert not (tmp_path / "r" / "step-00000020").exists()
    # The next agent run finishes the job (multipart for the big file) and moves LATEST forward.
    res = sync(bucket, ckpt, big_env)
    assert res.returncode == 0, res.stderr
    assert latest(s3, bucket) == "step-00000020"
    res = restore(bucket, tmp_path / "r", env)
    assert res.stdout.strip() == "20"
    got = hashlib.sha256((tmp_path / "r" / "step-00000020" / "z-big.bin").read_bytes()).hexdigest()
    assert got == hashlib.sha256((ckpt / "step-00000020" / "z-big.bin").read_bytes()).hexdigest()


def test_torn_or_corrupt_latest_is_never_restored(moto, env, bucket, tmp_path):
    s3 = client(moto)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for step in (1, 2, 3):
        make_step(ckpt, step, {"model.bin": 4096 * step, "meta/info.txt": f"step {step}".encode()})
        res = sync(bucket, ckpt, env)
        assert res.returncode == 0, res.stderr
    assert latest(s3, bucket) == "step-00000003"
    # step 3 loses an object; step 2 has an object of the wrong size: restore falls back to step 1
    s3.delete_object(Bucket=bucket, Key="run1/step-00000003/node-0/model.bin")
    s3.put_object(Bucket=bucket, Key="run1/step-00000002/node-0/model.bin", Body=b"short")
    res = restore(bucket, tmp_path / "r", env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "1"
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["step-00000001"]
    # same size, different bytes: the checksum check while downloading (CRC64NVME against the manifest) rejects it
    s3.put_object(Bucket=bucket, Key="run1/step-00000001/node-0/model.bin", Body=b"x" * 4096)
    res = restore(bucket, tmp_path / "r2", env)
    assert res.returncode == 0 and res.stdout.strip() == "", (res.stdout, res.stderr)
    assert "checksum mismatch" in res.stderr


def group_terminates(hooks, imds, group: str, instance: str, **hook) -> None:
    """The group terminates `instance`: its lifecycle hook holds it (the stand-in), and IMDS says so."""
    hooks.terminating(group, "trainfleet-checkpoint", instance, **hook)
    imds.values["autoscaling/target-lifecycle-state"] = "Terminated"


def test_a_termination_by_the_group_itself_is_a_notice_and_the_hook_is_completed(moto, env, bucket, imds, tmp_path):
    """Issue 13 #10: scale-in, rebalancing and health replacements arrive with no spot notice. The fleet's
    termination lifecycle hook holds the instance in Terminating:Wait and IMDS says so
    (autoscaling/target-lifecycle-state: Terminated); the agent checkpoints as for a notice, then completes the
    lifecycle action so the group does not wait out the hook's timeout with the GPUs billing.

    The hook's heartbeat timeout is the notice's deadline (here 20 s, against a 6 s notice window): training
    is not stopped at once. The trainer is asked for a checkpoint and goes on; only when the window is all
    that is left is it asked to checkpoint and exit (issue 13 #3)."""
    from tests.fake_autoscaling_hooks import FakeAutoScalingHooks

    s3 = client(moto)
    hooks = FakeAutoScalingHooks().start()
    group, instance = "tf-prod-main", imds.values["instance-id"]
    # botocore's service-specific endpoint variable is named after the service id "Auto Scaling"
    # (https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html)
    env = {**env, "AWS_ENDPOINT_URL_AUTO_SCALING": hooks.url, "TRAINFLEET_GROUP": group}
    env["TRAINFLEET_ASG_HOOK_SECONDS"] = "20"  # the hook's heartbeat timeout (infra/aws/fleet.py: 600)
    imds.values["autoscaling/target-lifecycle-state"] = "InService"
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "2", "--ckpt-every", "20")
    ag = agent(*watch_args(bucket, tmp_path, imds, "--keep-last", "3", "--notice-window-s", "6"), env=env)
    try:
        ag.wait_event("durable", timeout=30)  # watching
        group_terminates(hooks, imds, group, instance)
        notice = ag.wait_event("notice", timeout=10, pred=lambda e: e["kind"] == "aws-asg-terminate")
        assert notice["hard"] is True and 14 < notice["deadline_in_s"] <= 20, notice
        # a checkpoint now, and training goes on: the SIGUSR1 comes first, a checkpoint newer than the
        # notice is made durable, and the trainer is still running after it
        after = lambda e: e["ts"] >= notice["ts"]  # noqa: E731
        first = ag.wait_event("trainer_signalled", timeout=10, pred=after)
        assert first["signal"] == "SIGUSR1", "a 20 s deadline with a 6 s window must not stop training at once"
        ag.wait_event("durable", timeout=20, pred=after)
        assert tr.alive() and ag.alive()
        exit_request = ag.wait_event("trainer_signalled", timeout=60, pred=lambda e: e["signal"] == "SIGTERM")
        assert exit_request["ts"] - notice["ts"] >= 20 - 6 - 1.5, "asked to exit before only the window was left"
        ag.wait_event("lifecycle_action_completed", timeout=60)
        assert tr.wait(30) == 0 and ag.wait(30) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        tr.kill()
        hooks.stop()
    durable = ag.named("notice_durable")
    assert durable and latest(s3, bucket) == f"step-{durable[0]['step']:08d}"
    (done,) = hooks.completed
    assert (done["AutoScalingGroupName"], done["LifecycleHookName"], done["InstanceId"]) == (
        group,
        "trainfleet-checkpoint",
        instance,
    )
    assert done["LifecycleActionResult"] == "CONTINUE"


def test_after_done_the_agent_releases_the_termination_scale_to_zero_brings(moto, env, bucket, imds, tmp_path):
    """Issue 29 #11: after DONE node 0 scales the group to zero, and the group's lifecycle hook holds every node in
    Terminating:Wait until its agent completes the action. The agent used to exit on DONE (systemd restarting it
    every 5 s to exit again), so no node ever completed it: each waited out the hook's 600 s, billed. The agent
    now stays after the final sync, releases the termination at once (nothing left to save) and exits 0."""
    from tests.fake_autoscaling_hooks import FakeAutoScalingHooks

    hooks = FakeAutoScalingHooks().start()
    group, instance = "tf-prod-main", imds.values["instance-id"]
    env = {**env, "AWS_ENDPOINT_URL_AUTO_SCALING": hooks.url, "TRAINFLEET_GROUP": group}
    imds.values["autoscaling/target-lifecycle-state"] = "InService"
    ag = agent(*watch_args(bucket, tmp_path, imds, "--keep-last", "2"), env=env)
    tr = None
    try:
        ag.wait_event("watch_start", timeout=60)
        tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--steps", "20", "--step-s", "0.02", "--blob-mb", "0.2")
        assert tr.wait(30) == 0
        done = ag.wait_event("training_done", timeout=30)
        assert ag.alive(), "the agent left before the group terminated the node"
        group_terminates(hooks, imds, group, instance)  # node 0's scale-to-zero
        ag.wait_event("lifecycle_action_completed", timeout=30)
        assert ag.wait(30) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        hooks.stop()
        if tr is not None:
            tr.kill()
    assert not [e for e in ag.named("trainer_signalled") if e["ts"] > done["ts"]], "the trainer is gone: no signal"
    assert latest(client(moto), bucket) == "step-00000020"
    (completed,) = hooks.completed
    assert (completed["InstanceId"], completed["LifecycleActionResult"]) == (instance, "CONTINUE")


def test_the_hook_is_kept_alive_while_a_checkpoint_longer_than_its_timeout_goes_up(moto, env, bucket, imds, tmp_path):
    """Issue 29 #11: the group's termination waits on the lifecycle hook for its heartbeat timeout (600 s), and at
    70B node 0's checkpoint can take longer than that to go up; at the timeout the group terminates the node
    mid-upload. While the notice checkpoint goes up the agent records heartbeats, each restarting the timeout, then
    completes the action. Here the hook's timeout is 6 s and the node's link to S3 carries 0.6 MB/s (a shaping
    proxy in front of moto), so the 6 MB checkpoint takes about 10 s: without the heartbeats the stand-in group
    ends the wait at 6 s and the completion is refused ("No active Lifecycle Action")."""
    from tests.fake_autoscaling_hooks import FakeAutoScalingHooks
    from tests.storage_auth_proxies import S3SlowWrites

    hooks = FakeAutoScalingHooks().start()
    link = S3SlowWrites(moto.url, 0.6e6).start()
    group, instance = "tf-prod-main", imds.values["instance-id"]
    env = {**env, "AWS_ENDPOINT_URL_AUTO_SCALING": hooks.url, "AWS_ENDPOINT_URL_S3": link.url,
           "TRAINFLEET_GROUP": group, "TRAINFLEET_ASG_HOOK_SECONDS": "6"}  # fmt: skip
    imds.values["autoscaling/target-lifecycle-state"] = "InService"
    # a 4 s window against the 6 s hook: no in-case checkpoint first, the exit is asked 2 s after the notice
    ag = agent(*watch_args(bucket, tmp_path, imds, "--keep-last", "2", "--notice-window-s", "4"), env=env)
    tr = None
    try:
        ag.wait_event("watch_start", timeout=60)
        tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "6")
        group_terminates(hooks, imds, group, instance, heartbeat_timeout_s=6)
        ag.wait_event("lifecycle_action_completed", timeout=90)
        assert ag.wait(30) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        link.stop()
        hooks.stop()
        if tr is not None:
            tr.kill()
    notice = ag.named("notice")[0]
    durable = ag.named("notice_durable")[0]
    assert durable["notice_to_durable_s"] > 6, "the checkpoint took longer than the hook's timeout"
    assert hooks.expired() == [], "the group ended the wait before the checkpoint was up"
    (completed,) = hooks.completed
    assert (completed["InstanceId"], completed["LifecycleActionResult"]) == (instance, "CONTINUE")
    beats = [float(h["at"]) for h in hooks.heartbeats]
    assert len(beats) >= 2 and all(h["InstanceId"] == instance for h in hooks.heartbeats), hooks.heartbeats
    assert latest(client(moto), bucket) == f"step-{durable['step']:08d}"
    assert link.written >= 6e6
    print(f"\nhook kept: notice to durable {durable['notice_to_durable_s']:.1f} s against a 6 s hook, "
          f"{len(beats)} heartbeats, the first {beats[0] - notice['ts']:.1f} s after the notice")


def periodic_run(env, bucket, imds, tmp_path, *trainer_args):
    """An 80-step fake training run (4 s) under an agent asking for a checkpoint every 0.36 s; the agent and the
    steps it made durable. The trainer starts once the agent is watching: on a loaded machine the agent's start
    alone could outlast a shorter run, and the cadence it is asked to keep would have nothing to act on."""
    ag = agent(*watch_args(bucket, tmp_path, imds, "--interval-minutes", "0.006", "--keep-last", "2"), env=env)
    tr = None
    try:
        ag.wait_event("watch_start", timeout=60)
        tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--steps", "80", "--step-s", "0.05", "--blob-mb", "0.2",
                     *trainer_args)  # fmt: skip
        assert tr.wait(30) == 0
        ag.wait_event("training_done", timeout=30)
        assert ag.alive(), "after DONE the agent keeps watching, for the termination it must release"
    finally:
        ag.kill()
        if tr is not None:
            tr.kill()
    return ag, [e["step"] for e in ag.named("durable")]


@pytest.mark.parametrize("node_rank, periodic", [("0", True), ("1", False)])
def test_only_node_rank_0_keeps_the_checkpoint_cadence(moto, env, bucket, imds, tmp_path, node_rank, periodic):
    """Issue 13 #5: every node's agent ran its own timer and the trainer's ranks honour any rank's request, so
    2 nodes wrote 14 checkpoints where 7 were planned. The boot script writes the node's rank to the run dir;
    only rank 0's agent asks for periodic checkpoints (the final one on DONE is every node's)."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "node-rank").write_text(f"{node_rank}\n")
    ag, durable = periodic_run(env, bucket, imds, tmp_path)
    assert ag.named("periodic_cadence")[0]["keeps_cadence"] is periodic
    assert (len(ag.named("periodic_checkpoint_request")) > 0) is periodic
    assert (len(durable) >= 3) if periodic else durable == [80], durable


def test_restore_with_nothing_in_the_bucket_is_fine(env, bucket, tmp_path):
    res = restore(bucket, tmp_path / "d", env, prefix="none")
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""
    assert "restore_nothing" in res.stderr


@pytest.mark.parametrize("mode", ["signals", "file"])
def test_periodic_checkpoints_keep_last_and_done(moto, env, bucket, imds, tmp_path, mode):
    s3 = client(moto)
    ag, durable = periodic_run(env, bucket, imds, tmp_path, *(["--no-signals"] if mode == "file" else []))
    assert len(durable) >= 3, durable  # periodic requests were honoured (the trainer never saves on its own)
    assert durable[-1] == 80
    assert ag.named("training_done")[0]["final_step"] == 80
    assert latest(s3, bucket) == "step-00000080"
    steps, _ = bucket_steps(s3, bucket)
    assert steps == [f"step-{s:08d}" for s in durable[-2:]]


def test_role_credentials_from_imds_and_multipart(moto, bucket, imds, tmp_path):
    env = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_REGION": "", "AWS_DEFAULT_REGION": ""}
    env.update({"AWS_ENDPOINT_URL": moto.url, "TRAINFLEET_PART_SIZE": str(5 << 20)})
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    make_step(ckpt, 7, {"big.bin": (12 << 20) + 123, "small.json": b"{}"})
    args = ("--cloud", "aws", "--bucket", bucket, "--prefix", "run1", "--metadata-url", imds.url)
    res = run_agent("sync", *args, "--ckpt-dir", str(ckpt), env=env)
    assert res.returncode == 0, res.stderr
    # botocore's credential chain found the instance role (its provider method "iam-role") through IMDSv2
    assert '"event":"aws_credentials","source":"iam-role"' in res.stderr
    assert imds.count("/api/token", 200) >= 1
    assert imds.count("/iam/security-credentials/trainfleet-node", 200) >= 1
    assert imds.count("/placement/region", 200) >= 1
    res = run_agent("restore", *args, "--dest", str(tmp_path / "r"), env=env)
    assert res.stdout.strip() == "7", res.stderr
    assert (tmp_path / "r/step-00000007/big.bin").read_bytes() == (
        ckpt / "step-00000007/big.bin"
    ).read_bytes()


def _asg(moto, name, n, min_size=None):
    """A group of `n` instances; their private IPs in the job's rank order (aws_job_order)."""
    ec2 = client(moto, "ec2")
    asg = client(moto, "autoscaling")
    image = "ami-12c6146b"  # one of moto's default AMIs (listing them all is slow)
    lt = "lt-" + uuid.uuid4().hex[:8]
    ec2.create_launch_template(
        LaunchTemplateName=lt, LaunchTemplateData={"ImageId": image, "InstanceType": "t3.micro"}
    )
    asg.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": lt, "Version": "$Latest"},
        MinSize=n if min_size is None else min_size,
        MaxSize=n + 2,
        DesiredCapacity=n,
        AvailabilityZones=["us-east-1a"],
    )
    ids = [
        i["InstanceId"]
        for i in asg.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"][0][
            "Instances"
        ]
    ]
    res = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    return [i["PrivateIpAddress"] for i in aws_job_order([i for r in res for i in r["Instances"]])]


def test_peer_discovery_gives_every_node_the_same_hostfile_and_distinct_ranks(moto, env, tmp_path):
    group = "fleet-" + uuid.uuid4().hex[:6]
    ips = _asg(moto, group, 3)
    other = _asg(moto, "other-" + uuid.uuid4().hex[:6], 2)
    assert len(set(ips)) == 3
    outs = []
    for i, ip in enumerate(ips):
        hf = tmp_path / f"hostfile-{i}"
        res = run_agent(
            "peers",
            "--cloud",
            "aws",
            "--group",
            group,
            "--self-ip",
            ip,
            "--slots",
            "8",
            "--hostfile",
            str(hf),
            env=env,
        )
        assert res.returncode == 0, res.stderr
        kv = dict(line.split("=", 1) for line in res.stdout.splitlines())
        outs.append((kv, hf.read_text()))
    ordered = ips  # rank order
    assert {o[1] for o in outs} == {"".join(f"{ip} slots=8\n" for ip in ordered)}
    assert sorted(int(o[0]["NODE_RANK"]) for o in outs) == [0, 1, 2]
    assert {o[0]["MASTER_ADDR"] for o in outs} == {ordered[0]}
    for kv, _ in outs:
        assert ordered[int(kv["NODE_RANK"])] == kv["SELF_ADDR"]
        assert kv["NNODES"] == "3"
    # a node that is not in the group is told so (exit 3), not given a rank
    res = run_agent("peers", "--cloud", "aws", "--group", group, "--self-ip", other[0], env=env)
    assert res.returncode == 3 and "NODE_RANK" not in res.stdout


def test_scale_to_zero_sets_the_group_to_zero(moto, env):
    """With SetDesiredCapacity, the one call the node role allows (infra/aws/iam.py); the program declares the
    group with MinSize 0, as here. The group's other settings stay as declared."""
    group = "fleet-" + uuid.uuid4().hex[:6]
    _asg(moto, group, 2, min_size=0)
    res = run_agent("scale-to-zero", "--cloud", "aws", "--group", group, env=env)
    assert res.returncode == 0, res.stderr
    g = client(moto, "autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[group])[
        "AutoScalingGroups"
    ][0]
    assert g["DesiredCapacity"] == 0 and g["MinSize"] == 0 and g["MaxSize"] == 4


def test_a_stuck_trainer_does_not_eat_the_window(moto, env, bucket, imds, tmp_path):
    """The trainer ignores SIGTERM and never checkpoints: the agent gives up waiting with time to spare and
    makes sure the newest complete checkpoint on disk is durable."""
    import subprocess
    import sys

    ckpt, run = tmp_path / "ckpt", tmp_path / "run"
    ckpt.mkdir()
    run.mkdir()
    make_step(ckpt, 5, {"model.bin": 1000})
    stuck = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)",
        ]
    )
    (run / "trainer.pid").write_text(str(stuck.pid))
    ag = agent(*watch_args(bucket, tmp_path, imds), env=env)
    try:
        ag.wait_event("durable", timeout=30, pred=lambda e: e["step"] == 5)
        make_step(ckpt, 6, {"model.bin": 2000})  # the newest complete checkpoint on disk
        t0 = time.time()
        imds.notice(in_s=8)  # an 8 s deadline, under the 120 s notice window: handled at once
        assert ag.wait(15) == 0
        assert time.time() - t0 < 8.0
    finally:
        ag.kill()
        stuck.kill()
        stuck.wait()
    assert latest(client(moto), bucket) == "step-00000006"
    assert ag.named("notice_durable")


def test_the_agent_zipapp_is_reproducible_and_runs_from_a_copy(env, bucket, tmp_path):
    """The artifact nodes get: the same bytes at every build (so its pinned sha256 means something), and it
    runs from wherever it is copied."""
    import shutil
    import subprocess
    import sys

    from infra.agent_artifact import build_zipapp
    from tests.agent_support import AGENT

    assert build_zipapp() == build_zipapp() == AGENT.read_bytes()
    pyz = tmp_path / "elsewhere" / "trainfleet_agent.pyz"
    pyz.parent.mkdir()
    shutil.copy(AGENT, pyz)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    make_step(ckpt, 3, {"m.bin": 100})

    def run(*a):
        return subprocess.run(
            [sys.executable, str(pyz), *a],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=60,
        )

    assert (
        run("sync", "--cloud", "aws", "--bucket", bucket, "--prefix", "z", "--ckpt-dir", str(ckpt)).returncode
        == 0
    )
    res = run("restore", "--cloud", "aws", "--bucket", bucket, "--prefix", "z", "--dest", str(tmp_path / "r"))
    assert res.returncode == 0 and res.stdout.strip() == "3", res.stderr


def test_sigterm_to_the_agent_is_handled_like_a_notice(moto, env, bucket, imds, tmp_path):
    """A shutdown without a metadata notice (systemd stops the agent): the trainer is asked to checkpoint and
    exit, the checkpoint is made durable, then the agent exits 0."""
    import signal

    s3 = client(moto)
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "1")
    ag = agent(*watch_args(bucket, tmp_path, imds), env=env)
    try:
        ag.wait_event("watch_start", timeout=10)
        time.sleep(0.5)
        os.kill(ag.p.pid, signal.SIGTERM)
        step, _t = wait_notice_checkpoint_durable(s3, bucket, tr, 30)
        assert tr.wait(10) == 0
        assert ag.wait(10) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        tr.kill()
    assert ag.wait_event("notice", timeout=1)["kind"] == "sigterm"
    assert step == f"step-{exit_step_of(tr):08d}"


def test_an_unreachable_metadata_service_does_not_stop_checkpoint_sync(moto, env, bucket, tmp_path):
    import socket

    # A bound socket that never listens refuses connections; holding it for the whole test keeps the port
    # from being handed to another server started on port 0 meanwhile.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        ckpt, run = tmp_path / "ckpt", tmp_path / "run"
        ckpt.mkdir()
        run.mkdir()
        args = ["watch", "--cloud", "aws", "--bucket", bucket, "--prefix", "run1", "--ckpt-dir", str(ckpt)]
        args += ["--run-dir", str(run), "--metadata-url", dead, "--poll-s", "0.2", "--scan-s", "0.2"]
        ag = agent(*args, env=env)
        try:
            ag.wait_event("metadata_error", timeout=10, pred=lambda e: "refused" in e["error"].lower())
            make_step(ckpt, 4, {"m.bin": 1000})
            ag.wait_event("durable", timeout=20, pred=lambda e: e["step"] == 4)
            # The notice poller keeps trying after the sync: wait for its third error (an event count,
            # not a time window, so a loaded machine can't fail it), then the agent must still be up.
            ag.wait_count("metadata_error", 3, timeout=30)
            assert ag.alive()
            (run / "DONE").write_text("4")
            ag.wait_event("training_done", timeout=20)
        finally:
            ag.kill()
        assert latest(client(moto), bucket) == "step-00000004"


def test_a_group_with_one_node_too_many_runs_on_exactly_nodes_and_the_extra_waits(moto, env, tmp_path):
    """Issue 13 #4: capacity rebalancing gives N+1 members for a while; launching with all of them changes the
    data-parallel size the ZeRO state was saved at and the job crash-loops. Every node picks the same NODES
    members; the one left over is a standby (exit 4), which the boot script treats as waiting."""
    group = "fleet-" + uuid.uuid4().hex[:6]
    ips = _asg(moto, group, 4)
    answers = {}
    for ip in ips:
        res = run_agent("peers", "--cloud", "aws", "--group", group, "--self-ip", ip, "--nodes", "3",
                        "--slots", "8", env=env)  # fmt: skip
        answers[ip] = res
    members = [ip for ip, r in answers.items() if r.returncode == 0]
    standby = [ip for ip, r in answers.items() if r.returncode == 4]
    assert len(members) == 3 and len(standby) == 1, {ip: (r.returncode, r.stderr[-300:]) for ip, r in answers.items()}
    assert "standby" in answers[standby[0]].stderr
    hostfiles = {r.stdout.split("HOSTS=", 1)[1].split("\n")[0] for ip, r in answers.items() if ip in members}
    assert members == ips[:3] and standby == ips[3:], "the first NODES in rank order train, the last waits"
    assert hostfiles == {",".join(members)}


def test_the_on_demand_base_holds_rank_0_and_the_longest_running_come_first():
    """Issue 13 #11: rank 0 was the lowest IP, usually a spot node. From DescribeInstances records (a Spot
    Instance carries instanceLifecycle "spot", an on-demand one none: API_Instance reference), worked by hand:
    the on-demand node first, then spot nodes by launch time, then IP."""
    from tests.agent_support import load_agent_module

    agent_module = load_agent_module()
    members = [
        ("10.0.0.5", True, "2026-11-24T10:00:00.000Z"),
        ("10.0.0.200", False, "2026-11-24T12:00:00.000Z"),  # the on-demand base, launched last
        ("10.0.0.9", True, "2026-11-24T09:00:00.000Z"),
        ("10.0.0.7", True, "2026-11-24T10:00:00.000Z"),
        ("10.0.0.5", True, "2026-11-24T10:00:00.000Z"),  # listed twice (paging overlap)
    ]
    assert [m[0] for m in agent_module.choose_members(members, 3)] == ["10.0.0.200", "10.0.0.9", "10.0.0.5"]
    assert [m[0] for m in agent_module.choose_members(members, 0)] == ["10.0.0.200", "10.0.0.9", "10.0.0.5", "10.0.0.7"]


# DescribeInstances as the EC2 API reference documents it
# (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html, its example response),
# in two pages joined by nextToken, as EC2 pages a long listing
# (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/Query-Requests.html#api-pagination).
DESCRIBE_INSTANCES_PAGES = {
    None: ("""<item><instanceId>i-1</instanceId><privateIpAddress>10.0.1.20</privateIpAddress>
          <launchTime>2026-11-24T09:00:00.000Z</launchTime><instanceLifecycle>spot</instanceLifecycle></item>""",
           "page-2"),
    "page-2": ("""<item><instanceId>i-2</instanceId><privateIpAddress>10.0.1.30</privateIpAddress>
          <launchTime>2026-11-24T11:00:00.000Z</launchTime></item>""", None),
}  # fmt: skip


def documented_ec2():
    """An EC2 endpoint answering DescribeInstances (SigV4-signed Query POST) from DESCRIBE_INSTANCES_PAGES; it
    records each request's parameters."""
    from http.server import BaseHTTPRequestHandler
    from urllib.parse import parse_qsl

    from tests.loopback import LoopbackServer

    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            params = dict(parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
            seen.append(params)
            signed = self.headers.get("Authorization", "").startswith("AWS4-HMAC-SHA256 ")
            if not signed or params.get("Action") != "DescribeInstances" or params.get("Filter.1.Value.1") == "bad":
                # https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html
                body = (
                    b"<Response><Errors><Error><Code>InvalidParameterValue</Code><Message>refused by the stand-in"
                    b"</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"
                )
                self.send_response(400)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            items, token = DESCRIBE_INSTANCES_PAGES[params.get("NextToken")]
            body = (
                '<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">'
                "<requestId>8f7724cf-496f-496e-8fe3-example</requestId><reservationSet><item>"
                f"<reservationId>r-1234567890abcdef0</reservationId><instancesSet>{items}</instancesSet></item>"
                "</reservationSet>" + (f"<nextToken>{token}</nextToken>" if token else "") + "</DescribeInstancesResponse>"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/xml;charset=UTF-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return LoopbackServer(Handler).start(), seen


def test_describe_instances_lifecycle_is_read_from_the_documented_response(env):
    """One Spot and one on-demand instance, on two pages: the agent (through boto3's paginator) reads both, asks
    for the group's running and pending instances only, and the on-demand one, launched later, holds rank 0."""
    ec2, seen = documented_ec2()
    try:
        res = run_agent("peers", "--cloud", "aws", "--group", "g", "--self-ip", "10.0.1.20", "--slots", "1",
                        env={**env, "AWS_ENDPOINT_URL_EC2": ec2.url})  # fmt: skip
    finally:
        ec2.stop()
    assert res.returncode == 0, res.stderr
    kv = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line and " " not in line)
    assert (kv["HOSTS"], kv["MASTER_ADDR"], kv["NODE_RANK"]) == ("10.0.1.30,10.0.1.20", "10.0.1.30", "1")
    assert [p.get("NextToken") for p in seen] == [None, "page-2"]
    filters = {(p[f"Filter.{i}.Name"], p[f"Filter.{i}.Value.1"], p.get(f"Filter.{i}.Value.2")) for p in seen[:1]
               for i in (1, 2)}  # fmt: skip
    assert filters == {("tag:aws:autoscaling:groupName", "g", None), ("instance-state-name", "running", "pending")}


def test_scale_to_zero_with_the_instance_role_and_the_region_from_imds(moto, imds, tmp_path):
    """On a node nothing names keys or a region: botocore's chain takes the instance role's credentials from
    IMDSv2 and the agent the region from IMDS placement/region."""
    group = "fleet-" + uuid.uuid4().hex[:6]
    _asg(moto, group, 1, min_size=0)
    nowhere = str(tmp_path / "no-such-file")
    res = run_agent(
        "scale-to-zero", "--cloud", "aws", "--group", group, "--metadata-url", imds.url,
        env={"AWS_ENDPOINT_URL": moto.url, "AWS_CONFIG_FILE": nowhere, "AWS_SHARED_CREDENTIALS_FILE": nowhere},
        unset=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
               "AWS_DEFAULT_REGION", "AWS_PROFILE"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert imds.count("/latest/meta-data/iam/security-credentials/trainfleet-node", 200) >= 1
    assert imds.count("/latest/meta-data/placement/region", 200) == 1
    g = client(moto, "autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[group])
    assert g["AutoScalingGroups"][0]["DesiredCapacity"] == 0


def test_control_plane_errors_are_one_line(env):
    """A refusal from the service ends the command with one line naming the call and the service's error."""
    ec2, _seen = documented_ec2()
    try:
        res = run_agent("peers", "--cloud", "aws", "--group", "bad", "--self-ip", "10.0.1.20",
                        env={**env, "AWS_ENDPOINT_URL_EC2": ec2.url})  # fmt: skip
    finally:
        ec2.stop()
    assert res.returncode == 1 and "Traceback" not in res.stderr
    plain = [line for line in res.stderr.splitlines() if not line.startswith("{")]
    assert plain == [
        "trainfleet_agent peers: CloudApiError: aws ec2 DescribeInstances (group bad): ClientError: An error "
        "occurred (InvalidParameterValue) when calling the DescribeInstances operation: refused by the stand-in"
    ], res.stderr
