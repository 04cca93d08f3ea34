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
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import pytest

pytest.importorskip("torch")
pytest.importorskip("deepspeed")

from infra.config import StackConfig  # noqa: E402
from infra.userdata import render_user_data  # noqa: E402
from tests.agent_support import MotoServer, Proc  # noqa: E402
from tests.metadata_servers import AwsImds  # noqa: E402

pytestmark = pytest.mark.e2e

STEPS = 60
VENV_BIN = str(Path(sys.executable).parent)


def e2e_config(master_port: int) -> StackConfig:
    return StackConfig.from_sections(
        {
            "job": {"name": "e2e", "params": "1M", "tokens": "1M", "precision": "fp32"},
            "fleets": [
                {
                    "name": "cpu",
                    "cloud": "aws",
                    "region": "us-east-1",
                    "instance_type": "g5.12xlarge",
                    "nodes": 1,
                }
            ],
            "deepspeed": {"zero_stage": 2, "micro_batch": 4, "grad_accum": 2},
            "checkpoint": {"interval_minutes": 0.1, "keep_last": 2},
            "launch": {"args": ["--steps", str(STEPS), "--step-seconds", "0.1"], "master_port": master_port},
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


class Node:
    """One "node": the rendered files laid out under `root` instead of /opt, /etc and /var/lib."""

    def __init__(self, root: Path, rendered, moto_url: str):
        self.root = root
        self.home, self.etc, self.state = root / "opt", root / "etc", root / "state"
        self.rendered = rendered
        self.env = {
            "PATH": VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
            "DS_ACCELERATOR": "cpu",
            "TRAINFLEET_ENV_FILE": str(self.etc / "trainfleet.env"),
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": moto_url,
            "TRAINFLEET_PYTHON": sys.executable,
        }
        for f in rendered.files:
            if f.part not in rendered.parts or f.path.startswith("/etc/systemd"):
                continue
            if f.part in ("trainfleet_agent.py", "train.py"):
                continue  # fetched from the bucket by trainfleet-fetch.py, as on a real node
            dest = self.move(f.path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(self.move_text(rendered.parts[f.part]))
            dest.chmod(int(f.permissions, 8))
        self.env_values = dict(
            line.split("=", 1)
            for line in (self.etc / "trainfleet.env").read_text().splitlines()
            if "=" in line
        )
        (self.state / "run").mkdir(parents=True, exist_ok=True)
        self.hostfile = self.state / "run" / "hostfile"
        self.hostfile.write_text("localhost slots=2\n")

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
        assert (self.home / "trainfleet_agent.py").is_file() and (self.home / "train.py").is_file()

    def launch(self, log: Path) -> subprocess.Popen:
        fh = open(log, "w")  # noqa: SIM115 - closed with the process
        return subprocess.Popen(
            [str(self.home / "trainfleet-launch.sh"), str(self.hostfile), "0", "127.0.0.1"],
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
        assert argv[:2] == ["/usr/bin/env", "python3"]
        return [sys.executable, *argv[2:], *extra]

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


def test_spot_notice_then_fresh_node_finishes_identical_to_an_uninterrupted_run(moto, tmp_path):
    client = s3(moto)
    bucket = "e2e-" + uuid.uuid4().hex[:10]
    client.create_bucket(Bucket=bucket)
    config = e2e_config(master_port=29600 + os.getpid() % 200)
    rendered = render_user_data("e2e", config, config.fleets[0], bucket=bucket, group="tf-e2e-cpu")
    for key, text in rendered.assets.items():  # what the Pulumi component uploads before nodes boot
        client.put_object(Bucket=bucket, Key=key, Body=text.encode())
    prefix = rendered.parts["trainfleet.env"].split("TRAINFLEET_PREFIX=")[1].split("\n")[0]

    # 1. The uninterrupted reference run.
    ref = Node(tmp_path / "reference", rendered, moto.url)
    ref.fetch()
    proc = ref.launch(tmp_path / "reference.log")
    try:
        assert proc.wait(170) == 0, (tmp_path / "reference.log").read_text()[-4000:]
    finally:
        kill_group(proc)
    reference = ref.final()
    assert reference["step"] == STEPS

    # 2. Node A: agent + trainer; periodic checkpoints reach the bucket; then a spot notice.
    a = Node(tmp_path / "node-a", rendered, moto.url)
    a.fetch()
    with AwsImds(slow_s=2.0) as imds:
        agent = Proc(a.agent_command("--metadata-url", imds.url, "--poll-s", "0.2", "--scan-s", "0.1"), a.env)
        log_a = tmp_path / "node-a.log"
        proc = a.launch(log_a)
        try:
            agent.wait_event("durable", timeout=120)  # a periodic checkpoint made it to the bucket
            wait_for(lambda: re.search(r"step (\d+)/", log_a.read_text()), 60, "training progress")
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
    latest = client.get_object(Bucket=bucket, Key=f"{prefix}/LATEST")["Body"].read().decode()
    steps_lost = stopped - int(latest.removeprefix("step-"))
    assert steps_lost == 0, f"the bucket's latest is {latest}, the trainer stopped at {stopped}"
    notice_to_durable = durable["notice_to_durable_s"]
    assert notice_to_durable < 120, "AWS gives 120 s from the notice"
    assert durable["step"] == stopped

    # 3. Node B: empty disks; the boot script's restore step brings the bucket's latest, then launch.
    b = Node(tmp_path / "node-b", rendered, moto.url)
    b.fetch()
    assert not list(b.ckpt_dir.glob("step-*"))
    r = b.boot_step("restore")
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
        f"\ne2e: stopped at step {stopped}, bucket LATEST {latest}, steps lost {steps_lost}, "
        f"notice-to-durable {notice_to_durable:.2f}s (measured by the agent; "
        f"{time.time() - noticed_at:.1f}s since the notice incl. the fresh node's run), "
        f"final step {resumed['step']}, loss {resumed['loss']:.6f} = reference"
    )
