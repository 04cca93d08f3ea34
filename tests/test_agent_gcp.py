"""The on-node agent on GCP, on loopback: a GCE metadata server (hanging GETs on instance/preempted; the
service account's token), gcp-storage-emulator for the bucket behind GcsAuthProxy, the agent and a fake
trainer as processes.

The agent logs in as a node does: it takes its access token from the metadata server and sends it to the
storage endpoint (TRAINFLEET_GCS_ENDPOINT, the override of https://storage.googleapis.com). It is not given
STORAGE_EMULATOR_HOST, which makes it skip auth as Google's client libraries do for emulators. The emulator
checks no credentials, so tests/storage_auth_proxies.py checks them in front of it. The tests read results
straight from the emulator.

Notice-to-durable is measured from the moment instance/preempted turns TRUE to the moment a plain HTTP
client sees LATEST name the trainer's notice checkpoint. ``pytest tests/test_agent_gcp.py -s`` prints it.
"""

from __future__ import annotations

import ast
import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

import pytest

from tests.agent_support import REPO, agent, run_agent, trainer
from tests.metadata_servers import GOOGLE_SCOPE, NODE_SCOPES, GceComputeApi, GceMetadata

GCP_WINDOW_S = 30.0
BUCKET = "ckpt-gcp"


@pytest.fixture
def proxy(gcs, gcs_proxy):
    """This module's bucket in the shared emulator, and the auth proxy a node's requests go through."""
    gcs.bucket(BUCKET)
    return gcs_proxy


@pytest.fixture
def gce():
    srv = GceMetadata(slow_s=3.0).start()
    yield srv
    srv.stop()


NO_EMULATOR = ("STORAGE_EMULATOR_HOST",)  # a node talks to the real endpoint, with its token


def node_env(proxy, gce) -> dict:
    return {"TRAINFLEET_GCS_ENDPOINT": proxy.url, "TRAINFLEET_METADATA_URL": gce.url}


def assert_agent_logged_in(proxy, gce):
    assert proxy.auth_schemes() == {"Bearer"}, "every storage request carries the service account's token"
    assert not {401, 403} & set(proxy.statuses())
    assert gce.count("service-accounts/default/token", 200) >= 1


