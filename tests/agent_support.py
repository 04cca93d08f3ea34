"""Helpers for the agent tests: run the real agent and fake trainer as processes, start moto's server.

Every process is started here on 127.0.0.1 and stopped by its own pid; nothing else is touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
AGENT = REPO / "templates" / "agent" / "trainfleet_agent.py"
FAKE_TRAINER = Path(__file__).resolve().parent / "agent_fake_trainer.py"

from tests.moto_server import ServerProcess  # noqa: E402


class Proc:
    """A child process whose stderr JSON lines (the agent's log) are collected as they arrive."""

    def __init__(self, argv: list[str], env: dict | None = None):
        self.argv = argv
        self.p = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
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


def agent(*args: str, env: dict | None = None) -> Proc:
    return Proc([sys.executable, str(AGENT), *args], env)


def run_agent(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(AGENT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def trainer(ckpt_dir, run_dir, *extra: str) -> Proc:
    return Proc(
        [sys.executable, str(FAKE_TRAINER), "--ckpt-dir", str(ckpt_dir), "--run-dir", str(run_dir), *extra]
    )


def make_step(ckpt_dir: Path, step: int, files: dict[str, int | bytes]) -> Path:
    """Write a complete checkpoint the way the contract says: temp dir, rename, COMPLETE last."""
    tmp = ckpt_dir / f".tmp-{step}"
    for rel, content in files.items():
        f = tmp / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(content if isinstance(content, bytes) else os.urandom(content))
    final = ckpt_dir / f"step-{step:08d}"
    tmp.rename(final)
    (final / "COMPLETE").touch()
    return final


class GcsEmulator:
    """gcp-storage-emulator (PyPI) in its own process on 127.0.0.1, in memory, one default bucket."""

    LAUNCH = (
        "import sys\n"
        "from gcp_storage_emulator.server import create_server\n"
        "s = create_server('127.0.0.1', 0, in_memory=True, default_bucket=sys.argv[1])\n"
        "s.start()\n"
        "print(s._api._httpd.server_address[1], flush=True)\n"
        "import time\n"
        "while True: time.sleep(3600)\n"
    )

    def __init__(self, bucket: str):
        self.p = subprocess.Popen(
            [sys.executable, "-c", self.LAUNCH, bucket],
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

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait(10)


AZURITE_BIN = REPO / ".venv" / "azurite" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's documented development account (public, fixed in Azurite and the Azure Storage Emulator).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class Azurite(ServerProcess):
    """Azurite's blob service (npm, installed by .ci/run under .venv/azurite) in memory on 127.0.0.1."""

    def __init__(self, workdir: Path):
        super().__init__(
            [str(AZURITE_BIN), "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence",
             "--disableTelemetry", "--skipApiVersionCheck", "--silent"],
            r"listens on (http://127\.0\.0\.1:\d+)",
            "azurite",
            cwd=workdir,
        )  # fmt: skip
        self.endpoint = f"{self.url}/{AZURITE_ACCOUNT}"


def load_agent_module():
    """The agent file as a module (for test setup such as creating an Azure container)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("trainfleet_agent_under_test", AGENT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
