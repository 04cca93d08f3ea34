"""The on-node agent on Azure, on loopback: an Azure IMDS server (Scheduled Events, acknowledged by POST
StartRequests), Azurite's blob service (shared-key auth) for the bucket, the agent and a fake trainer.

Notice-to-durable is measured from the moment the Preempt event is scheduled to the moment a blob client sees
LATEST name the trainer's notice checkpoint. ``pytest tests/test_agent_azure.py -s`` prints it.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from tests.agent_support import (
    AZURITE_ACCOUNT,
    AZURITE_BIN,
    AZURITE_KEY,
    Azurite,
    agent,
    load_agent_module,
    run_agent,
    trainer,
)
from tests.metadata_servers import AzureImds
from tests.needs import need

AZURE_WINDOW_S = 30.0

need(AZURITE_BIN.exists(), "Azurite", "npm install --prefix .venv/azurite azurite@3, as .ci/run does")


@pytest.fixture(scope="module")
def azurite(tmp_path_factory):
    srv = Azurite(tmp_path_factory.mktemp("azurite"))
    yield srv
    srv.stop()


@pytest.fixture
def blob(azurite, monkeypatch):
    """A fresh container; returns (bucket argument, agent env, an in-test blob client)."""
    env = {"TRAINFLEET_AZURE_BLOB_ENDPOINT": azurite.endpoint, "AZURE_STORAGE_KEY": AZURITE_KEY}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    container = "ckpt" + uuid.uuid4().hex[:10]
    bucket = f"{AZURITE_ACCOUNT}/{container}"
    mod = load_agent_module()
    store = mod.AzureBlobStore(bucket)
    store._req("PUT", store.base + "?restype=container", {"Content-Length": "0"}, b"", ok=(201,))
    return bucket, env, store


@pytest.fixture
def imds():
    srv = AzureImds(vm_name="trainfleet_3", slow_s=3.0).start()
    yield srv
    srv.stop()


def exit_step_of(tr):
    for line in list(tr.stdout_lines):
        if line.startswith("{") and json.loads(line)["trainer"] == "exit-on-notice":
            return json.loads(line)["step"]
    return None


def run_notice(blob, imds, tmp_path, faults=()):
    bucket, env, store = blob
    tr = trainer(
        tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "4", "--ckpt-every", "20"
    )
    ag = agent(
        "watch", "--cloud", "azure", "--bucket", bucket, "--prefix", "run1",
        "--ckpt-dir", str(tmp_path / "ckpt"), "--run-dir", str(tmp_path / "run"),
        "--interval-minutes", "0", "--keep-last", "2", "--metadata-url", imds.url,
        "--poll-s", "0.2", "--scan-s", "0.2", "--http-timeout-s", "1",
        env=env,
    )  # fmt: skip
    try:
        ag.wait_event("durable", timeout=30)
        # an event for another VM of the scale set is not ours
        imds.preempt(resources=["trainfleet_7"])
        if faults:
            imds.inject(list(faults))
            end = time.time() + 60
            while imds.faults and time.time() < end:
                assert ag.alive(), "\n".join(ag.stderr_lines)
                time.sleep(0.1)
            assert not imds.faults
        time.sleep(1.5)
        assert ag.alive() and tr.alive() and not ag.named("notice")
        t0 = time.time()
        eid = imds.preempt(not_before_s=AZURE_WINDOW_S)
        end = t0 + AZURE_WINDOW_S
        while time.time() < end:
            target = exit_step_of(tr)
            cur = store.get_bytes("run1/LATEST")
            if target is not None and cur == f"step-{target:08d}".encode():
                assert store.get_bytes(f"run1/{cur.decode()}/MANIFEST.json")
                break
            time.sleep(0.02)
        else:
            raise AssertionError(
                "notice checkpoint not durable in the Azure window:\n" + "\n".join(ag.stderr_lines[-30:])
            )
        seconds = time.time() - t0
        assert tr.wait(20) == 0
        assert ag.wait(20) == 0, "\n".join(ag.stderr_lines)
        return ag, eid, exit_step_of(tr), seconds
    finally:
        ag.kill()
        tr.kill()


def test_azure_preempt_is_made_durable_then_acknowledged(blob, imds, tmp_path):
    bucket, env, store = blob
    ag, eid, step, seconds = run_notice(blob, imds, tmp_path)
    assert seconds < AZURE_WINDOW_S
    assert imds.acked == [eid], "only this VM's Preempt event is acknowledged"
    names = [e["event"] for e in ag.events]
    assert names.index("notice_durable") < names.index("azure_event_acknowledged"), "ack only once durable"
    reported = ag.wait_event("notice_durable", timeout=1)
    print(
        f"\nAzure notice-to-durable: {seconds:.2f}s (agent-reported {reported['notice_to_durable_s']}s), step {step}, steps lost 0"
    )
    res = run_agent(
        "restore",
        "--cloud",
        "azure",
        "--bucket",
        bucket,
        "--prefix",
        "run1",
        "--dest",
        str(tmp_path / "r"),
        env=env,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(step)
    name = f"step-{step:08d}"
    assert (tmp_path / "r" / name / "shards/model.bin").read_bytes() == (
        tmp_path / "ckpt" / name / "shards/model.bin"
    ).read_bytes()
    steps = {k.split("/")[1] for k in store.list("run1/") if k.split("/")[1].startswith("step-")}
    assert name in steps and len(steps) <= 2


def test_azure_faults_never_crash_the_watcher(blob, imds, tmp_path):
    faults = ["500", "timeout", "hang"]
    ag, eid, _step, seconds = run_notice(blob, imds, tmp_path, faults=faults)
    assert imds.faults_served == faults
    errors = ag.named("metadata_error")
    assert len(errors) >= 3, errors
    assert any("timed out" in e["error"] for e in errors), errors
    assert imds.acked == [eid]
    assert seconds < AZURE_WINDOW_S
    print(f"\nAzure notice-to-durable after faults {faults}: {seconds:.2f}s")


def test_azure_block_blob_upload_for_large_files(blob, tmp_path):
    bucket, env, _store = blob
    ckpt = tmp_path / "ckpt" / "step-00000005"
    ckpt.mkdir(parents=True)
    (ckpt / "big.bin").write_bytes(os.urandom((3 << 20) + 17))
    (ckpt / "COMPLETE").touch()
    env = {**env, "TRAINFLEET_PART_SIZE": str(1 << 20)}  # 4 blocks + a block list
    args = ("--cloud", "azure", "--bucket", bucket, "--prefix", "p")
    assert run_agent("sync", *args, "--ckpt-dir", str(tmp_path / "ckpt"), env=env).returncode == 0
    res = run_agent("restore", *args, "--dest", str(tmp_path / "r"), env=env)
    assert res.stdout.strip() == "5", res.stderr
    assert (tmp_path / "r/step-00000005/big.bin").read_bytes() == (ckpt / "big.bin").read_bytes()


def test_managed_identity_token_comes_from_the_imds(imds):
    mod = load_agent_module()
    tok = mod.BearerToken("azure", imds.url)
    assert tok.get().startswith("eyJ0eXAi.test.")
    assert tok.get() == tok.get()  # cached until it nears expiry
    assert imds.count("/metadata/identity/oauth2/token", 200) == 1
    assert imds.count("resource=https%3A%2F%2Fstorage.azure.com%2F") == 1