def http(method, url, token=None, body=None, headers=None):
    """(status, JSON body or raw bytes) of one plain HTTP request."""
    hdrs = dict(headers or {})
    if token:
        hdrs["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, data=body, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            status, data = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, data = e.code, e.read()
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data


def metadata_token(gce) -> str:
    req = urllib.request.Request(
        gce.url + "/computeMetadata/v1/instance/service-accounts/default/token",
        headers={"Metadata-Flavor": "Google"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)["access_token"]


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


def run_notice(gcs, proxy, gce, tmp_path, faults=()):
    prefix = "run-" + uuid.uuid4().hex[:6]
    env = node_env(proxy, gce)
    tr = trainer(
        tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "4", "--ckpt-every", "20"
    )
    ag = agent(
        "watch", "--cloud", "gcp", "--bucket", BUCKET, "--prefix", prefix,
        "--ckpt-dir", str(tmp_path / "ckpt"), "--run-dir", str(tmp_path / "run"),
        "--interval-minutes", "0", "--keep-last", "2", "--metadata-url", gce.url,
        "--poll-s", "0.2", "--scan-s", "0.2", "--http-timeout-s", "1",
        env=env, unset=NO_EMULATOR,
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
            # the watcher is back to polling after the faults, and alive
            polls = gce.count("instance/preempted")
            assert gce.wait_count("instance/preempted", polls + 2) >= polls + 2
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


def test_gcp_preemption_checkpoint_is_durable_within_30s_and_restores(gcs, proxy, gce, tmp_path):
    ag, prefix, step, seconds, env = run_notice(gcs, proxy, gce, tmp_path)
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
        unset=NO_EMULATOR,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(step)
    name = f"step-{step:08d}"
    assert (tmp_path / "r" / name / "shards/model.bin").read_bytes() == (
        tmp_path / "ckpt" / name / "shards/model.bin"
    ).read_bytes()
    steps = {k.split("/")[1] for k in gcs_list(gcs, prefix + "/") if k.split("/")[1].startswith("step-")}
    assert name in steps and len(steps) <= 2  # keep_last=2 pruned the older periodic checkpoints
    assert_agent_logged_in(proxy, gce)


def test_gcp_faults_never_crash_the_watcher(gcs, proxy, gce, tmp_path):
    faults = ["503", "hang", "500"]
    ag, _prefix, step, seconds, _env = run_notice(gcs, proxy, gce, tmp_path, faults=faults)
    assert gce.faults_served == faults
    errors = ag.named("metadata_error")
    assert len(errors) >= 3, errors  # 503, the hanging endpoint (timed out), 500
    assert any("timed out" in e["error"] for e in errors), errors
    assert ag.named("metadata_recovered")
    assert seconds < GCP_WINDOW_S
    print(f"\nGCP notice-to-durable after faults {faults}: {seconds:.2f}s")


def test_gcp_live_migration_notice_checkpoints_and_keeps_training(gcs, proxy, gce, tmp_path):
    prefix = "mig-" + uuid.uuid4().hex[:6]
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "0.1")
    ag = agent(
        "watch", "--cloud", "gcp", "--bucket", BUCKET, "--prefix", prefix,
        "--ckpt-dir", str(tmp_path / "ckpt"), "--run-dir", str(tmp_path / "run"),
        "--metadata-url", gce.url, "--poll-s", "0.2", "--scan-s", "0.2",
        env=node_env(proxy, gce), unset=NO_EMULATOR,
    )  # fmt: skip
    try:
        ag.wait_event("watch_start", timeout=10)
        assert gce.wait_count("instance/maintenance-event", 1) >= 1, "the watcher polls maintenance-event"
        gce.set("instance/maintenance-event", "MIGRATE_ON_HOST_MAINTENANCE")
        ag.wait_event("trainer_signalled", timeout=10, pred=lambda e: e["signal"] == "SIGUSR1")
        ag.wait_event("durable", timeout=20)
        # two more answered polls of instance/preempted after the upload, and nothing was stopped
        polls = gce.count("instance/preempted")
        assert gce.wait_count("instance/preempted", polls + 2) >= polls + 2
        assert tr.alive() and ag.alive(), "a migration is not a preemption: training goes on"
        assert gcs_get(gcs, f"{prefix}/LATEST")
        assert_agent_logged_in(proxy, gce)
    finally:
        ag.kill()
        tr.kill()


def watch_gcp(gce, proxy, tmp_path, prefix, *extra, env=None):
    return agent(
        "watch", "--cloud", "gcp", "--bucket", BUCKET, "--prefix", prefix,
        "--ckpt-dir", str(tmp_path / "ckpt"), "--run-dir", str(tmp_path / "run"),
        "--metadata-url", gce.url, "--poll-s", "0.2", "--scan-s", "0.2", "--http-timeout-s", "1", *extra,
        env={**node_env(proxy, gce), **(env or {})}, unset=NO_EMULATOR,
    )  # fmt: skip


def test_gcp_gpu_maintenance_notice_does_not_stop_training_and_a_preemption_still_does(gcs, proxy, gce, tmp_path):
    """TERMINATE_ON_HOST_MAINTENANCE on a GPU VM comes an hour ahead
    (https://cloud.google.com/compute/docs/gpus/gpu-host-maintenance): the agent asks for a checkpoint, training
    goes on and the agent keeps watching. A preemption then (30 s) is the earliest deadline: checkpoint and exit."""
    prefix = "maint-" + uuid.uuid4().hex[:6]
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "0.5")
    ag = watch_gcp(gce, proxy, tmp_path, prefix, env={"TRAINFLEET_ACCELERATOR": "A100-40GB"})
    try:
        ag.wait_event("watch_start", timeout=10)
        assert gce.wait_count("instance/maintenance-event", 1) >= 1
        gce.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        notice = ag.wait_event("notice", timeout=20, pred=lambda e: e["kind"] == "gcp-maintenance-terminate")
        assert notice["hard"] and 3500 < notice["deadline_in_s"] <= 3600, notice
        after = lambda e: e["ts"] >= notice["ts"]  # noqa: E731
        assert ag.wait_event("trainer_signalled", timeout=10, pred=after)["signal"] == "SIGUSR1"
        ag.wait_event("durable", timeout=30, pred=after)
        polls = gce.count("instance/preempted")
        assert gce.wait_count("instance/preempted", polls + 2) >= polls + 2, "still watching"
        assert tr.alive() and ag.alive(), "an hour's notice does not stop training"
        assert not [e for e in ag.named("trainer_signalled") if e["signal"] == "SIGTERM"]
        gce.preempt()
        preempted = ag.wait_event("notice", timeout=20, pred=lambda e: e["kind"] == "gcp-preempted")
        assert preempted["deadline_in_s"] <= 30
        ag.wait_event("trainer_signalled", timeout=10, pred=lambda e: e["signal"] == "SIGTERM")
        assert tr.wait(30) == 0 and ag.wait(30) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        tr.kill()
    durable = ag.named("notice_durable")
    assert durable and gcs_get(gcs, f"{prefix}/LATEST") == f"step-{durable[0]['step']:08d}".encode()


def test_gcp_upcoming_maintenance_window_start_is_the_deadline(gcs, proxy, gce, tmp_path):
    """instance/upcoming-maintenance gives the window's start
    (https://cloud.google.com/compute/docs/instances/monitor-plan-host-maintenance-event); when it is sooner than
    the maintenance notice's hour, it is the deadline: the trainer is asked to exit when only the notice window
    (5 s here) is left before it, not at once and not an hour later."""
    prefix = "window-" + uuid.uuid4().hex[:6]
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "0.5")
    ag = watch_gcp(gce, proxy, tmp_path, prefix, "--notice-window-s", "5", env={"TRAINFLEET_ACCELERATOR": "A100-40GB"})
    try:
        ag.wait_event("watch_start", timeout=10)
        gce.schedule_maintenance(window_start_s=16)
        gce.set("instance/maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE")
        notice = ag.wait_event("notice", timeout=20, pred=lambda e: e["kind"] == "gcp-maintenance-terminate")
        assert 12 < notice["deadline_in_s"] <= 16, notice
        deadline = notice["ts"] + notice["deadline_in_s"]
        stop = ag.wait_event("trainer_signalled", timeout=40, pred=lambda e: e["signal"] == "SIGTERM")
        assert deadline - 5 - 1.5 <= stop["ts"] <= deadline, (notice, stop)
        assert tr.wait(30) == 0 and ag.wait(30) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        tr.kill()
    assert ag.named("gcp_upcoming_maintenance") and ag.named("notice_durable")


