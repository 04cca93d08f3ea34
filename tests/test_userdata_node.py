"""What the node gets, checked by running it: ds_config from the stack (and DeepSpeed's own config parser),
the Gaudi variant, the AWS fetch script against moto's S3 (environment credentials and the IMDSv2 role),
and the boot script's restore step keeping every node on the bucket's latest checkpoint."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest

from infra.config import StackConfig
from infra.stack_file import list_stack_files, read_stack_file
from infra.userdata import accelerator_of, ds_config, is_gaudi, render_user_data
from tests.agent_support import AGENT, make_step
from tests.conftest import STACKS
from tests.metadata_servers import AwsImds
from tests.needs import need_module


def stack(fleet: dict | None = None, **sections) -> StackConfig:
    base = {
        "job": {"name": "tj", "params": "1B", "tokens": "1B"},
        "fleets": [
            fleet
            or {
                "name": "ff",
                "cloud": "aws",
                "region": "us-east-1",
                "instance_type": "g5.12xlarge",
                "nodes": 2,
            }
        ],
    }
    return StackConfig.from_sections({**base, **sections})


@pytest.mark.parametrize(
    "deepspeed,precision,expect",
    [
        (
            {
                "zero_stage": 3,
                "offload_optimizer": "cpu",
                "offload_param": "nvme",
                "micro_batch": 2,
                "grad_accum": 16,
            },
            "bf16",
            {"stage": 3, "opt": "cpu", "param": "nvme", "micro": 2, "accum": 16, "bf16": True, "fp16": False},
        ),
        (
            {"zero_stage": 1, "micro_batch": 8, "grad_accum": 1},
            "fp16",
            {"stage": 1, "opt": None, "param": None, "micro": 8, "accum": 1, "bf16": False, "fp16": True},
        ),
        (
            {"zero_stage": 0, "micro_batch": 1, "grad_accum": 4, "activation_checkpointing": True},
            "fp32",
            {"stage": 0, "opt": None, "param": None, "micro": 1, "accum": 4, "bf16": False, "fp16": False},
        ),
    ],
)
def test_ds_config_follows_the_stack(deepspeed, precision, expect):
    config = stack(
        deepspeed=deepspeed, job={"name": "tj", "params": "1B", "tokens": "1B", "precision": precision}
    )
    c = ds_config(config, config.fleets[0])
    zero = c["zero_optimization"]
    assert zero["stage"] == expect["stage"]
    assert zero.get("offload_optimizer", {}).get("device") == expect["opt"]
    assert zero.get("offload_param", {}).get("device") == expect["param"]
    if expect["param"] == "nvme":
        assert zero["offload_param"]["nvme_path"].startswith("/var/lib/trainfleet")
    assert c["train_micro_batch_size_per_gpu"] == expect["micro"]
    assert c["gradient_accumulation_steps"] == expect["accum"]
    assert c["bf16"]["enabled"] is expect["bf16"] and c["fp16"]["enabled"] is expect["fp16"]
    assert ("activation_checkpointing" in c) is config.deepspeed.activation_checkpointing
    # The node gets exactly this, as JSON.
    rendered = render_user_data("t", config, config.fleets[0], bucket="b", group="g")
    assert json.loads(rendered.parts["ds_config.json"]) == c


@pytest.mark.parametrize("path", list_stack_files(STACKS.parent), ids=lambda p: p.name)
def test_deepspeed_accepts_every_stacks_ds_config(path):
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    from deepspeed.runtime.config import DeepSpeedConfig

    config = read_stack_file(path).config
    for fleet in config.fleets:
        c = ds_config(config, fleet)
        world = accelerator_of(fleet)[1] * fleet.nodes
        with deepspeed_world(world):
            parsed = DeepSpeedConfig(c)  # DeepSpeed's own validation (pydantic models, the batch triple)
        assert parsed.zero_optimization_stage == config.deepspeed.zero_stage
        assert parsed.gradient_accumulation_steps == config.deepspeed.grad_accum
        assert parsed.train_micro_batch_size_per_gpu == config.deepspeed.micro_batch
        assert parsed.train_batch_size == config.deepspeed.micro_batch * config.deepspeed.grad_accum * world


def deepspeed_world(size: int):
    """DeepSpeedConfig as a launch of `size` ranks sees it (it asks deepspeed.comm for the world size)."""
    from unittest import mock

    import deepspeed.runtime.config as ds_runtime_config

    patches = [
        mock.patch.object(ds_runtime_config.dist, "is_initialized", lambda: True),
        mock.patch.object(ds_runtime_config.dist, "get_world_size", lambda *a, **k: size),
        mock.patch.object(ds_runtime_config.dist, "get_rank", lambda *a, **k: 0),
    ]

    class _All:
        def __enter__(self):
            for p in patches:
                p.start()

        def __exit__(self, *exc):
            for p in reversed(patches):
                p.stop()

    return _All()


def test_the_global_batch_is_fixed_deepspeed_refuses_another_device_count():
    """Issue 13 #4: without train_batch_size the global batch followed the node count. Now a launch on more
    (or fewer) devices than the plan is refused by DeepSpeed itself instead of silently changing the batch."""
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    from deepspeed.runtime.config import DeepSpeedConfig

    config = stack(
        {"name": "ff", "cloud": "aws", "region": "us-east-1", "instance_type": "g5.12xlarge", "nodes": 3},
        deepspeed={"zero_stage": 2, "micro_batch": 4, "grad_accum": 2},
    )
    c = ds_config(config, config.fleets[0])
    assert c["train_batch_size"] == 4 * 2 * 4 * 3  # micro x accumulation x 4 A10G x 3 nodes
    with deepspeed_world(12):
        assert DeepSpeedConfig(c).train_batch_size == 96
    for other in (8, 16):  # a node lost, or one too many
        with deepspeed_world(other), pytest.raises(AssertionError, match="train_batch_size is not equal"):
            DeepSpeedConfig(c)


def test_gaudi_fleets_get_habanas_deepspeed_and_environment():
    gaudi = stack(
        {"name": "gg", "cloud": "aws", "region": "us-east-1", "instance_type": "dl1.24xlarge", "nodes": 2}
    )
    nvidia = stack()
    assert is_gaudi(gaudi.fleets[0]) and not is_gaudi(nvidia.fleets[0])
    g = render_user_data("s", gaudi, gaudi.fleets[0], bucket="b", group="g").parts
    n = render_user_data("s", nvidia, nvidia.fleets[0], bucket="b", group="g").parts
    assert "DS_ACCELERATOR=hpu" in g["trainfleet.env"] and "PT_HPU_LAZY_MODE=1" in g["trainfleet.env"]
    assert "HabanaAI/DeepSpeed" in g["trainfleet.env"]
    assert "TRAINFLEET_SLOTS=8" in g["trainfleet.env"]  # 8 Gaudi cards per dl1.24xlarge
    assert "export DS_ACCELERATOR PT_HPU_LAZY_MODE" in g["trainfleet-launch.sh"]
    assert "hpu" not in n["trainfleet.env"].lower() and "HabanaAI" not in n["trainfleet.env"]
    assert "TRAINFLEET_SLOTS=4" in n["trainfleet.env"]  # 4 x A10G per g5.12xlarge
    for parts in (g, n):
        assert "--no_ssh --node_rank" in parts["trainfleet-launch.sh"]


def test_gaudi_stack_files_render_the_gaudi_variant():
    found = False
    for path in list_stack_files(STACKS.parent):
        config = read_stack_file(path).config
        for fleet in config.fleets:
            if is_gaudi(fleet):
                found = True
                env = render_user_data("s", config, fleet, bucket="b", group="g").parts["trainfleet.env"]
                assert "DS_ACCELERATOR=hpu" in env
    if not found:
        pytest.skip("no stack with a Gaudi fleet in stacks/")


def s3(moto):
    return boto3.client(
        "s3", endpoint_url=moto.url, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )


def fetch_setup(moto, tmp_path, upload=True, tamper=False):
    config = stack()
    bucket = "fetch-" + uuid.uuid4().hex[:10]
    s3(moto).create_bucket(Bucket=bucket)
    r = render_user_data("t", config, config.fleets[0], bucket=bucket, group="g")
    home = tmp_path / "opt"
    script = tmp_path / "trainfleet-fetch.py"
    script.write_text(r.parts["trainfleet-fetch.py"].replace("/opt/trainfleet", str(home)))
    if upload:
        for key, text in r.assets.items():
            s3(moto).put_object(
                Bucket=bucket, Key=key, Body=(text + "# tampered\n" if tamper else text).encode()
            )
    return r, home, script


def run_fetch(script, env):
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | env,
    )


def test_fetch_installs_the_pinned_files_with_environment_credentials(moto, tmp_path):
    r, home, script = fetch_setup(moto, tmp_path)
    env = {
        "AWS_ENDPOINT_URL": moto.url,
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_REGION": "us-east-1",
    }
    result = run_fetch(script, env)
    assert result.returncode == 0, result.stderr
    assert (home / "trainfleet_agent.pyz").read_bytes() == base64.b64decode(r.parts["trainfleet_agent.pyz"])
    assert (home / "train.py").read_text() == r.parts["train.py"]
    assert os.access(home / "trainfleet_agent.pyz", os.X_OK)


def test_fetch_signs_with_the_instance_role_from_imdsv2(moto, tmp_path):
    r, home, script = fetch_setup(moto, tmp_path)
    with AwsImds() as imds:
        result = run_fetch(script, {"AWS_ENDPOINT_URL": moto.url, "TRAINFLEET_METADATA_URL": imds.url})
        assert imds.count("/latest/meta-data/iam/security-credentials/", 200) >= 2
    assert result.returncode == 0, result.stderr
    assert (home / "trainfleet_agent.pyz").read_bytes() == base64.b64decode(r.parts["trainfleet_agent.pyz"])


def test_fetch_refuses_a_file_that_does_not_match_its_pin(moto, tmp_path):
    _, home, script = fetch_setup(moto, tmp_path, tamper=True)
    env = {"AWS_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t"}
    result = run_fetch(script, env | {"TRAINFLEET_FETCH_ATTEMPTS": "2"})
    assert result.returncode == 1
    assert "does not match its pinned sha256" in result.stderr
    assert not (home / "trainfleet_agent.pyz").exists()


def boot_node(tmp_path: Path, nodes: int, bucket: str, moto_url: str) -> tuple[Path, dict]:
    config = stack(
        {"name": "ff", "cloud": "aws", "region": "us-east-1", "instance_type": "g5.12xlarge", "nodes": nodes}
    )
    r = render_user_data("t", config, config.fleets[0], bucket=bucket, group="g")
    state, home = tmp_path / "state", tmp_path / "opt"
    home.mkdir(parents=True)
    for name in ("trainfleet.env", "trainfleet-boot.sh"):
        (home / name).write_text(
            r.parts[name].replace("/var/lib/trainfleet", str(state)).replace("/opt/trainfleet", str(home))
        )
    (home / "trainfleet_agent.pyz").write_bytes(AGENT.read_bytes())
    env = {
        "TRAINFLEET_ENV_FILE": str(home / "trainfleet.env"),
        "TRAINFLEET_PYTHON": sys.executable,
        "TRAINFLEET_AGENT_PYTHON": sys.executable,  # the agent venv's SDKs are this venv's (same pins)
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_REGION": "us-east-1",
    }
    prefix = r.parts["trainfleet.env"].split("TRAINFLEET_PREFIX=")[1].split("\n")[0]
    return state, env | {"PREFIX": prefix}


def upload_with_agent(env, ckpt_dir, bucket):
    result = subprocess.run(
        [sys.executable, str(AGENT), "sync", "--cloud", "aws", "--bucket", bucket, "--prefix", env["PREFIX"],
         "--ckpt-dir", str(ckpt_dir)],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def restore_step(tmp_path, env):
    home = tmp_path / "opt"
    return subprocess.run(
        ["bash", "-c", f'set -euo pipefail; . "{home}/trainfleet-boot.sh"; NODE_RANK=0; restore'],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


def test_boot_restore_puts_every_node_on_the_buckets_latest(moto, tmp_path):
    bucket = "boot-" + uuid.uuid4().hex[:10]
    s3(moto).create_bucket(Bucket=bucket)
    # Another node made step 20 durable; this node has an older step 10 and a newer, never-synced step 30.
    source = tmp_path / "source"
    make_step(source / "rank1", 20, {"zero_pp_rank_1_optim_states.pt": b"rank 1"}, node_rank=1, nodes=2)
    make_step(source / "rank0", 20, {"model.pt": b"twenty", "zero_pp_rank_0_optim_states.pt": b"rank 0"},
              node_rank=0, nodes=2)  # fmt: skip
    state, env = boot_node(tmp_path / "node", nodes=2, bucket=bucket, moto_url=moto.url)
    upload_with_agent(env, source / "rank1", bucket)
    upload_with_agent(env, source / "rank0", bucket)  # node 0 commits: both parts are there
    ckpt = state / "checkpoints"
    make_step(ckpt, 10, {"model.pt": b"ten"})
    make_step(ckpt, 30, {"model.pt": b"thirty, only here"})
    result = restore_step(tmp_path / "node", env)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in ckpt.glob("step-*")) == ["step-00000010", "step-00000020"]
    assert (ckpt / "step-00000020" / "model.pt").read_bytes() == b"twenty"
    # node rank 0's part and the files every rank loads; not node 1's ZeRO shard
    assert sorted(p.name for p in (ckpt / "step-00000020").iterdir()) == [
        "COMPLETE", "model.pt", "zero_pp_rank_0_optim_states.pt"]  # fmt: skip
    assert (ckpt / "step-00000020" / "COMPLETE").is_file()
    # step 30 was never committed, so no other node has it: deleted, not kept to fill the disk (issue 13 #2)
    assert not (state / "stale").exists()


def test_boot_restore_on_a_single_node_keeps_its_newer_local_checkpoint(moto, tmp_path):
    bucket = "boot-" + uuid.uuid4().hex[:10]
    s3(moto).create_bucket(Bucket=bucket)
    state, env = boot_node(tmp_path / "node", nodes=1, bucket=bucket, moto_url=moto.url)
    ckpt = state / "checkpoints"
    make_step(ckpt, 30, {"model.pt": b"thirty"})
    result = restore_step(tmp_path / "node", env)  # empty bucket: nothing to restore, nothing moved
    assert result.returncode == 0, result.stderr
    assert (ckpt / "step-00000030" / "COMPLETE").is_file()


def test_boot_stops_with_one_event_when_the_node_count_changed_without_elastic(moto, tmp_path):
    """Issue 29 #2: a stack redeployed with another node count (no checkpoint.elastic) skipped every step saved at
    the old count, deleted the node's local steps as "not committed" and trained from step 0. The boot script now
    stops cleanly (exit 0: the unit does not restart it), says why and the fix, records a `stopped` run event, and
    leaves the node's checkpoints alone."""
    bucket = "boot-" + uuid.uuid4().hex[:10]
    s3(moto).create_bucket(Bucket=bucket)
    source = tmp_path / "source"
    make_step(source, 20, {"model.pt": b"twenty"})  # saved by a 1-node job
    state, env = boot_node(tmp_path / "node", nodes=2, bucket=bucket, moto_url=moto.url)
    upload_with_agent(env, source, bucket)
    ckpt = state / "checkpoints"
    make_step(ckpt, 30, {"model.pt": b"thirty"}, node_rank=1, nodes=2)
    home = tmp_path / "node" / "opt"
    result = subprocess.run(
        ["bash", "-c", f'set -euo pipefail; . "{home}/trainfleet-boot.sh"; NODE_RANK=1; restore; echo LAUNCHED'],
        capture_output=True, text=True, timeout=60, env={**os.environ, **env},
    )  # fmt: skip
    assert result.returncode == 0 and "LAUNCHED" not in result.stdout, result.stderr[-2000:]
    assert "saved by 1 node(s) and this job has 2" in result.stderr
    assert "checkpoint.elastic" in result.stderr
    assert (ckpt / "step-00000030" / "model.pt").read_bytes() == b"thirty", "the node's own checkpoint is kept"
    keys = [o["Key"] for o in s3(moto).list_objects_v2(Bucket=bucket, Prefix=f"{env['PREFIX']}/events/")["Contents"]]
    (event,) = [json.loads(s3(moto).get_object(Bucket=bucket, Key=k)["Body"].read()) for k in keys]
    assert (event["event"], event["reason"], event["saved_by"], event["nodes"]) == ("stopped", "node_count_changed", 1, 2)


