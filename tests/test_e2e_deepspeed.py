"""End to end on CPU: the rendered node files run a real DeepSpeed job (2 ranks, gloo), a spot notice from a
local IMDSv2 server interrupts it, the agent makes the checkpoint durable in moto's S3, and a fresh node
restored from the bucket finishes at the same step with the same weights and loss as an uninterrupted run.

Everything runs from what `render_user_data` produced for an AWS fleet: the env file, the fetch script (which
installs the agent and the example trainer from the bucket, sha256-pinned), the agent unit's command line,
the boot script's restore step and the DeepSpeed launch script. Paths are moved from /opt, /etc and /var/lib
into a temp folder per "node"; nothing else is changed. Needs the `e2e` extra (torch CPU build, deepspeed).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest

from tests.needs import need_module  # noqa: E402

need_module("torch", "pip install torch==2.13.0")
need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")

from infra.config import StackConfig  # noqa: E402
from infra.userdata import render_user_data  # noqa: E402
from tests.agent_support import Proc  # noqa: E402
from tests.metadata_servers import AwsImds  # noqa: E402
from tests.moto_server import MotoServer  # noqa: E402

pytestmark = pytest.mark.e2e

STEPS = 60
# If pytest itself is killed (a timeout), the boot scripts and agents of the multi-node test get SIGTERM:
# the boot script stops its trainer (its SIGTERM path) and exits, the agent exits. No orphans left looping.
ORPHAN_GUARD = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []
VENV_BIN = str(Path(sys.executable).parent)
FETCHED = ("trainfleet_agent.pyz", "train.py", "trainfleet-boot.sh", "trainfleet-resize.py")


def e2e_config(
    master_port: int,
    nodes: int = 1,
    elastic: dict | None = None,
    step_seconds: float = 0.1,
    args: tuple[str, ...] = (),
    **deepspeed,
) -> StackConfig:
    return StackConfig.from_sections(
        {
            "job": {"name": "e2e", "params": "1M", "tokens": "1M", "precision": "fp32"},
            "fleets": [
                {
                    "name": "cpu",
                    "cloud": "aws",
                    "region": "us-east-1",
                    "instance_type": "g5.12xlarge",
                    "nodes": nodes,
                }
            ],
            "deepspeed": {"zero_stage": 2, "micro_batch": 4, "grad_accum": 2, **deepspeed},
            "checkpoint": {"interval_minutes": 0.1, "keep_last": 2, **({"elastic": elastic} if elastic else {})},
            "launch": {
                "args": ["--steps", str(STEPS), "--step-seconds", str(step_seconds), *args],
                "master_port": master_port,
            },
        }
    )


@pytest.fixture(scope="module")
def moto():
    srv = MotoServer()
    yield srv
    srv.stop()


def s3(moto):
    return boto3.client(
        "s3",
        endpoint_url=moto.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def harness_ds_config(text: str, world: int) -> str:
    """The one change the harness makes to what a node gets: its CPU ranks stand in for the fleet's GPUs (4 per
    g5.12xlarge), so the fixed global batch is the plan's micro batch x accumulation x the harness's world size.
    (DeepSpeed refuses any other: tests/test_userdata_node.py, the global-batch test.)"""
    c = json.loads(text)
    c["train_batch_size"] = c["train_micro_batch_size_per_gpu"] * c["gradient_accumulation_steps"] * world
    return json.dumps(c, indent=2) + "\n"


class Node:
    """One "node": the rendered files laid out under `root` instead of /opt, /etc and /var/lib."""

    def __init__(
        self, root: Path, rendered, moto_url: str, env_overrides: dict | None = None, slots: int = 2, world: int = 0
    ):
        self.root = root
        self.home, self.etc, self.state = root / "opt", root / "etc", root / "state"
        self.rendered = rendered
        self.env = {
            "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
            "DS_ACCELERATOR": "cpu",
            "GLOO_SOCKET_IFNAME": "lo",  # ranks talk over loopback only
            "TRAINFLEET_ENV_FILE": str(self.etc / "trainfleet.env"),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": moto_url,
            "TRAINFLEET_PYTHON": sys.executable,
            "TRAINFLEET_AGENT_PYTHON": sys.executable,  # the agent venv's SDKs are this venv's (same pins)
        }
        for f in rendered.files:
            if f.part not in rendered.parts or f.path.startswith("/etc/systemd"):
                continue
            if f.part in FETCHED:
                continue  # fetched from the bucket by trainfleet-fetch.py, as on a real node
            dest = self.move(f.path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            text = self.move_text(rendered.parts[f.part])
            if f.part == "trainfleet.env":
                for key, value in (env_overrides or {}).items():
                    text, n = re.subn(rf"^{key}=.*$", f"{key}={value}", text, flags=re.M)
                    assert n == 1, key
            if f.part == "ds_config.json":
                text = harness_ds_config(text, world or slots)
            dest.write_text(text)
            dest.chmod(int(f.permissions, 8))
        self.env_values = dict(
            line.split("=", 1)
            for line in (self.etc / "trainfleet.env").read_text().splitlines()
            if "=" in line
        )
        (self.state / "run").mkdir(parents=True, exist_ok=True)
        self.hostfile = self.state / "run" / "hostfile"
        self.hostfile.write_text(f"localhost slots={slots}\n")

    def move_text(self, text: str) -> str:
        return (
            text.replace("/opt/trainfleet", str(self.home))
            .replace("/etc/trainfleet", str(self.etc))
            .replace("/var/lib/trainfleet", str(self.state))
        )

    def move(self, path: str) -> Path:
        return Path(self.move_text(path))

    def run(self, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **self.env}
        )

    def fetch(self) -> None:
        r = self.run([sys.executable, str(self.home / "trainfleet-fetch.py")])
        assert r.returncode == 0, r.stderr
        assert all((self.home / name).is_file() for name in FETCHED), r.stderr

    def launch(self, log: Path) -> subprocess.Popen:
        fh = open(log, "w")  # noqa: SIM115 - closed with the process
        return subprocess.Popen(
            [str(self.home / "trainfleet-launch.sh"), str(self.hostfile), "0", "127.0.0.1"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
        )

    def boot(self, log: Path) -> subprocess.Popen:
        """trainfleet-trainer.service's ExecStart: the boot script, in its own process group."""
        fh = open(log, "w")  # noqa: SIM115 - closed with the process
        return subprocess.Popen(
            [*ORPHAN_GUARD, str(self.home / "trainfleet-boot.sh")],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,
        )

    def agent_command(self, *extra: str) -> list[str]:
        """The agent unit's ExecStart with the env file's values, as systemd would expand it."""
        unit = self.rendered.parts["trainfleet-agent.service"]
        line = next(x for x in unit.splitlines() if x.startswith("ExecStart="))
        expanded = re.sub(
            r"\$\{(\w+)\}", lambda m: self.env_values[m.group(1)], line.removeprefix("ExecStart=")
        )
        argv = shlex.split(self.move_text(expanded))
        # the agent venv's python (its SDKs are this test venv's, at the same pins: tests/test_node_env.py)
        assert argv[0] == str(self.home / "agent-venv" / "bin" / "python") and argv[1].endswith(".pyz"), argv
        return [sys.executable, *argv[1:], *extra]

    def boot_step(self, function: str) -> subprocess.CompletedProcess:
        """Run one step of the rendered boot script (sourced, so main does not run)."""
        boot = self.home / "trainfleet-boot.sh"
        return self.run(["bash", "-c", f'set -euo pipefail; . "{boot}"; {function}'])

    @property
    def ckpt_dir(self) -> Path:
        return self.state / "checkpoints"

    @property
    def run_dir(self) -> Path:
        return self.state / "run"

    def final(self) -> dict:
        return json.loads((self.run_dir / "final.json").read_text())


def kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def wait_for(pred, timeout: float, what: str):
    end = time.time() + timeout
    while time.time() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def new_bucket(moto) -> str:
    bucket = "e2e-" + uuid.uuid4().hex[:10]
    s3(moto).create_bucket(Bucket=bucket)
    return bucket


def render_for(moto, bucket: str, nodes: int, group: str, port_offset: int, **settings):
    config = e2e_config(master_port=29600 + (os.getpid() + port_offset) % 300, nodes=nodes, **settings)
    rendered = render_user_data("e2e", config, config.fleets[0], bucket=bucket, group=group)
    for key, text in rendered.assets.items():  # what the Pulumi component uploads before nodes boot
        s3(moto).put_object(Bucket=bucket, Key=key, Body=text.encode())
    prefix = rendered.parts["trainfleet.env"].split("TRAINFLEET_PREFIX=")[1].split("\n")[0]
    return rendered, prefix


def latest_in(moto, bucket: str, prefix: str) -> str | None:
    try:
        return s3(moto).get_object(Bucket=bucket, Key=f"{prefix}/LATEST")["Body"].read().decode()
    except s3(moto).exceptions.NoSuchKey:
        return None


def watch_latest(moto, bucket: str, prefix: str):
    """Poll LATEST every 20 ms in a thread; `.changes` is [(time, value)], `.set()` stops it."""
    import threading

    stop = threading.Event()
    stop.changes = []

    def poll():
        last = None
        while not stop.is_set():
            value = latest_in(moto, bucket, prefix)
            if value != last:
                stop.changes.append((time.time(), value))
                last = value
            time.sleep(0.02)

    threading.Thread(target=poll, daemon=True).start()
    return stop