def test_a_token_that_stops_working_mid_run_is_replaced_and_uploads_go_on(gcs, proxy, gce, tmp_path):
    """The access token the agent holds is rejected (401) before its own expiry: google-auth's session takes a
    new one from the metadata server and sends the request again; the next checkpoint is still made durable."""
    prefix = "tok-" + uuid.uuid4().hex[:6]
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "0.5", "--ckpt-every", "10")
    ag = agent(
        "watch", "--cloud", "gcp", "--bucket", BUCKET, "--prefix", prefix,
        "--ckpt-dir", str(tmp_path / "ckpt"), "--run-dir", str(tmp_path / "run"),
        "--metadata-url", gce.url, "--poll-s", "0.2", "--scan-s", "0.2",
        env=node_env(proxy, gce), unset=NO_EMULATOR,
    )  # fmt: skip
    try:
        first = ag.wait_event("durable", timeout=30)
        issued = len(gce.issued)
        gce.expire_tokens()
        ag.wait_event("durable", timeout=30, pred=lambda e: e["step"] > first["step"])
        assert 401 in proxy.statuses(), "the old token was refused"
        assert len(gce.issued) > issued, "a new token came from the metadata server"
        assert tr.alive() and ag.alive()
    finally:
        ag.kill()
        tr.kill()


