"""HTTP with timeouts and retries, file hashing and slicing, a small thread pool."""

from __future__ import annotations

import concurrent.futures
import hashlib
import http.client
import json
import random
import time
import urllib.parse

from .common import CHUNK, log


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


def with_retries(fn, what: str, attempts: int = 5, base: float = 0.3):
    """Retry transient failures (connection errors, timeouts, 429, 5xx) with exponential backoff."""
    for i in range(attempts):
        try:
            return fn()
        except HTTPError as e:
            if e.status not in (408, 429) and e.status < 500 or i == attempts - 1:
                raise
            err = e
        except (OSError, http.client.HTTPException) as e:
            if i == attempts - 1:
                raise
            err = e
        delay = min(base * 2**i, 8.0) * (0.5 + random.random())
        log("retry", what=what, attempt=i + 1, error=str(err)[:200], sleep_s=round(delay, 2))
        time.sleep(delay)
    raise AssertionError("unreachable")


def sha256_file(path: str, offset: int = 0, length: int | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(offset)
        remaining = length
        while True:
            n = CHUNK if remaining is None else min(CHUNK, remaining)
            if n == 0:
                break
            b = f.read(n)
            if not b:
                break
            h.update(b)
            if remaining is not None:
                remaining -= len(b)
    return h.hexdigest()


def hash_file(path: str, part_size: int) -> tuple[str, list[str]]:
    """One read of the file: its sha256 and the sha256 of each `part_size` part (for signed part uploads)."""
    whole, cur, parts, in_part = hashlib.sha256(), hashlib.sha256(), [], 0
    with open(path, "rb") as f:
        while True:
            b = f.read(min(CHUNK, part_size - in_part))
            if not b:
                break
            whole.update(b)
            cur.update(b)
            in_part += len(b)
            if in_part == part_size:
                parts.append(cur.hexdigest())
                cur, in_part = hashlib.sha256(), 0
    if in_part or not parts:
        parts.append(cur.hexdigest())
    return whole.hexdigest(), parts


def run_parallel(fns: list, workers: int) -> list:
    """Run callables on a small thread pool; results in order; the first error is raised (after the rest)."""
    if workers <= 1 or len(fns) <= 1:
        return [fn() for fn in fns]
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(fns))) as pool:
        futs = [pool.submit(fn) for fn in fns]
        concurrent.futures.wait(futs)
        return [f.result() for f in futs]


class FileSlice:
    """A read-only, bounded window of a file, streamed by http.client without loading it in memory."""

    def __init__(self, path: str, offset: int, length: int):
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._f.seek(offset)
        self._left = length

    def read(self, n: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        n = self._left if n is None or n < 0 else min(n, self._left)
        b = self._f.read(n)
        self._left -= len(b)
        return b

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