def uninterrupted_run(moto, tmp: Path, ranks: int, port_offset: int) -> dict:
    """The uninterrupted run: `ranks` ranks on one node, same stack, never stopped."""
    rendered, _ = render_for(moto, new_bucket(moto), nodes=1, group="tf-e2e-ref", port_offset=port_offset)
    node = Node(tmp / "node", rendered, moto.url, slots=ranks)
    node.fetch()
    proc = node.launch(tmp / "reference.log")
    try:
        assert proc.wait(170) == 0, (tmp / "reference.log").read_text()[-4000:]
    finally:
        kill_group(proc)
    result = node.final()
    assert result["step"] == STEPS
    return result


@pytest.fixture(scope="module")
def reference(moto, tmp_path_factory) -> dict:
    return uninterrupted_run(moto, tmp_path_factory.mktemp("reference"), ranks=2, port_offset=0)


@pytest.fixture(scope="module")
def reference3(moto, tmp_path_factory) -> dict:
    """The world size of the three-node tests (one rank per node): the same data, the same ZeRO partitioning."""
    return uninterrupted_run(moto, tmp_path_factory.mktemp("reference3"), ranks=3, port_offset=5)


def test_the_optimizer_offload_config_the_planner_emits_trains(moto, reference, tmp_path):
    """Issue 13 #3: with offload_optimizer: cpu the rendered ds_config had no optimizer block while the trainer
    passed torch.optim.AdamW, and DeepSpeed refused it (ZeRORuntimeException "You are using ZeRO-Offload with
    a client provided optimizer"). Now the config names AdamW, DeepSpeed builds its CPU Adam, and the job trains
    to the end on 2 ranks."""
    rendered, _ = render_for(
        moto, new_bucket(moto), nodes=1, group="tf-e2e-offload", port_offset=7, offload_optimizer="cpu"
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
    rendered, prefix = render_for(moto, bucket, nodes=1, group="tf-e2e-cpu", port_offset=1)

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


class Group:
    """An auto scaling group in moto whose instances get 127.0.0.x addresses (a VPC on loopback)."""

    def __init__(self, moto, name: str, nodes: int = 3):
        kw = dict(
            endpoint_url=moto.url, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
        )
        self.ec2, self.asg, self.name = boto3.client("ec2", **kw), boto3.client("autoscaling", **kw), name
        vpc = self.ec2.create_vpc(CidrBlock="127.0.0.0/16")["Vpc"]["VpcId"]
        subnet = self.ec2.create_subnet(VpcId=vpc, CidrBlock="127.0.0.0/24", AvailabilityZone="us-east-1a")
        template = "lt-" + name
        self.ec2.create_launch_template(
            LaunchTemplateName=template,
            LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.12xlarge"},
        )
        self.asg.create_auto_scaling_group(
            AutoScalingGroupName=name,
            LaunchTemplate={"LaunchTemplateName": template},
            MinSize=0,
            MaxSize=nodes + 1,
            DesiredCapacity=nodes,
            VPCZoneIdentifier=subnet["Subnet"]["SubnetId"],
        )

    def members(self) -> dict[str, str]:
        """instance id -> private IP of running members"""
        r = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag:aws:autoscaling:groupName", "Values": [self.name]},
                {"Name": "instance-state-name", "Values": ["running", "pending"]},
            ]
        )
        return {i["InstanceId"]: i["PrivateIpAddress"] for res in r["Reservations"] for i in res["Instances"]}

    def replace(self, instance_id: str) -> None:
        """The spot instance is gone; the group launches a replacement (new address)."""
        self.asg.terminate_instance_in_auto_scaling_group(
            InstanceId=instance_id, ShouldDecrementDesiredCapacity=False
        )

    def desired(self) -> int:
        return self.asg.describe_auto_scaling_groups(AutoScalingGroupNames=[self.name])["AutoScalingGroups"][
            0
        ]["DesiredCapacity"]


