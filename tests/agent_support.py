"""Helpers for the agent tests: run the real agent and fake trainer as processes, start moto's server.

Every process is started here on 127.0.0.1 and stopped by its own pid; nothing else is touched.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
AGENT_SRC = REPO / "templates" / "agent"  # holds the package trainfleet_agent/
FAKE_TRAINER = Path(__file__).resolve().parent / "agent_fake_trainer.py"

from tests.moto_server import ServerProcess  # noqa: E402


def _build_agent() -> Path:
    """The agent exactly as nodes get it: the zipapp infra/agent_artifact.py builds, written once per process."""
    import tempfile

    from infra.agent_artifact import ZIPAPP_NAME, build_zipapp

    folder = Path(tempfile.mkdtemp(prefix="trainfleet-agent-"))
    path = folder / ZIPAPP_NAME
    path.write_bytes(build_zipapp())
    return path


AGENT = _build_agent()


def child_env(env: dict | None, unset: tuple[str, ...] = ()) -> dict:
    """This process's environment plus `env`, without the variables named in `unset`."""
    merged = {**os.environ, **(env or {})}
    for name in unset:
        merged.pop(name, None)
    return merged


class Proc:
    """A child process whose stderr JSON lines (the agent's log) are collected as they arrive."""

    def __init__(self, argv: list[str], env: dict | None = None, unset: tuple[str, ...] = ()):
        self.argv = argv
        self.p = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(env, unset),
        )
        self.events: list[dict] = []
        self.stderr_lines: list[str] = []
        self.stdout_lines: list[str] = []
        self._cv = threading.Condition()
        threading.Thread(
            target=self._pump, args=(self.p.stderr, self.stderr_lines, True), daemon=True
        ).start()
        threading.Thread(
            target=self._pump, args=(self.p.stdout, self.stdout_lines, False), daemon=True
        ).start()

    def _pump(self, stream, sink, parse):
        for line in stream:
            with self._cv:
                sink.append(line.rstrip("\n"))
                if parse:
                    try:
                        self.events.append(json.loads(line))
                    except ValueError:
                        pass
                self._cv.notify_all()

    def wait_event(self, name: str, timeout: float = 30.0, pred=lambda e: True) -> dict:
        end = time.time() + timeout
        with self._cv:
            while True:
                for e in self.events:
                    if e.get("event") == name and pred(e):
                        return e
                left = end - time.time()
                if left <= 0:
                    raise AssertionError(
                        f"no {name!r} event in {timeout}s; log:\n" + "\n".join(self.stderr_lines[-60:])
                    )
                self._cv.wait(min(left, 0.2))

    def wait_count(self, name: str, count: int, timeout: float = 30.0) -> list[dict]:
        """Wait until `count` events called `name` have been seen: an event count, not a time window."""
        end = time.time() + timeout
        with self._cv:
            while True:
                seen = [e for e in self.events if e.get("event") == name]
                if len(seen) >= count:
                    return seen
                left = end - time.time()
                if left <= 0:
                    raise AssertionError(
                        f"{len(seen)} of {count} {name!r} events in {timeout}s; log:\n"
                        + "\n".join(self.stderr_lines[-60:])
                    )
                self._cv.wait(min(left, 0.2))

    def named(self, name: str) -> list[dict]:
        with self._cv:
            return [e for e in self.events if e.get("event") == name]

    def wait(self, timeout: float) -> int:
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                "process did not exit; log:\n" + "\n".join(self.stderr_lines[-60:])
            ) from None

    def alive(self) -> bool:
        return self.p.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.p.poll() is None:
            os.kill(self.p.pid, sig)
            self.p.wait(10)


def agent(*args: str, env: dict | None = None, unset: tuple[str, ...] = ()) -> Proc:
    return Proc([sys.executable, str(AGENT), *args], env, unset)


