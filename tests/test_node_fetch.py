"""trainfleet-fetch.py on GCP and Azure, run as a node runs it (the AWS side is in test_userdata_node.py, against
moto's S3): the agent zipapp and the example trainer are fetched from the fleet's storage with the node's own
identity and installed only when they match the sha256 the user-data pins.

GCP: gcp-storage-emulator behind GcsAuthProxy (which checks the service account's bearer token and its scopes, as
Cloud Storage does), and a GCE metadata server issuing that token. Azure: Azurite over HTTPS with `--oauth basic`
behind AzureBearerVersionGate (a bearer token and an x-ms-version that takes it), an IMDS issuing the managed
identity's token for https://storage.azure.com/. The script is the rendered part, with /opt/trainfleet pointed at
a temporary folder; it gets no account key and no credentials but its metadata server's.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
import uuid

import pytest

from infra.config import StackConfig
from infra.userdata import render_user_data
from tests.agent_support import (
    AZURITE_ACCOUNT,
    azurite_shared_key_client,
)
from tests.metadata_servers import AzureImds, GceMetadata

GCS_BUCKET = "fetch-gcp"
STORAGE = "https://storage.azure.com/"
# What a node's environment would not have: every override and credential the tests' own process may carry.
CLEAN = ("STORAGE_EMULATOR_HOST", "GCE_METADATA_HOST", "TRAINFLEET_", "AZURE_", "AWS_", "GOOGLE_")

FLEETS = {
    "gcp": {"name": "gf", "cloud": "gcp", "region": "us-central1", "instance_type": "a2-highgpu-1g", "nodes": 1},
    "azure": {"name": "af", "cloud": "azure", "region": "eastus", "instance_type": "Standard_NC24ads_A100_v4",
              "nodes": 1},
}  # fmt: skip


def render(cloud: str, bucket: str, assets_bucket: str | None = None):
    config = StackConfig.from_sections(
        {"job": {"name": "tj", "params": "1B", "tokens": "1B"}, "fleets": [FLEETS[cloud]]}
    )
    return render_user_data(
        "t", config, config.fleets[0], bucket=bucket, group="g", assets_bucket=assets_bucket
    )


def node_script(r, tmp_path):
    """The rendered fetch script, installing under tmp_path/opt instead of /opt/trainfleet."""
    home = tmp_path / "opt"
    script = tmp_path / "trainfleet-fetch.py"
    script.write_text(r.parts["trainfleet-fetch.py"].replace("/opt/trainfleet", str(home)))
    return home, script


def run_fetch(script, env: dict) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(CLEAN)}
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=base | env
    )


def assert_installed(r, home):
    agent = home / "trainfleet_agent.pyz"
    assert agent.read_bytes() == base64.b64decode(r.parts["trainfleet_agent.pyz"])  # installed decoded
    assert os.access(agent, os.X_OK)
    assert (home / "train.py").read_text() == r.parts["train.py"]
    # what was fetched is the agent: its CLI answers
    ran = subprocess.run([sys.executable, str(agent), "--help"], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and "watch" in ran.stdout, ran.stderr


def tampered(text: str) -> str:
    return text + "# tampered\n"


# ---------------------------------------------------------------------------------------------------- GCP


@pytest.fixture
def gce():
    srv = GceMetadata().start()
    yield srv
    srv.stop()


def gcs_put(gcs, key: str, text: str) -> None:
    """The tests' own upload, straight to the emulator (JSON API simple upload) into this module's bucket."""
    gcs.bucket(GCS_BUCKET)
    query = urllib.parse.urlencode({"uploadType": "media", "name": key})
    req = urllib.request.Request(
        f"{gcs.url}/upload/storage/v1/b/{GCS_BUCKET}/o?{query}",
        data=text.encode(),
        method="POST",
        headers={"Content-Type": "text/plain; charset=utf-8"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert json.load(resp)["name"] == key


def gcp_node(gcs, tmp_path, tamper=False):
    """The fleet's assets uploaded (what the Pulumi component does; each test uploads them again, so a tampered
    one does not outlive its test) and the node's script."""
    r = render("gcp", GCS_BUCKET)
    for key, text in r.assets.items():
        gcs_put(gcs, key, tampered(text) if tamper else text)
    home, script = node_script(r, tmp_path)
    return r, home, script


def test_gcp_fetch_installs_the_pinned_files_with_the_service_accounts_token(gcs, gcs_proxy, gce, tmp_path):
    r, home, script = gcp_node(gcs, tmp_path)
    seen = len(gcs_proxy.seen)
    result = run_fetch(script, {"TRAINFLEET_GCS_ENDPOINT": gcs_proxy.url, "TRAINFLEET_METADATA_URL": gce.url})
    assert result.returncode == 0, result.stderr
    assert_installed(r, home)
    requests = gcs_proxy.seen[seen:]
    # a media GET per fetched file: the agent, the trainer and its 2 modules, the boot and resize scripts
    assert [s["method"] for s in requests] == ["GET"] * 6, requests
    assert {s["auth"] for s in requests} == {"Bearer"} and {s["status"] for s in requests} == {200}
    assert all(s["path"].endswith("?alt=media") for s in requests)
    assert gce.count("service-accounts/default/token", 200) == 1
    # a restart (ExecStartPre) finds the files in place and asks for nothing
    again = run_fetch(script, {"TRAINFLEET_GCS_ENDPOINT": gcs_proxy.url, "TRAINFLEET_METADATA_URL": gce.url})
    assert again.returncode == 0 and len(gcs_proxy.seen) == seen + 6 and gce.count("default/token") == 1


