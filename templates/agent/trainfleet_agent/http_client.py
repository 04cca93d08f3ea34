"""HTTP with timeouts for the local metadata services (metadata.py), and a small thread pool.

The object stores and the control-plane calls go through the clouds' SDKs (stores.py, membership.py)."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import urllib.parse

from .common import CHUNK


class HTTPError(Exception):
    def __init__(self, status: int, body: bytes, what: str = ""):
        super().__init__(f"HTTP {status} {what}: {body[:300]!r}")
        self.status = status
        self.body = body


class Response:
    def __init__(self, status: int, headers: dict, data: bytes):
        self.status = status
        self.headers = headers
        self.data = data

    def json(self):
        return json.loads(self.data.decode() or "null")

    def text(self) -> str:
        return self.data.decode()


def _connect(url: str, timeout: float):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout, blocksize=CHUNK)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout, blocksize=CHUNK)
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    return conn, target


def http_open(method: str, url: str, headers: dict | None = None, body=None, timeout: float = 30.0):
    """Send a request; return (connection, response) with the body unread (for streaming downloads)."""
    conn, target = _connect(url, timeout)
    hdrs = dict(headers or {})
    if body is None and method in ("PUT", "POST", "PATCH"):
        body = b""
    if isinstance(body, (bytes, bytearray)):  # noqa: UP038 - python3 >= 3.8 on nodes
        hdrs.setdefault("Content-Length", str(len(body)))
    try:
        conn.request(method, target, body=body, headers=hdrs)
        return conn, conn.getresponse()
    except BaseException:
        conn.close()
        raise


def http_request(
    method: str, url: str, headers: dict | None = None, body=None, timeout: float = 30.0
) -> Response:
    conn, resp = http_open(method, url, headers, body, timeout)
    try:
        data = resp.read()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def run_parallel(fns: list, workers: int) -> list:
    """Run callables on a small thread pool; results in order; the first error is raised (after the rest)."""
    if workers <= 1 or len(fns) <= 1:
        return [fn() for fn in fns]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(fns))) as pool:
        futs = [pool.submit(fn) for fn in fns]
        concurrent.futures.wait(futs)
        return [f.result() for f in futs]
