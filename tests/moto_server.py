"""Local servers the tests start as processes: moto's server on 127.0.0.1 for every test that needs AWS APIs
(S3, EC2, Auto Scaling, Cost Explorer), and the `ServerProcess` base that Azurite's helper shares.

Each is started on port 0 and its URL is read from its own start-up line, so no other server can take
the port in between; each is stopped by its own pid.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request


class ServerProcess:
    """A local server started on port 0 whose URL is read from its own start-up line; stopped by its pid."""

    def __init__(self, argv: list[str], url_pattern: str, name: str, cwd=None) -> None:
        self.p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        end = time.time() + 30
        self.url = None
        while time.time() < end:
            line = self.p.stdout.readline()
            m = re.search(url_pattern, line or "")
            if m:
                self.url = m.group(1)
                break
            if not line and self.p.poll() is not None:
                break
        if not self.url:
            self.stop()
            raise RuntimeError(f"{name} did not start")
        # Keep draining its output so a chatty server never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in self.p.stdout], daemon=True).start()

    def stop(self) -> None:
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.p.pid, signal.SIGKILL)
                self.p.wait(10)


class MotoServer(ServerProcess):
    def __init__(self) -> None:
        super().__init__(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p0"],
            r"Running on (http://127\.0\.0\.1:\d+)",
            "moto server",
        )

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL_EC2": self.url}

    def client(self, service: str):
        """A boto3 client of this server, with the test credentials: what another node or an operator sees."""
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def reset(self) -> None:
        urllib.request.urlopen(
            urllib.request.Request(f"{self.url}/moto-api/reset", method="POST"), timeout=10
        )