def run_agent(
    *args: str, env: dict | None = None, timeout: float = 60, unset: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(AGENT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=child_env(env, unset),
    )


def trainer(ckpt_dir, run_dir, *extra: str) -> Proc:
    return Proc(
        [sys.executable, str(FAKE_TRAINER), "--ckpt-dir", str(ckpt_dir), "--run-dir", str(run_dir), *extra]
    )


def aws_job_order(instances: list[dict]) -> list[dict]:
    """DescribeInstances records in the order every node ranks them (PROTOCOL.md `peers`): on-demand before spot
    (instanceLifecycle), then launch time, then private IP. moto stamps LaunchTime to the second, so instances
    launched together may straddle a second: IP order alone is not the rank order."""
    return sorted(instances, key=lambda i: (i.get("InstanceLifecycle") == "spot", i["LaunchTime"],
                                            ipaddress.ip_address(i["PrivateIpAddress"])))  # fmt: skip


def make_step(
    ckpt_dir: Path, step: int, files: dict[str, int | bytes], node_rank: int | None = None, nodes: int = 1
) -> Path:
    """Write a complete checkpoint the way the contract says: temp dir, rename, COMPLETE last (naming the node
    rank and node count that saved it when `node_rank` is given, as templates/train.py does)."""
    tmp = ckpt_dir / f".tmp-{step}"
    for rel, content in files.items():
        f = tmp / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(content if isinstance(content, bytes) else os.urandom(content))
    final = ckpt_dir / f"step-{step:08d}"
    tmp.rename(final)
    marker = {"step": step, "node_rank": node_rank, "nodes": nodes} if node_rank is not None else None
    (final / "COMPLETE").write_text(json.dumps(marker) if marker else "")
    return final


class GcsEmulator:
    """gcp-storage-emulator (PyPI) in its own process on 127.0.0.1, in memory; buckets made with `bucket`."""

    LAUNCH = (
        "from gcp_storage_emulator.server import create_server\n"
        "s = create_server('127.0.0.1', 0, in_memory=True)\n"
        "s.start()\n"
        "print(s._api._httpd.server_address[1], flush=True)\n"
        "import time\n"
        "while True: time.sleep(3600)\n"
    )

    def __init__(self):
        self.p = subprocess.Popen(
            [sys.executable, "-c", self.LAUNCH],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        port = self.p.stdout.readline().strip()
        if not port.isdigit():
            self.stop()
            raise RuntimeError("gcp-storage-emulator did not start")
        self.host = f"127.0.0.1:{port}"
        self.url = "http://" + self.host
        self.buckets: set[str] = set()

    def bucket(self, name: str) -> str:
        """`name`, created in the emulator the first time it is asked for (the JSON API's buckets.insert)."""
        import urllib.request

        if name not in self.buckets:
            request = urllib.request.Request(
                f"{self.url}/storage/v1/b?project=trainfleet-tests",
                data=json.dumps({"name": name}).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            urllib.request.urlopen(request, timeout=10).close()
            self.buckets.add(name)
        return name

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait(10)


AZURITE_BIN = REPO / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's documented development account (public, fixed in Azurite and the Azure Storage Emulator).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass(frozen=True)
class TlsFiles:
    ca: Path  # what a client trusts (a node's CA bundle)
    cert: Path  # the server's certificate for 127.0.0.1, signed by the CA
    key: Path


def make_tls_files(folder: Path) -> TlsFiles:
    """A throwaway CA and a server certificate for 127.0.0.1 it signed (valid for a day), as PEM files."""
    from cryptography import x509  # moto needs it, so the test install always has it
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)

    def certificate(subject: str, key, issuer: str, issuer_key, extensions):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
        )
        for ext, critical in extensions:
            builder = builder.add_extension(ext, critical=critical)
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_usage = x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                             data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                             encipher_only=False, decipher_only=False)  # fmt: skip
    ca = certificate("trainfleet test CA", ca_key, "trainfleet test CA", ca_key, [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (ca_usage, True),
        (x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False),
    ])  # fmt: skip
    server = certificate("127.0.0.1", server_key, "trainfleet test CA", ca_key, [
        (x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                      x509.DNSName("localhost")]), False),
        (x509.BasicConstraints(ca=False, path_length=None), True),
        (x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False),
        (x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False),
    ])  # fmt: skip
    files = TlsFiles(folder / "ca.pem", folder / "cert.pem", folder / "key.pem")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return files


class Azurite(ServerProcess):
    """Azurite's blob service (npm, installed by .ci/run under .venv/azurite) in memory on 127.0.0.1.

    With `tls`, it serves HTTPS and checks OAuth bearer tokens (``--oauth basic``: issuer, audience, nbf/exp;
    not the signature), the mode trainfleet's storage accounts need since they turn shared keys off:
    https://github.com/Azure/Azurite#oauth-authentication . Azurite still takes the shared key too, which
    the tests' own client uses to set up and read back.
    """

    def __init__(self, workdir: Path, tls: TlsFiles | None = None):
        argv = [str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence",
                "--disableTelemetry", "--silent"]  # fmt: skip
        if tls:
            argv += ["--oauth", "basic", "--cert", str(tls.cert), "--key", str(tls.key)]
        super().__init__(argv, r"listens on (https?://127\.0\.0\.1:\d+)", "azurite", cwd=workdir)
        self.endpoint = f"{self.url}/{AZURITE_ACCOUNT}"


def azurite_shared_key_client(endpoint: str, bucket: str):
    """The tests' own blob client: the agent's AzureBlobStore signing with Azurite's account key, for setting
    up containers and reading results back (the agent under test never gets the key)."""
    from unittest import mock

    env = {"TRAINFLEET_AZURE_BLOB_ENDPOINT": endpoint, "AZURE_STORAGE_KEY": AZURITE_KEY}
    with mock.patch.dict(os.environ, env):
        return load_agent_module().AzureBlobStore(bucket)


def load_agent_module(submodule: str | None = None):
    """The agent's package imported from templates/agent: one submodule (to monkeypatch what it uses), or by
    default every submodule's names in one namespace (for test setup such as creating an Azure container)."""
    import importlib
    import pkgutil
    import types

    if str(AGENT_SRC) not in sys.path:
        sys.path.insert(0, str(AGENT_SRC))
    package = importlib.import_module("trainfleet_agent")
    if submodule:
        return importlib.import_module(f"trainfleet_agent.{submodule}")
    facade = types.ModuleType("trainfleet_agent_all")
    for info in pkgutil.iter_modules(package.__path__):
        if info.name == "__main__":
            continue
        mod = importlib.import_module(f"trainfleet_agent.{info.name}")
        facade.__dict__.update({k: v for k, v in vars(mod).items() if not k.startswith("__")})
    return facade
