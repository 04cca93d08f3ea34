"""The end-to-end harness: "nodes" on this machine that run what `render_user_data` produced for an AWS fleet.

The env file, the fetch script (which installs the agent and the example trainer from the bucket, sha256-pinned),
the agent unit's command line, the boot script and the DeepSpeed launch script run as a node runs them, against
moto's S3, EC2 and Auto Scaling; paths are moved from /opt, /etc and /var/lib into a temp folder per node and
nothing else is changed. Used by tests/test_e2e_deepspeed.py, tests/test_e2e_elastic.py and
benchmarks/elastic_recovery.py; the uninterrupted reference runs are fixtures (registered by tests/conftest.py),
run once per test session whichever worker asks first.
"""

from __future__ import annotations

import json
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

from infra.config import StackConfig
from infra.userdata import render_user_data
from tests.agent_support import Proc, aws_job_order
from tests.deepspeed_runs import CPU_RANKS, VENV_BIN, master_port
from tests.metadata_servers import AwsImds
from tests.session_results import once_per_session
from tests.token_data import TINY_MODEL_ARGS, upload_dataset

STEPS = 60
# If pytest itself is killed (a timeout), the boot scripts and agents of the multi-node test get SIGTERM:
# the boot script stops its trainer (its SIGTERM path) and exits, the agent exits. No orphans left looping.
ORPHAN_GUARD = ["setpriv", "--pdeathsig", "TERM"] if shutil.which("setpriv") else []
FETCHED = ("trainfleet_agent.pyz", "train.py", "trainfleet_model.py", "trainfleet_tokens.py", "trainfleet-boot.sh",
           "trainfleet-resize.py")  # fmt: skip


def e2e_config(
    master_port: int,
    nodes: int = 1,
    elastic: dict | None = None,
    step_seconds: float = 0.1,
    args: tuple[str, ...] = (),
    precision: str = "fp32",
    steps: int = STEPS,
    **deepspeed,
) -> StackConfig:
    """The stack every end-to-end node runs: `precision` is the job's (the ds_config's bf16/fp16 blocks follow it,
    infra/userdata.py `ds_config`), `steps` the example trainer's --steps."""
    return StackConfig.from_sections(
        {
            "job": {"name": "e2e", "params": "1M", "tokens": "1M", "precision": precision},
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
                "args": ["--steps", str(steps), "--step-seconds", str(step_seconds), *TINY_MODEL_ARGS, *args],
                "master_port": master_port,
            },
        }
    )