def test_a_node_booting_after_training_finished_syncs_and_scales_the_group_to_zero(moto, tmp_path):
    """The boot script's DONE path on its own: final checkpoint made durable, then no idle spend."""
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")  # the boot script installs deepspeed when it is missing: not here
    kw = dict(
        endpoint_url=moto.url, region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    ec2, asg = boto3.client("ec2", **kw), boto3.client("autoscaling", **kw)
    group = "tf-done-" + uuid.uuid4().hex[:6]
    vpc = ec2.create_vpc(CidrBlock="127.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="127.0.0.0/24", AvailabilityZone="us-east-1a")["Subnet"]
    ec2.create_launch_template(
        LaunchTemplateName="lt-" + group,
        LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.12xlarge"},
    )
    asg.create_auto_scaling_group(
        AutoScalingGroupName=group,
        LaunchTemplate={"LaunchTemplateName": "lt-" + group},
        MinSize=0,  # as the program declares it: SetDesiredCapacity 0 is then all the node may do
        MaxSize=1,
        DesiredCapacity=1,
        VPCZoneIdentifier=subnet["SubnetId"],
    )
    (instance,) = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0][
        "Instances"
    ]
    ip = ec2.describe_instances(InstanceIds=[instance["InstanceId"]])["Reservations"][0]["Instances"][0][
        "PrivateIpAddress"
    ]
    bucket = "done-" + uuid.uuid4().hex[:10]
    s3(moto).create_bucket(Bucket=bucket)
    config = stack(
        {"name": "ff", "cloud": "aws", "region": "us-east-1", "instance_type": "g5.12xlarge", "nodes": 1}
    )
    r = render_user_data("t", config, config.fleets[0], bucket=bucket, group=group)
    state, home = tmp_path / "state", tmp_path / "opt"
    home.mkdir()
    for name in ("trainfleet.env", "trainfleet-boot.sh"):
        text = r.parts[name].replace("/var/lib/trainfleet", str(state)).replace("/opt/trainfleet", str(home))
        (home / name).write_text(text)
    (home / "trainfleet-boot.sh").chmod(0o755)
    (home / "trainfleet_agent.pyz").write_bytes(AGENT.read_bytes())
    make_step(state / "checkpoints", 500, {"model.pt": b"final weights"})
    (state / "run").mkdir(parents=True)
    (state / "run" / "DONE").write_text("500\n")
    prefix = r.parts["trainfleet.env"].split("TRAINFLEET_PREFIX=")[1].split("\n")[0]
    with AwsImds() as imds:
        imds.values.update({"local-ipv4": ip, "instance-id": instance["InstanceId"]})
        env = {
            "TRAINFLEET_ENV_FILE": str(home / "trainfleet.env"),
            "TRAINFLEET_METADATA_URL": imds.url,
            "TRAINFLEET_AGENT_PYTHON": sys.executable,  # the agent venv's SDKs are this venv's (same pins)
            "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
            "AWS_ENDPOINT_URL": moto.url,
            "AWS_ACCESS_KEY_ID": "t",
            "AWS_SECRET_ACCESS_KEY": "t",
            "AWS_REGION": "us-east-1",
        }
        result = subprocess.run(
            [str(home / "trainfleet-boot.sh")],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **env},
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "scaling" in result.stderr and "to zero" in result.stderr
    latest = s3(moto).get_object(Bucket=bucket, Key=f"{prefix}/LATEST")["Body"].read().decode()
    assert latest == "step-00000500"
    desired = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
    assert desired["DesiredCapacity"] == 0 and desired["MinSize"] == 0


def _probe_wheel(folder: Path, version: str) -> None:
    """A minimal pure-Python wheel (PEP 427: the package, METADATA, WHEEL, RECORD) for pip to install offline."""
    import zipfile

    name = f"tfprobe-{version}.dist-info"
    files = {
        "tfprobe/__init__.py": f"VERSION = {version!r}\n",
        f"{name}/METADATA": f"Metadata-Version: 2.1\nName: tfprobe\nVersion: {version}\n",
        f"{name}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{name}/RECORD,,\n"
    with zipfile.ZipFile(folder / f"tfprobe-{version}-py3-none-any.whl", "w") as zf:
        for path, text in {**files, f"{name}/RECORD": record}.items():
            zf.writestr(path, text)


def test_the_agent_venv_is_built_from_its_pins_once_and_rebuilt_when_they_change(tmp_path):
    """trainfleet-boot.sh `agent-env` (the agent unit's ExecStartPre, and the boot script at start): a venv of its
    own with exactly the pinned SDKs; built once (the second unit waits on the lock and finds it done), rebuilt
    when the pins change. pip installs offline here, from a local folder (PIP_NO_INDEX, PIP_FIND_LINKS)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version in ("1.0", "2.0"):
        _probe_wheel(wheels, version)
    r = render_user_data("t", stack(), stack().fleets[0], bucket="b", group="g")
    home = tmp_path / "opt"
    home.mkdir()
    for name in ("trainfleet.env", "trainfleet-boot.sh"):
        (home / name).write_text(r.parts[name].replace("/opt/trainfleet", str(home)))
    venv = home / "agent-venv"

    def build(pins: str) -> list[subprocess.Popen]:
        env = {**os.environ, "TRAINFLEET_ENV_FILE": str(home / "trainfleet.env"), "PIP_NO_INDEX": "1",
               "PIP_FIND_LINKS": str(wheels)}  # fmt: skip
        env.pop("TRAINFLEET_AGENT_PYTHON", None)
        text = (home / "trainfleet.env").read_text()
        text = re.sub(r"(?m)^TRAINFLEET_AGENT_REQUIREMENTS=.*$", f"TRAINFLEET_AGENT_REQUIREMENTS='{pins}'", text)
        text = re.sub(r"(?m)^TRAINFLEET_PYTHON=.*$", f"TRAINFLEET_PYTHON={sys.executable}", text)
        (home / "trainfleet.env").write_text(text)
        return [
            subprocess.Popen(["bash", str(home / "trainfleet-boot.sh"), "agent-env"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
            for _ in range(2)  # both units at once
        ]

    def version() -> str:
        out = subprocess.run([str(venv / "bin" / "python"), "-c", "import tfprobe; print(tfprobe.VERSION)"],
                             capture_output=True, text=True, check=True)  # fmt: skip
        return out.stdout.strip()

    for proc in build("tfprobe==1.0"):
        assert proc.wait(180) == 0, proc.stdout.read()
    assert version() == "1.0"
    assert (venv / ".trainfleet-agent-env").read_text() == "tfprobe==1.0"
    built = (venv / "bin" / "python").stat().st_ino
    for proc in build("tfprobe==1.0"):  # same pins: nothing rebuilt
        assert proc.wait(60) == 0
    assert (venv / "bin" / "python").stat().st_ino == built
    for proc in build("tfprobe==2.0"):  # new pins: rebuilt
        assert proc.wait(180) == 0, proc.stdout.read()
    assert version() == "2.0"
