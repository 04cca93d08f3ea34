"""The on-node agent on Azure, on loopback: an Azure IMDS server (Scheduled Events, acknowledged by POST
StartRequests; managed-identity tokens), Azurite's blob service for the bucket, the agent and a fake trainer.

Storage auth is the mode the stacks deploy: infra/azure/storage.py turns shared keys off on the checkpoint
account (allow_shared_key_access=False), so a node signs every blob request with its managed identity's
token for https://storage.azure.com/ . Azurite runs with ``--oauth basic`` over HTTPS behind
AzureBearerVersionGate (tests/storage_auth_proxies.py); the agent gets no account key, trusts the test CA
as a node trusts its CA bundle (REQUESTS_CA_BUNDLE, which azure-core's requests transport reads), and talks
to the gate. Its token comes from azure-identity's ManagedIdentityCredential, pointed at the IMDS stand-in by
AZURE_POD_IDENTITY_AUTHORITY_HOST (the variable azure-identity and MSAL read for the IMDS host), which the agent
sets from --metadata-url / TRAINFLEET_METADATA_URL.

Notice-to-durable is measured from the moment the Preempt event is scheduled to the moment a blob client sees
LATEST name the trainer's notice checkpoint. ``pytest tests/test_agent_azure.py -s`` prints it.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest

from tests.agent_support import (
    AZURITE_ACCOUNT,
    AZURITE_BIN,
    agent,
    azurite_shared_key_client,
    load_agent_module,
    run_agent,
    trainer,
)
from tests.metadata_servers import AzureArmApi, AzureImds, entra_token, jwt_claims_unverified
from tests.needs import need

AZURE_WINDOW_S = 30.0

need(AZURITE_BIN.exists(), "Azurite", "npm install --prefix .venv/azurite azurite@3, as .ci/run does")


STORAGE = "https://storage.azure.com/"
MANAGEMENT = "https://management.azure.com/"
NO_KEY = ("AZURE_STORAGE_KEY",)  # a node has no account key: the account refuses shared-key requests


@pytest.fixture
def imds():
    srv = AzureImds(vm_name="trainfleet_3", slow_s=3.0).start()
    yield srv
    srv.stop()


@pytest.fixture
def blob(azurite_tls, azure_gate, imds, tls, monkeypatch):
    """A fresh container; returns (bucket argument, agent env, the tests' own shared-key blob client)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))  # the tests' client talks HTTPS to Azurite too
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.ca))  # (through azure-core's requests transport)
    container = "ckpt" + uuid.uuid4().hex[:10]
    bucket = f"{AZURITE_ACCOUNT}/{container}"
    store = azurite_shared_key_client(azurite_tls.endpoint, bucket)
    store.container.create_container()
    env = {
        "TRAINFLEET_AZURE_BLOB_ENDPOINT": f"{azure_gate.url}/{AZURITE_ACCOUNT}",
        "TRAINFLEET_METADATA_URL": imds.url,  # restore/sync take no --metadata-url
        "SSL_CERT_FILE": str(tls.ca),
        "REQUESTS_CA_BUNDLE": str(tls.ca),
    }
    return bucket, env, store


def storage_tokens_issued(imds) -> int:
    """Token requests the IMDS answered for the storage resource (MSAL, under azure-identity, asks for
    https://storage.azure.com, the scope less "/.default", and does not percent-encode it)."""
    def resource(path):
        return urllib.parse.parse_qs(urllib.parse.urlsplit(path).query).get("resource", [""])[0].rstrip("/")

    with imds.lock:
        return sum(1 for _m, path, status in imds.requests
                   if status == 200 and "/oauth2/token" in path and resource(path) == STORAGE.rstrip("/"))  # fmt: skip


def assert_agent_used_its_managed_identity(azure_gate, imds):
    assert azure_gate.auth_schemes() == {"Bearer"}, "every blob request carries the managed identity's token"
    assert storage_tokens_issued(imds) >= 1, imds.requests