class BootedNode:
    """A node running both units: the agent (watch) and the boot script, with its own IMDSv2 server."""

    def __init__(self, root: Path, rendered, moto_url: str, instance_id: str, ip: str, nodes: int = 3):
        self.node = Node(
            root,
            rendered,
            moto_url,
            env_overrides={
                "TRAINFLEET_SLOTS": "1",
                "TRAINFLEET_PEER_POLL_SECONDS": "2",
                "TRAINFLEET_STOP_GRACE_SECONDS": "20",
                "TRAINFLEET_COMMIT_WAIT_SECONDS": "20",
            },
            slots=1,
            world=nodes,  # one rank per node
        )
        self.ip = ip
        self.imds = AwsImds(slow_s=2.0).start()
        self.imds.values.update({"local-ipv4": ip, "instance-id": instance_id})
        self.node.env["TRAINFLEET_METADATA_URL"] = self.imds.url
        self.node.fetch()
        self.agent = Proc(
            [*ORPHAN_GUARD, *self.node.agent_command("--poll-s", "0.2", "--scan-s", "0.1")], self.node.env
        )
        self.log = root / "boot.log"
        self.boot = self.node.boot(self.log)

    def lose(self) -> None:
        """The VM vanishes: every process of the node is killed at once, no checkpoint. The launcher runs in
        its own session (setsid), so its whole tree is collected first, not just the boot script's group."""
        import psutil

        try:
            tree = psutil.Process(self.boot.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        kill_group(self.boot)
        for p in tree:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(tree, timeout=10)
        self.agent.kill()

    def stop(self) -> None:
        self.lose()
        self.imds.stop()


def by_address(members: dict[str, str]) -> list[tuple[str, str]]:
    """(instance id, IP) in node-rank order: all spot, launched together, so by IP (PROTOCOL.md `peers`)."""
    return sorted(members.items(), key=lambda kv: tuple(map(int, kv[1].split("."))))


def own_files(node: Node, step: str) -> list[str]:
    """The checkpoint files on a node's disk for `step`, relative to the step folder."""
    root = node.ckpt_dir / step
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != "COMPLETE")