def test_gcp_fetch_without_a_storage_scope_is_refused_and_installs_nothing(gcs, gcs_proxy, tmp_path):
    """The proxy answers 403 as Cloud Storage does for a token without a storage scope; the script retries and
    gives up without installing anything."""
    r, home, script = gcp_node(gcs, tmp_path)
    with GceMetadata(scopes=["https://www.googleapis.com/auth/compute"]) as gce:
        result = run_fetch(
            script,
            {
                "TRAINFLEET_GCS_ENDPOINT": gcs_proxy.url,
                "TRAINFLEET_METADATA_URL": gce.url,
                "TRAINFLEET_FETCH_ATTEMPTS": "2",
            },
        )
    assert result.returncode == 1
    assert "HTTP Error 403" in result.stderr
    assert not (home / "trainfleet_agent.pyz").exists()


def test_gcp_fetch_refuses_a_file_that_does_not_match_its_pin(gcs, gcs_proxy, gce, tmp_path):
    _, home, script = gcp_node(gcs, tmp_path, tamper=True)
    result = run_fetch(
        script,
        {
            "TRAINFLEET_GCS_ENDPOINT": gcs_proxy.url,
            "TRAINFLEET_METADATA_URL": gce.url,
            "TRAINFLEET_FETCH_ATTEMPTS": "2",
        },
    )
    assert result.returncode == 1
    assert "does not match its pinned sha256" in result.stderr
    assert not (home / "trainfleet_agent.pyz").exists() and not (home / "train.py").exists()


def test_gcp_fetch_talks_to_an_emulator_without_credentials(gcs, tmp_path):
    """STORAGE_EMULATOR_HOST (host:port, no scheme), as Google's client libraries read it: the emulator is the
    endpoint and no token is asked for (no metadata server is reachable here)."""
    r, home, script = gcp_node(gcs, tmp_path)
    result = run_fetch(
        script, {"STORAGE_EMULATOR_HOST": gcs.host, "TRAINFLEET_METADATA_URL": "http://127.0.0.1:9"}
    )
    assert result.returncode == 0, result.stderr
    assert_installed(r, home)


# ---------------------------------------------------------------------------------------------------- Azure


@pytest.fixture
def imds():
    srv = AzureImds(vm_name="trainfleet_0").start()
    yield srv
    srv.stop()


@pytest.fixture
def node_files(azurite_tls, tls, monkeypatch):
    """A fresh container (the fleet's NodeFiles container) and the tests' own shared-key client for it."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))  # the tests' client talks HTTPS to Azurite too
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tls.ca))
    bucket = f"{AZURITE_ACCOUNT}/files{uuid.uuid4().hex[:10]}"
    store = azurite_shared_key_client(azurite_tls.endpoint, bucket)
    store.container.create_container()
    return bucket, store


def azure_node(node_files, tmp_path, tamper=False):
    bucket, store = node_files
    r = render("azure", "ckptaccount/checkpoints", assets_bucket=bucket)
    for key, text in r.assets.items():  # what the Pulumi component uploads
        store.put_bytes(key, (tampered(text) if tamper else text).encode())
    home, script = node_script(r, tmp_path)
    return r, home, script


def azure_env(azure_gate, imds, tls, **extra) -> dict:
    return {
        "TRAINFLEET_AZURE_BLOB_ENDPOINT": f"{azure_gate.url}/{AZURITE_ACCOUNT}",
        "TRAINFLEET_METADATA_URL": imds.url,
        "SSL_CERT_FILE": str(tls.ca),  # the node trusts its CA bundle; here the test CA
        **extra,
    }


def test_azure_fetch_installs_the_pinned_files_with_the_managed_identity(
    node_files, azure_gate, imds, tls, tmp_path
):
    r, home, script = azure_node(node_files, tmp_path)
    assert (
        f'BUCKET = "{node_files[0]}"' in script.read_text()
    )  # the node-files container, not the checkpoints'
    seen = len(azure_gate.seen)
    result = run_fetch(script, azure_env(azure_gate, imds, tls))
    assert result.returncode == 0, result.stderr
    assert_installed(r, home)
    requests = azure_gate.seen[seen:]
    # a GET per fetched file: the agent, the trainer and its 2 modules, the boot and resize scripts
    assert [s["method"] for s in requests] == ["GET"] * 6, requests
    assert {s["auth"] for s in requests} == {"Bearer"} and {s["status"] for s in requests} == {200}
    assert imds.count("resource=" + urllib.parse.quote(STORAGE, safe=""), 200) == 1


def test_azure_fetch_refuses_a_file_that_does_not_match_its_pin(node_files, azure_gate, imds, tls, tmp_path):
    _, home, script = azure_node(node_files, tmp_path, tamper=True)
    result = run_fetch(script, azure_env(azure_gate, imds, tls, TRAINFLEET_FETCH_ATTEMPTS="2"))
    assert result.returncode == 1
    assert "does not match its pinned sha256" in result.stderr
    assert not (home / "trainfleet_agent.pyz").exists() and not (home / "train.py").exists()


def test_azure_fetch_without_its_token_gets_nothing(node_files, azure_gate, tls, tmp_path):
    """Azurite (--oauth basic) refuses a request without a token; with no IMDS to give one the script retries,
    then gives up, installing nothing."""
    _, home, script = azure_node(node_files, tmp_path)
    result = run_fetch(
        script,
        {
            "TRAINFLEET_AZURE_BLOB_ENDPOINT": f"{azure_gate.url}/{AZURITE_ACCOUNT}",
            "TRAINFLEET_METADATA_URL": "http://127.0.0.1:9",
            "SSL_CERT_FILE": str(tls.ca),
            "TRAINFLEET_FETCH_ATTEMPTS": "2",
        },
    )
    assert result.returncode == 1 and "attempt 2" in result.stderr
    assert not (home / "trainfleet_agent.pyz").exists()