def https_request(tls, url, method="GET", headers=None, body=b""):
    """(status, headers, body) of one HTTPS request that trusts the test CA."""
    parts = urllib.parse.urlsplit(url)
    ctx = ssl.create_default_context(cafile=str(tls.ca))
    conn = http.client.HTTPSConnection(parts.hostname, parts.port, context=ctx, timeout=30)
    try:
        target = parts.path + ("?" + parts.query if parts.query else "")
        conn.request(method, target, body=body, headers={"Content-Length": str(len(body)), **(headers or {})})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def imds_token(imds, resource: str | None) -> tuple[int, dict]:
    query = {"api-version": "2018-02-01"} | ({"resource": resource} if resource else {})
    conn = http.client.HTTPConnection("127.0.0.1", int(imds.url.rsplit(":", 1)[1]), timeout=10)
    try:
        conn.request("GET", "/metadata/identity/oauth2/token?" + urllib.parse.urlencode(query),
                     headers={"Metadata": "true"})  # fmt: skip
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def put_blob(tls, endpoint, bucket, name, token, version="2021-08-06"):
    container = bucket.split("/", 1)[1]
    headers = {"Authorization": "Bearer " + token, "x-ms-version": version, "x-ms-blob-type": "BlockBlob",
               "x-ms-date": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())}  # fmt: skip
    return https_request(tls, f"{endpoint}/{container}/{name}", "PUT", headers, b"payload")


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
        env=env, unset=NO_KEY,
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
        # five more polls of the document that holds the other VM's event, and still no notice
        polls = imds.count("/metadata/scheduledevents")
        assert imds.wait_count("/metadata/scheduledevents", polls + 5) >= polls + 5
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


def test_azure_preempt_is_made_durable_then_acknowledged(blob, imds, azure_gate, tmp_path):
    bucket, env, store = blob
    ag, eid, step, seconds = run_notice(blob, imds, tmp_path)
    assert_agent_used_its_managed_identity(azure_gate, imds)
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
        unset=NO_KEY,
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


def watch_azure(blob, imds, run_root, *extra):
    bucket, env, _store = blob
    return agent(
        "watch", "--cloud", "azure", "--bucket", bucket, "--prefix", "run1",
        "--ckpt-dir", str(run_root / "ckpt"), "--run-dir", str(run_root / "run"),
        "--metadata-url", imds.url, "--poll-s", "0.2", "--scan-s", "0.2", "--http-timeout-s", "1", *extra,
        env=env, unset=NO_KEY,
    )  # fmt: skip


def test_azure_terminate_waits_for_its_not_before_less_the_window(blob, imds, tmp_path):
    """A Terminate event comes 5 to 15 minutes ahead, NotBefore saying when (the Scheduled Events doc): the
    trainer is asked for a checkpoint and goes on, and is asked to exit only when the notice window (6 s here)
    is all that is left before NotBefore."""
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "0.5", "--ckpt-every", "20")
    ag = watch_azure(blob, imds, tmp_path, "--notice-window-s", "6")
    try:
        ag.wait_event("durable", timeout=30)
        eid = imds.schedule("Terminate", not_before_s=20)
        notice = ag.wait_event("notice", timeout=10, pred=lambda e: e["kind"] == "azure-Terminate")
        assert notice["hard"] and 14 < notice["deadline_in_s"] <= 20, notice
        after = lambda e: e["ts"] >= notice["ts"]  # noqa: E731
        assert ag.wait_event("trainer_signalled", timeout=10, pred=after)["signal"] == "SIGUSR1"
        ag.wait_event("durable", timeout=20, pred=after)
        assert tr.alive() and ag.alive() and imds.acked == []
        stop = ag.wait_event("trainer_signalled", timeout=60, pred=lambda e: e["signal"] == "SIGTERM")
        deadline = notice["ts"] + notice["deadline_in_s"]
        assert deadline - 6 - 1.5 <= stop["ts"] <= deadline, (notice, stop)
        assert tr.wait(30) == 0 and ag.wait(30) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        tr.kill()
    assert imds.acked == [eid], "the only VM it names is safe: approved"


def _nothing_to_save(run: Path) -> subprocess.Popen:
    """A node whose trainer holds no checkpoint of its own (its shards go to rank 0): it just stops on SIGTERM."""
    run.mkdir(parents=True)
    (run.parent / "ckpt").mkdir(parents=True)
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (run / "trainer.pid").write_text(str(p.pid))
    return p