def assert_holds_its_own_part(node: Node, step: str, rank: int, ranks: int, model_states: bool = True) -> None:
    """Issue 13 #1: a node holds only its own rank's ZeRO shard, never the others'; after a restore also the model
    states every rank loads (which only data-parallel rank 0 saves)."""
    files = own_files(node, step)
    assert any(f.endswith("mp_rank_00_model_states.pt") for f in files) is model_states, files
    shards = [f for f in files if "zero_pp_rank_" in f]
    assert shards and all(f"zero_pp_rank_{rank}_" in f for f in shards), (rank, files)
    assert not any(f"zero_pp_rank_{r}_" in f for f in files for r in range(ranks) if r != rank)


def test_spot_notice_on_three_nodes_each_uploads_its_part_and_a_fresh_set_finishes_identical(
    moto, reference3, tmp_path
):
    """Three nodes (one rank each) run the rendered boot script and agent. A spot notice reaches every node: the
    trainer checkpoints at a step boundary, every node's agent uploads its own part (nothing is gathered to one
    node), node rank 0 commits the step. Three fresh nodes restore only their own part and finish identical to
    the uninterrupted three-rank run."""
    bucket = new_bucket(moto)
    group = Group(moto, "tf-e2e-sn-" + uuid.uuid4().hex[:6], nodes=3)
    rendered, prefix = render_for(moto, bucket, nodes=3, group=group.name, port_offset=3)
    first = by_address(group.members())
    nodes: dict[str, BootedNode] = {}
    try:
        for i, (iid, ip) in enumerate(first):
            nodes[f"n{i}"] = BootedNode(tmp_path / f"n{i}", rendered, moto.url, iid, ip)
        n0 = nodes["n0"]
        n0.agent.wait_event("durable", timeout=180)  # a periodic checkpoint: every part in, rank 0 committed
        wait_for(lambda: "step 10/" in n0.log.read_text(), 90, "training progress on node 0")
        for n in nodes.values():
            n.imds.notice("terminate", in_s=120)
        noticed_at = time.time()
        durable = {name: n.agent.wait_event("notice_durable", timeout=110) for name, n in nodes.items()}
        committed_at = time.time()
    finally:
        for n in nodes.values():
            n.stop()
    stopped = int(re.findall(r"stopping at step (\d+) after its checkpoint", n0.log.read_text())[-1])
    latest = latest_in(moto, bucket, prefix)
    assert latest == f"step-{stopped:08d}", "the notice checkpoint is the bucket's latest: no step lost"
    parts = {
        name: [e for e in n.agent.events if e.get("event") == "part_durable" and e.get("step") == stopped]
        for name, n in nodes.items()
    }
    assert [[p["node"] for p in found] for found in parts.values()] == [[0], [1], [2]], "each its own part, once"
    assert all(d["step"] == stopped for d in durable.values())
    for rank, name in enumerate(nodes):  # what each saved: its own rank's files only
        assert_holds_its_own_part(nodes[name].node, latest, rank, 3, model_states=rank == 0)
    manifest = json.loads(
        s3(moto).get_object(Bucket=bucket, Key=f"{prefix}/{latest}/MANIFEST.json")["Body"].read()
    )
    assert manifest["nodes"] == 3 and [p["node"] for p in manifest["parts"]] == [0, 1, 2]

    # The spot capacity comes back: three new instances, empty disks.
    for iid, _ in first:
        group.replace(iid)
    fresh = by_address({i: ip for i, ip in group.members().items() if i not in dict(first)})
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
    for rank, n in enumerate(nodes.values()):
        assert f"resumed from {latest}" in n.log.read_text()
        # restored: its own ZeRO shard and the model states every rank loads (DeepSpeed's ZeRO-2 files), no other
        restored = [json.loads(x) for x in n.log.read_text().splitlines() if x.startswith('{"ts"') and '"restored"' in x]
        assert (restored[0]["node"], restored[0]["files"], restored[0]["fetched_files"]) == (rank, 2, 2), restored
        assert re.search(rf"restored for node rank {rank}", n.log.read_text()), n.log.read_text()[-3000:]
    final = nodes["f0"].node.final()
    assert final["step"] == reference3["step"] == STEPS
    assert final["weights_sha256"] == reference3["weights_sha256"]
    assert final["loss"] == reference3["loss"]
    print(
        f"\ne2e 3-node spot notice: stopped at step {stopped}; parts of {[p[0]['bytes'] for p in parts.values()]} B "
        f"uploaded by their own nodes; committed {committed_at - noticed_at:.1f}s after the notice; "
        f"three fresh nodes resumed from {latest} and finished identical to the uninterrupted 3-rank run"
    )