def test_gcs_refuses_requests_without_a_live_token_with_a_storage_scope(proxy):
    listing = f"{proxy.url}/storage/v1/b/{BUCKET}/o?prefix=auth-check"
    upload = f"{proxy.url}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name=auth-check"
    node = GceMetadata(slow_s=3.0).start()  # the stacks' scopes: devstorage.read_write among them
    compute_only = GceMetadata(scopes=[GOOGLE_SCOPE + "compute"]).start()
    read_only = GceMetadata(scopes=[GOOGLE_SCOPE + "devstorage.read_only"]).start()
    try:
        status, doc = http("GET", listing)
        assert status == 401 and doc["error"]["errors"][0]["reason"] == "required"
        assert doc["error"]["status"] == "UNAUTHENTICATED"
        assert http("GET", listing, token="ya29.made-up")[0] == 401
        token = metadata_token(node)
        assert http("GET", listing, token=token)[0] == 200
        assert http("POST", upload, token=token, body=b"x")[0] == 200
        node.expire_tokens()
        status, doc = http("GET", listing, token=token)
        assert status == 401 and doc["error"]["errors"][0]["reason"] == "authError"
        assert metadata_token(node) != token, "the metadata server hands out a fresh token once one expired"
        status, doc = http("GET", listing, token=metadata_token(compute_only))
        assert status == 403 and doc["error"]["status"] == "PERMISSION_DENIED"
        ro = metadata_token(read_only)
        assert http("GET", listing, token=ro)[0] == 200
        assert http("POST", upload, token=ro, body=b"x")[0] == 403
    finally:
        for srv in (node, compute_only, read_only):
            srv.stop()


def test_agent_without_a_storage_scope_fails_with_one_clear_line(proxy, tmp_path):
    compute_only = GceMetadata(scopes=[GOOGLE_SCOPE + "compute"]).start()
    try:
        args = ("restore", "--cloud", "gcp", "--bucket", BUCKET, "--prefix", "nope", "--dest", str(tmp_path))
        res = run_agent(*args, env=node_env(proxy, compute_only), unset=NO_EMULATOR)
        assert res.returncode == 1 and "Traceback" not in res.stderr
        # google-cloud-storage's error for GCS's 403, in the agent's one line
        last = res.stderr.strip().splitlines()[-1]
        assert last.startswith("trainfleet_agent restore: Forbidden: 403 "), res.stderr
        assert "insufficient authentication scopes" in last
    finally:
        compute_only.stop()


def test_compute_api_needs_a_live_token_with_a_compute_scope():
    node, storage_only = (
        GceMetadata().start(),
        GceMetadata(scopes=[GOOGLE_SCOPE + "devstorage.read_write"]).start(),
    )
    api = GceComputeApi().start()
    try:
        api.add_group("trainers", [("trainers-0", "10.128.0.2")])
        url = f"{api.url}/compute/v1/projects/trainfleet-test/zones/us-central1-a/instances/trainers-0"
        assert http("GET", url)[0] == 401
        token = metadata_token(node)
        assert http("GET", url, token=token) == (200, {"name": "trainers-0", "networkInterfaces": [
            {"name": "nic0", "networkIP": "10.128.0.2"}]})  # fmt: skip
        assert http("GET", url, token=metadata_token(storage_only))[0] == 403
        node.expire_tokens()
        assert http("GET", url, token=token)[0] == 401
    finally:
        for srv in (node, storage_only, api):
            srv.stop()


def test_metadata_server_has_the_scopes_the_stacks_give_nodes():
    # infra/gcp/iam.py read as text, not imported: the stand-in must not borrow the code under test
    tree = ast.parse((REPO / "infra/gcp/iam.py").read_text())
    stack_scopes = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "NODE_SCOPES" for t in node.targets)
    )
    assert NODE_SCOPES == stack_scopes
    gce = GceMetadata().start()
    try:
        req = urllib.request.Request(
            gce.url + "/computeMetadata/v1/instance/service-accounts/default/scopes",
            headers={"Metadata-Flavor": "Google"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.read().decode().split() == stack_scopes
    finally:
        gce.stop()