def test_an_event_for_two_vms_is_acknowledged_only_once_both_are_safe(blob, imds, tmp_path):
    """Approving an event "allows the event to proceed for all Resources in the event" (the Scheduled Events
    doc), so the VM whose checkpoint is durable first does not approve an event that names another VM not yet
    safe: each VM writes <prefix>/_events/<EventId>/<vm> once safe, and the event is approved once every VM it
    names has."""
    _bucket, _env, store = blob
    imds_b = AzureImds(vm_name="trainfleet_4", events=imds.hub, slow_s=3.0).start()
    tr = trainer(tmp_path / "a" / "ckpt", tmp_path / "a" / "run", "--step-s", "0.05", "--blob-mb", "0.5",
                 "--ckpt-every", "20")  # fmt: skip
    sleeper = _nothing_to_save(tmp_path / "b" / "run")
    ag_a = watch_azure(blob, imds, tmp_path / "a", "--notice-window-s", "90")
    ag_b = None
    try:
        ag_a.wait_event("durable", timeout=30)
        eid = imds.preempt(not_before_s=60, resources=["trainfleet_3", "trainfleet_4"])
        waiting = ag_a.wait_event("azure_event_waiting", timeout=40)
        assert waiting["missing"] == ["trainfleet_4"]
        assert ag_a.named("notice_durable") and ag_a.named("azure_event_marker")
        assert imds.hub.approvals == [], "approved while trainfleet_4 is not safe yet"
        ag_b = watch_azure(blob, imds_b, tmp_path / "b", "--notice-window-s", "90")
        marker_b = ag_b.wait_event("azure_event_marker", timeout=40)
        assert ag_b.wait(40) == 0, "\n".join(ag_b.stderr_lines)
        assert ag_a.wait(40) == 0, "\n".join(ag_a.stderr_lines)
        assert tr.wait(10) == 0
    finally:
        for p in (ag_a, ag_b, tr):
            if p is not None:
                p.kill()
        sleeper.kill()
        sleeper.wait()
        imds_b.stop()
    assert imds.hub.acked == [eid]
    assert imds.hub.approvals and all(t >= marker_b["ts"] for _vm, _e, t in imds.hub.approvals)
    assert sorted(store.list(f"run1/_events/{eid}/")) == [f"run1/_events/{eid}/trainfleet_3",
                                                          f"run1/_events/{eid}/trainfleet_4"]  # fmt: skip


def test_an_event_naming_a_vm_never_safe_is_left_to_start_at_not_before(blob, imds, tmp_path):
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "0.5", "--ckpt-every", "20")
    ag = watch_azure(blob, imds, tmp_path)
    try:
        ag.wait_event("durable", timeout=30)
        eid = imds.preempt(not_before_s=8, resources=["trainfleet_3", "trainfleet_9"])
        left = ag.wait_event("azure_event_not_acknowledged", timeout=40)
        assert left["missing"] == ["trainfleet_9"] and left["event_ids"] == [eid]
        assert ag.wait(20) == 0 and tr.wait(20) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        tr.kill()
    assert ag.named("notice_durable") and imds.acked == [] and imds.hub.approvals == []


def test_the_first_scheduled_events_call_may_take_minutes(blob, tmp_path):
    """"You should expect a delayed response in your first call of up to two minutes" while Scheduled Events is
    enabled (the doc): the first call waits for it instead of timing out every --http-timeout-s (1 s here) and
    never getting an answer; then notices are caught as usual."""
    slow = AzureImds(vm_name="trainfleet_3", first_delay_s=4.0, slow_s=3.0).start()
    tr = trainer(tmp_path / "ckpt", tmp_path / "run", "--step-s", "0.05", "--blob-mb", "0.5", "--ckpt-every", "20")
    ag = watch_azure(blob, slow, tmp_path)
    try:
        assert slow.wait_count("/metadata/scheduledevents", 3, timeout=60) >= 3  # answered, polled again
        assert not ag.named("metadata_error"), "the first call must wait, not time out and retry"
        ready = ag.wait_event("azure_scheduled_events_ready", timeout=1)
        assert ready["ts"] - ag.wait_event("watch_start", timeout=1)["ts"] >= 3.5, "the first answer came late"
        eid = slow.preempt(not_before_s=30)
        ag.wait_event("azure_event_acknowledged", timeout=40)
        assert ag.wait(20) == 0 and tr.wait(20) == 0, "\n".join(ag.stderr_lines)
    finally:
        ag.kill()
        tr.kill()
        slow.stop()
    assert slow.acked == [eid] and not ag.named("metadata_error")


def test_azure_block_blob_upload_for_large_files(blob, imds, azure_gate, tmp_path):
    bucket, env, _store = blob
    ckpt = tmp_path / "ckpt" / "step-00000005"
    ckpt.mkdir(parents=True)
    (ckpt / "big.bin").write_bytes(os.urandom((3 << 20) + 17))
    (ckpt / "COMPLETE").touch()
    env = {**env, "TRAINFLEET_PART_SIZE": str(1 << 20)}  # 4 blocks + a block list
    args = ("--cloud", "azure", "--bucket", bucket, "--prefix", "p")
    res = run_agent("sync", *args, "--ckpt-dir", str(tmp_path / "ckpt"), env=env, unset=NO_KEY)
    assert res.returncode == 0, res.stderr
    res = run_agent("restore", *args, "--dest", str(tmp_path / "r"), env=env, unset=NO_KEY)
    assert res.stdout.strip() == "5", res.stderr
    assert (tmp_path / "r/step-00000005/big.bin").read_bytes() == (ckpt / "big.bin").read_bytes()
    assert_agent_used_its_managed_identity(azure_gate, imds)