def test_lost_peer_and_replacement_relaunch_from_the_bucket_with_no_manual_step(moto, reference3, tmp_path):
    """Three nodes (one rank each) run the rendered boot script: peers -> restore -> launch. One VM vanishes;
    the group replaces it; the survivors' boot scripts notice, relaunch from the bucket's latest checkpoint with
    the new membership, the replacement restores its part and joins, training ends identical to the reference
    and the group is scaled to zero."""
    bucket = new_bucket(moto)
    group = Group(moto, "tf-e2e-mn-" + uuid.uuid4().hex[:6], nodes=3)
    rendered, prefix = render_for(moto, bucket, nodes=3, group=group.name, port_offset=2)
    (id0, ip0), (id1, ip1), (id2, ip2) = by_address(group.members())
    nodes = {}
    try:
        nodes["a"] = BootedNode(tmp_path / "a", rendered, moto.url, id0, ip0)  # node rank 0 (lowest address)
        nodes["b"] = BootedNode(tmp_path / "b", rendered, moto.url, id1, ip1)
        nodes["c"] = BootedNode(tmp_path / "c", rendered, moto.url, id2, ip2)
        a, b, c = nodes["a"], nodes["b"], nodes["c"]
        a.agent.wait_event("durable", timeout=180)  # every node's part in the bucket, rank 0 committed
        durable_before = latest_in(moto, bucket, prefix)
        wait_for(lambda: "step 10/" in a.log.read_text(), 90, "training progress on node a")

        b.lose()
        group.replace(id1)
        lost_at = time.time()
        progress_at_loss = int((a.node.run_dir / "step").read_text())
        ((id3, ip3),) = [(i, ip) for i, ip in group.members().items() if i not in (id0, id1, id2)]
        assert ip3 not in (ip0, ip1, ip2)
        nodes["d"] = BootedNode(tmp_path / "d", rendered, moto.url, id3, ip3)
        d = nodes["d"]

        for n in (a, c, d):
            assert n.boot.wait(240) == 0, n.log.read_text()[-4000:]
        relaunched_at = time.time()
    finally:
        for n in nodes.values():
            n.stop()
    a_log = a.log.read_text()
    assert re.search(r"membership changed|relaunching", a_log), a_log[-3000:]
    resumed = re.findall(r"resumed from (step-\d+)", a_log)
    for n in (c, d):
        assert resumed[-1:] == re.findall(r"resumed from (step-\d+)", n.log.read_text())[-1:], "same step"
    resumed_step = int(resumed[-1].removeprefix("step-"))
    assert resumed_step >= int(durable_before.removeprefix("step-"))
    redone = progress_at_loss - resumed_step  # a VM lost without notice: steps since the last durable one
    assert 0 <= redone <= progress_at_loss
    final = a.node.final()
    assert final["step"] == reference3["step"] == STEPS
    assert final["weights_sha256"] == reference3["weights_sha256"]
    assert final["loss"] == reference3["loss"]
    assert (d.node.run_dir / "DONE").read_text().strip() == str(STEPS)
    assert latest_in(moto, bucket, prefix) == f"step-{STEPS:08d}", (
        "final checkpoint durable before scaling down"
    )
    assert group.desired() == 0, "the fleet scaled itself to zero"
    print(
        f"\ne2e membership change: node {ip1} lost at step {progress_at_loss} (no notice), replacement {ip3} "
        f"joined, all resumed from {resumed[-1]} ({redone} steps redone, no durable step lost), "
        f"finished at step {final['step']} identical to the reference, "
        f"{relaunched_at - lost_at:.0f}s from the loss to the end of training; group scaled to 0"
    )