def s3(moto):
    return moto.client("s3")


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
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            **CPU_RANKS,  # CPU ranks for GPUs, talking over loopback only
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
        """What a node does before its first launch: the fetch script (node files from the bucket), then the boot
        script's token data step (the agent copies the job's data prefix to the node's data folder)."""
        r = self.run([sys.executable, str(self.home / "trainfleet-fetch.py")])
        assert r.returncode == 0, r.stderr
        assert all((self.home / name).is_file() for name in FETCHED), r.stderr
        r = self.boot_step("fetch_data")
        assert r.returncode == 0 and (self.state / "data" / "index.json").is_file(), r.stderr

    def launch(self, log: Path, node_rank: int = 0) -> subprocess.Popen:
        """trainfleet-launch.sh as the boot script runs it: this node's ranks of the hostfile's job, node rank 0 at
        127.0.0.1 the rendezvous."""
        fh = open(log, "w")  # noqa: SIM115 - closed with the process
        return subprocess.Popen(
            [str(self.home / "trainfleet-launch.sh"), str(self.hostfile), str(node_rank), "127.0.0.1"],
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


def render_for(moto, bucket: str, nodes: int, group: str, **settings):
    """The fleet's node files for a job of its own (its own master port), the assets uploaded as the Pulumi
    component does; returns (rendered, the job's prefix in the bucket)."""
    config = e2e_config(master_port=master_port(), nodes=nodes, **settings)
    rendered = render_user_data("e2e", config, config.fleets[0], bucket=bucket, group=group)
    for key, text in rendered.assets.items():  # what the Pulumi component uploads before nodes boot
        s3(moto).put_object(Bucket=bucket, Key=key, Body=text.encode())
    env = rendered.parts["trainfleet.env"]
    upload_dataset(
        s3(moto), bucket, env.split("TRAINFLEET_DATA_PREFIX=")[1].split("\n")[0]
    )  # the user's upload
    prefix = env.split("TRAINFLEET_PREFIX=")[1].split("\n")[0]
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


def uninterrupted_run(moto, tmp: Path, ranks: int, **settings) -> dict:
    """The uninterrupted run: `ranks` ranks on one node, same stack (`settings`: e2e_config's), never stopped."""
    rendered, _ = render_for(moto, new_bucket(moto), nodes=1, group="tf-e2e-ref", **settings)
    node = Node(tmp / "node", rendered, moto.url, slots=ranks)
    node.fetch()
    proc = node.launch(tmp / "reference.log")
    try:
        assert proc.wait(170) == 0, (tmp / "reference.log").read_text()[-4000:]
    finally:
        kill_group(proc)
    result = node.final()
    assert result["step"] == settings.get("steps", STEPS)
    return result


@pytest.fixture(scope="session")
def reference(moto, tmp_path_factory) -> dict:
    """The uninterrupted two-rank run the one-node tests end identical to."""
    return once_per_session(tmp_path_factory, "e2e-reference-2", lambda tmp: uninterrupted_run(moto, tmp, ranks=2))


@pytest.fixture(scope="session")
def reference3(moto, tmp_path_factory) -> dict:
    """The world size of the three-node tests (one rank per node): the same data, the same ZeRO partitioning."""
    return once_per_session(tmp_path_factory, "e2e-reference-3", lambda tmp: uninterrupted_run(moto, tmp, ranks=3))


BF16_STEPS = 30  # the bf16 case trains fewer steps than the fp32 ones: its run time is mostly DeepSpeed's start


@pytest.fixture(scope="session")
def reference_bf16(moto, tmp_path_factory) -> dict:
    """The uninterrupted two-rank run of the bf16 test (the product's default precision): BF16_STEPS steps, no
    pause between steps (the pause only gives a test time to interrupt a run)."""
    return once_per_session(
        tmp_path_factory,
        "e2e-reference-bf16-2",
        lambda tmp: uninterrupted_run(moto, tmp, ranks=2, precision="bf16", steps=BF16_STEPS, step_seconds=0),
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
        """instance id -> private IP of running members, in rank order"""
        return dict(self.in_rank_order())

    def replace(self, instance_id: str) -> None:
        """The spot instance is gone; the group launches a replacement (new address)."""
        self.asg.terminate_instance_in_auto_scaling_group(
            InstanceId=instance_id, ShouldDecrementDesiredCapacity=False
        )

    def in_rank_order(self) -> list[tuple[str, str]]:
        """(instance id, IP) of the running members in the order the nodes rank them (aws_job_order)."""
        r = self.ec2.describe_instances(
            Filters=[
                {"Name": "tag:aws:autoscaling:groupName", "Values": [self.name]},
                {"Name": "instance-state-name", "Values": ["running", "pending"]},
            ]
        )
        records = aws_job_order([i for res in r["Reservations"] for i in res["Instances"]])
        return [(i["InstanceId"], i["PrivateIpAddress"]) for i in records]

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
                # 30 s on a real node. Each poll is an agent process (about 0.5 s of CPU: Python, boto3, an EC2
                # client) and a DescribeInstances; at 2 s, three nodes' polls were a third of a run's CPU.
                "TRAINFLEET_PEER_POLL_SECONDS": "10",
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
            [*ORPHAN_GUARD, *self.node.agent_command()], self.node.env  # the unit's polls (1 s metadata, 0.5 s scan)
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
