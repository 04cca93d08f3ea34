"""The on-node agent on GCP, on loopback: a GCE metadata server (hanging GETs on instance/preempted),
gcp-storage-emulator for the bucket, the agent and a fake trainer as processes.

Notice-to-durable is measured from the moment instance/preempted turns TRUE to the moment a plain HTTP
client sees LATEST name the trainer's notice checkpoint. ``pytest tests/test_agent_gcp.py -s`` prints it.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
import uuid

import pytest

from tests.agent_support import GcsEmulator, agent, run_agent, trainer
from tests.metadata_servers import GceMetadata

GCP_WINDOW_S = 30.0
BUCKET = "ckpt-gcp"


@pytest.fixture(scope="module")
def gcs():
    srv = GcsEmulator(BUCKET)
    yield srv
    srv.stop()


@pytest.fixture
def gce():
    srv = GceMetadata(slow_s=3.0).start()
    yield srv
    srv.stop()


def gcs_get(gcs, key):
    url = f"{gcs.url}/storage/v1/b/{BUCKET}/o/{urllib.parse.quote(key, safe='')}?alt=media"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def gcs_list(gcs, prefix):
    q = urllib.parse.urlencode({"prefix": prefix})
    with urllib.request.urlopen(f"{gcs.url}/storage/v1/b/{BUCKET}/o?{q}", timeout=5) as r:
        return sorted(i["name"] for i in json.load(r).get("items", []))


def exit_step_of(tr):
    for line in list(tr.stdout_lines):
        if line.startswith("{") and json.loads(line)["trainer"] == "exit-on-notice":
            return json.loads(line)["step"]
    return None


def run_notice(gcs, gce, tmp_path, faults=()):
    prefix = "run-" + uuid.uuid4().hex[:6]
    env = {"STORAGE_EMULATOR_HOST": gcs.host}
    tr = trainer(
        tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "4", "--ckpt-every", "20"
    )
    ag = agent(
        "watch", "--cloud", "gcp", "--bucket", BUCKET, "--prefix", prefix,
        "--ckpt-dir", str(tmp_path / "ckpt"), "--run-dir", str(tmp_path / "run"),
        "--interval-minutes", "0", "--keep-last", "2", "--metadata-url", gce.url,
        "--poll-s", "0.2", "--scan-s", "0.2", "--http-timeout-s", "1",
        env=env,
    )  # fmt: skip
    try:
        ag.wait_event("durable", timeout=30)
        if faults:
            gce.inject(list(faults))
            end = time.time() + 60
            while gce.faults and time.time() < end:
                assert ag.alive(), "\n".join(ag.stderr_lines)
                time.sleep(0.1)
            assert not gce.faults
            time.sleep(1.0)
            assert ag.alive()
        t0 = time.time()
        gce.preempt()
        end = t0 + GCP_WINDOW_S
        while time.time() < end:
            target = exit_step_of(tr)
            cur = gcs_get(gcs, f"{prefix}/LATEST")
            if target is not None and cur == f"step-{target:08d}".encode():
                assert gcs_get(gcs, f"{prefix}/{cur.decode()}/MANIFEST.json")
                break
            time.sleep(0.02)
        else:
            raise AssertionError(
                "notice checkpoint not durable in the GCP window:\n" + "\n".join(ag.stderr_lines[-30:])
            )
        seconds = time.time() - t0
        assert tr.wait(20) == 0
        assert ag.wait(20) == 0, "\n".join(ag.stderr_lines)
        return ag, prefix, exit_step_of(tr), seconds, env
    finally:
        ag.kill()
        tr.kill()


def test_gcp_preemption_checkpoint_is_durable_within_30s_and_restores(gcs, gce, tmp_path):
    ag, prefix, step, seconds, env = run_notice(gcs, gce, tmp_path)
    assert seconds < GCP_WINDOW_S
    assert gce.hanging_gets >= 1, "the agent should use wait_for_change hanging GETs"
    reported = ag.wait_event("notice_durable", timeout=1)
    print(
        f"\nGCP notice-to-durable: {seconds:.2f}s (agent-reported {reported['notice_to_durable_s']}s), step {step}, steps lost 0"
    )
    res = run_agent(
        "restore",
        "--cloud",
        "gcp",
        "--bucket",
        BUCKET,
        "--prefix",
        prefix,
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
    steps = {k.split("/")[1] for k in gcs_list(gcs, prefix + "/") if k.split("/")[1].startswith("step-")}
    assert name in steps and len(steps) <= 2  # keep_last=2 pruned the older periodic checkpoints


def test_gcp_faults_never_crash_the_watcher(gcs, gce, tmp_path):
    faults = ["503", "hang", "500"]
    ag, _prefix, step, seconds, _env = run_notice(gcs, gce, tmp_path, faults=faults)
    assert gce.faults_served == faults
    errors = ag.named("metadata_error")
    assert len(errors) >= 3, errors  # 503, the hanging endpoint (timed out), 500
    assert any("timed out" in e["error"] for e in errors), errors
    assert ag.named("metadata_recovered")
    assert seconds < GCP_WINDOW_S
    print(f"\nGCP notice-to-durable after faults {faults}: {seconds:.2f}s")


def test_gcp_live_migration_notice_checkpoints_and_keeps_training(gcs, gce, tmp_path):
    prefix = "mig-" + uuid.uuid4().hex[:6]
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "0.1")
    ag = agent(
        "watch", "--cloud", "gcp", "--bucket", BUCKET, "--prefix", prefix,
        "--ckpt-dir", str(tmp_path / "ckpt"), "--run-dir", str(tmp_path / "run"),
        "--metadata-url", gce.url, "--poll-s", "0.2", "--scan-s", "0.2",
        env={"STORAGE_EMULATOR_HOST": gcs.host},
    )  # fmt: skip
    try:
        ag.wait_event("watch_start", timeout=10)
        time.sleep(0.5)
        gce.set("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
        ag.wait_event("trainer_signalled", timeout=10, pred=lambda e: e["signal"] == "SIGUSR1")
        ag.wait_event("durable", timeout=20)
        time.sleep(0.5)
        assert tr.alive() and ag.alive(), "a migration is not a preemption: training goes on"
        assert gcs_get(gcs, f"{prefix}/LATEST")
    finally:
        ag.kill()
        tr.kill()
