"""The local stand-ins the agent, node and refresh tests talk to, one of each per test process (per pytest-xdist
worker), started the first time a test asks for it: moto's server (S3, EC2, Auto Scaling), gcp-storage-emulator,
and Azurite, plain or behind TLS with OAuth (the mode trainfleet's storage accounts need).

Tests share a server, never state: each makes its own buckets, prefixes, containers and groups under unique
names, and nothing calls moto's reset. The auth proxies in front of the storage emulators record what passed
through them, which tests assert on, so each test gets its own. Registered by tests/conftest.py.
"""

from __future__ import annotations

import pytest

from tests.agent_support import AZURITE_BIN, Azurite, GcsEmulator, TlsFiles, make_tls_files
from tests.moto_server import MotoServer
from tests.needs import need
from tests.storage_auth_proxies import AzureBearerVersionGate, GcsAuthProxy


@pytest.fixture(scope="session")
def moto():
    srv = MotoServer()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def gcs():
    """The emulator; `gcs.bucket(name)` makes a bucket the first time it is named."""
    srv = GcsEmulator()
    yield srv
    srv.stop()


@pytest.fixture
def gcs_proxy(gcs):
    """What a node's requests go through: only live tokens with a storage scope reach the emulator."""
    srv = GcsAuthProxy(gcs.url).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def tls(tmp_path_factory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


def _azurite(folder, tls: TlsFiles | None):
    need(AZURITE_BIN.exists(), "Azurite", "npm install --prefix .venv/azurite azurite@3, as .ci/run does")
    return Azurite(folder, tls)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    """Azurite over plain HTTP with its shared key: the object-store contract tests."""
    srv = _azurite(tmp_path_factory.mktemp("azurite"), None)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def azurite_tls(tmp_path_factory, tls):
    """Azurite over HTTPS checking OAuth bearer tokens: what a node's managed identity meets."""
    srv = _azurite(tmp_path_factory.mktemp("azurite-tls"), tls)
    yield srv
    srv.stop()


@pytest.fixture
def azure_gate(azurite_tls, tls):
    """In front of Azurite: Azure Storage's x-ms-version floor for bearer tokens (Azurite checks the token)."""
    srv = AzureBearerVersionGate(azurite_tls.url, tls).start()
    yield srv
    srv.stop()