def test_the_stores_managed_identity_token_comes_from_the_imds(imds, monkeypatch):
    """The credential the agent's AzureBlobStore signs with: azure-identity's ManagedIdentityCredential, sent to
    the IMDS the store was given, for the storage resource; the token is reused until it nears expiry."""
    monkeypatch.delenv("AZURE_STORAGE_KEY", raising=False)
    monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", "")  # the store sets it; restored after the test
    store = load_agent_module().AzureBlobStore(f"{AZURITE_ACCOUNT}/ckpt", imds.url)
    credential = store.container.credential
    assert type(credential).__name__ == "ManagedIdentityCredential"
    scope = "https://storage.azure.com/.default"  # what azure-storage-blob asks its credential for
    first = credential.get_token(scope)
    claims = jwt_claims_unverified(first.token)
    assert claims["aud"].rstrip("/") == STORAGE.rstrip("/")
    assert claims["iss"].startswith("https://sts.windows.net/")
    assert claims["nbf"] <= time.time() < claims["exp"] == first.expires_on
    assert credential.get_token(scope).token == first.token  # cached until it nears expiry
    assert imds.count("/metadata/identity/oauth2/token", 200) == 1 and storage_tokens_issued(imds) == 1


def test_imds_token_needs_a_resource_and_its_aud_is_that_resource(imds):
    # the doc's error table: 400 for a request without a (known) resource
    status, doc = imds_token(imds, None)
    assert (status, doc["error"]) == (400, "invalid_request")
    status, doc = imds_token(imds, "https://no-such-app.example/")
    assert (status, doc["error"]) == (400, "invalid_resource")
    for resource in (STORAGE, MANAGEMENT):
        status, doc = imds_token(imds, resource)
        claims = jwt_claims_unverified(doc["access_token"])
        assert status == 200 and doc["resource"] == resource and claims["aud"] == resource
        # IMDS answers with strings; exp/nbf in the token are the same instants
        assert int(doc["expires_on"]) == claims["exp"] and int(doc["not_before"]) == claims["nbf"]
        assert 3000 < int(doc["expires_in"]) <= 3600


def test_azurite_refuses_a_token_for_another_audience(blob, azurite_tls, imds, tls):
    bucket = blob[0]
    _, management = imds_token(imds, MANAGEMENT)
    status, headers, body = put_blob(tls, azurite_tls.endpoint, bucket, "wrong-aud", management["access_token"])
    assert status in (401, 403), body
    assert b"Invalid token audience" in body
    _, storage = imds_token(imds, STORAGE)
    status, _h, body = put_blob(tls, azurite_tls.endpoint, bucket, "right-aud", storage["access_token"])
    assert status == 201, body  # the same request with the storage token goes through


def test_bearer_needs_service_version_2017_11_09_or_later(blob, azure_gate, imds, tls):
    bucket = blob[0]
    endpoint = f"{azure_gate.url}/{AZURITE_ACCOUNT}"
    token = imds_token(imds, STORAGE)[1]["access_token"]
    for old in ("2017-07-29", ""):
        status, headers, body = put_blob(tls, endpoint, bucket, "old-version", token, version=old)
        assert status == 403 and headers["x-ms-error-code"] == "AuthenticationFailed", body
        assert b"Authentication scheme Bearer is not supported in this version." in body
    status, _h, body = put_blob(tls, endpoint, bucket, "oldest-allowed", token, version="2017-11-09")
    assert status == 201, body


def test_management_api_takes_only_management_tokens(imds):
    arm = AzureArmApi().start()
    try:
        arm.add_group("trainfleet-vmss", ["10.1.0.4"])
        path = arm.prefix + "trainfleet-vmss/networkInterfaces?api-version=2018-10-01"

        def get(authorization=None):
            conn = http.client.HTTPConnection("127.0.0.1", int(arm.url.rsplit(":", 1)[1]), timeout=10)
            try:
                conn.request("GET", path, headers={"Authorization": authorization} if authorization else {})
                resp = conn.getresponse()
                return resp.status, json.loads(resp.read())
            finally:
                conn.close()

        management = imds_token(imds, MANAGEMENT)[1]["access_token"]
        storage = imds_token(imds, STORAGE)[1]["access_token"]
        assert get("Bearer " + management)[0] == 200
        status, doc = get("Bearer " + storage)
        assert status == 401 and doc["error"]["code"] == "InvalidAuthenticationTokenAudience"
        assert f"wrong audience or resource '{STORAGE}'" in doc["error"]["message"]
        assert get()[1]["error"]["code"] == "AuthenticationFailed"
        head, body, _sig = management.split(".")
        assert get(f"Bearer {head}.{body}.forged")[1]["error"]["code"] == "InvalidAuthenticationToken"
        expired, _claims = entra_token(MANAGEMENT, lifetime_s=-60)
        assert get("Bearer " + expired)[1]["error"]["code"] == "ExpiredAuthenticationToken"
    finally:
        arm.stop()
