#!/usr/bin/env python3
"""trainfleet on-node agent: spot-notice watcher, checkpoint sync, restore, peer discovery, scale-to-zero.

Python standard library only. cloud-init copies this single file onto every node and user-data runs it as
``python3 trainfleet_agent.py <command> ...`` (it also runs unchanged as ``__main__.py`` of a zipapp).

Contract (fixed; the long form is templates/agent/PROTOCOL.md):

Checkpoints on the node
    ``$TRAINFLEET_CKPT_DIR/step-<N:08d>/...``. The trainer writes a checkpoint into a temporary directory,
    renames it to ``step-<N:08d>``, then writes ``step-<N:08d>/COMPLETE`` (empty) last. Only directories
    holding ``COMPLETE`` are complete; the agent never reads any other.

Trainer signal protocol
    The trainer writes its pid to ``$TRAINFLEET_RUN_DIR/trainer.pid``.
    SIGUSR1 = checkpoint at the next step boundary and keep going (periodic interval, AWS rebalance
    recommendation, GCP live migration); SIGTERM = checkpoint at the next step boundary, then exit 0 (a spot
    notice). With each signal the agent creates ``$TRAINFLEET_RUN_DIR/checkpoint-requested`` holding
    ``continue`` or ``exit``; the trainer removes it after saving, so a trainer that polls the file instead
    of handling signals works too. When training completes the trainer writes ``$TRAINFLEET_RUN_DIR/DONE``
    containing the final step.

Bucket layout
    ``<prefix>/step-<N:08d>/<files>``, then ``<prefix>/step-<N:08d>/MANIFEST.json`` (every file's path, size
    and sha256) after all files, then the pointer ``<prefix>/LATEST`` (text ``step-<N:08d>``) last. Restore
    reads LATEST, verifies the manifest (every object present with the right size; sha256 checked while
    downloading) and otherwise falls back to the newest step whose manifest verifies: a torn upload is never
    restored. ``--keep-last K`` prunes older steps (never the one LATEST points to, never a newer one).

Commands
    restore        --cloud C --bucket B --prefix P --dest DIR        prints the restored step number (or nothing)
    watch          --cloud C --bucket B --prefix P --ckpt-dir D --run-dir R --interval-minutes M --keep-last K
                   [--metadata-url URL] [--notice-window-s S]
    peers          --cloud C --group G [--hostfile PATH] [--slots N]  prints NODE_RANK=, MASTER_ADDR=, ...
    scale-to-zero  --cloud C --group G

Object stores: S3 (SigV4; env credentials or the IMDSv2 role; ``AWS_ENDPOINT_URL``), GCS JSON API (metadata
server token; ``STORAGE_EMULATOR_HOST``), Azure Blob (managed-identity token, or ``AZURE_STORAGE_KEY`` shared
key; ``--bucket account/container``; ``TRAINFLEET_AZURE_BLOB_ENDPOINT``). Files are streamed, large ones in
parts. Every metadata poll is wrapped with a timeout and backoff; the agent logs one JSON line per event to
stderr and never crashes on a fault.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import datetime as _dt
import email.utils
import hashlib
import hmac
import http.client
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import socket
import sys
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET

STEP_RE = re.compile(r"^step-(\d{8})$")
NOTICE_WINDOW_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0}
# An Auto Scaling group's own terminations (scale-in, rebalancing, health) come with no spot notice; the fleet's
# termination lifecycle hook (infra/aws/fleet.py, same name and timeout) holds the instance in Terminating:Wait
# this long, and IMDS says so at autoscaling/target-lifecycle-state. The agent completes the action when done.
ASG_HOOK_NAME = "trainfleet-checkpoint"
ASG_HOOK_S = float(os.environ.get("TRAINFLEET_ASG_HOOK_SECONDS", "600"))
DEFAULT_METADATA = {
    "aws": "http://169.254.169.254",
    "gcp": "http://metadata.google.internal",
    "azure": "http://169.254.169.254",
}
CHUNK = 1 << 20


def step_name(step: int) -> str:
    return f"step-{step:08d}"


# --------------------------------------------------------------------------------------------- logging


_log_lock = threading.Lock()


def log(event: str, **fields) -> None:
    """One JSON line per event on stderr."""
    rec = {"ts": round(time.time(), 3), "event": event, **fields}
    line = json.dumps(rec, default=str, separators=(",", ":"))
    with _log_lock:
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never kill the agent
            pass


# ------------------------------------------------------------------------------------------------ http


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


# ----------------------------------------------------------------------------------- metadata clients


def metadata_base(cloud: str, override: str | None) -> str:
    if override:
        return override.rstrip("/")
    env = os.environ.get("TRAINFLEET_METADATA_URL")
    if env:
        return env.rstrip("/")
    if cloud == "aws" and os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT"):
        return os.environ["AWS_EC2_METADATA_SERVICE_ENDPOINT"].rstrip("/")
    if cloud == "gcp" and os.environ.get("GCE_METADATA_HOST"):
        return "http://" + os.environ["GCE_METADATA_HOST"].rstrip("/")
    return DEFAULT_METADATA[cloud]


class AwsMetadata:
    """IMDSv2: a session token from PUT /latest/api/token, sent on every GET; a 401 means a stale token."""

    TOKEN_TTL = 21600

    def __init__(self, base: str, timeout: float = 2.0):
        self.base = base
        self.timeout = timeout
        self._token: str | None = None
        self._token_exp = 0.0
        self._lock = threading.Lock()

    def _get_token(self) -> str:
        with self._lock:
            if self._token and time.time() < self._token_exp - 60:
                return self._token
            r = http_request(
                "PUT",
                self.base + "/latest/api/token",
                {"X-aws-ec2-metadata-token-ttl-seconds": str(self.TOKEN_TTL)},
                timeout=self.timeout,
            )
            if r.status != 200:
                raise HTTPError(r.status, r.data, "IMDSv2 token")
            self._token = r.text().strip()
            self._token_exp = time.time() + self.TOKEN_TTL
            return self._token

    def get(self, path: str) -> str | None:
        """GET /latest/meta-data/<path>; None on 404; a 401 refreshes the token and retries once."""
        for attempt in (0, 1):
            tok = self._get_token()
            r = http_request(
                "GET",
                self.base + "/latest/meta-data/" + path,
                {"X-aws-ec2-metadata-token": tok},
                timeout=self.timeout,
            )
            if r.status == 401 and attempt == 0:
                log("imds_token_expired", path=path)
                with self._lock:
                    self._token = None
                continue
            if r.status == 404:
                return None
            if r.status != 200:
                raise HTTPError(r.status, r.data, "IMDS " + path)
            return r.text()
        raise HTTPError(401, b"", "IMDS token rejected twice")


class GcpMetadata:
    HDR = {"Metadata-Flavor": "Google"}

    def __init__(self, base: str, timeout: float = 2.0):
        self.base = base
        self.timeout = timeout

    def get(self, path: str, params: dict | None = None, timeout: float | None = None):
        url = self.base + "/computeMetadata/v1/" + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        r = http_request("GET", url, self.HDR, timeout=timeout or self.timeout)
        if r.status == 404:
            return None, None
        if r.status != 200:
            raise HTTPError(r.status, r.data, "GCE metadata " + path)
        return r.text(), r.headers.get("etag")


class AzureMetadata:
    HDR = {"Metadata": "true"}
    EVENTS = "/metadata/scheduledevents?api-version=2020-07-01"

    def __init__(self, base: str, timeout: float = 2.0):
        self.base = base
        self.timeout = timeout

    def get_json(self, path: str):
        r = http_request("GET", self.base + path, self.HDR, timeout=self.timeout)
        if r.status != 200:
            raise HTTPError(r.status, r.data, "Azure IMDS " + path.split("?")[0])
        return r.json()

    def ack(self, event_ids: list[str]) -> None:
        body = json.dumps({"StartRequests": [{"EventId": e} for e in event_ids]}).encode()
        r = http_request(
            "POST",
            self.base + self.EVENTS,
            {**self.HDR, "Content-Type": "application/json"},
            body,
            self.timeout,
        )
        if r.status not in (200, 201, 202, 204):
            raise HTTPError(r.status, r.data, "Azure scheduled events ack")


# ---------------------------------------------------------------------------------------- credentials


class AwsCredentials:
    """Env credentials, else the IMDSv2 instance-role credentials (refreshed before they expire)."""

    def __init__(self, metadata_url: str | None = None):
        self._md_url = metadata_url
        self._md: AwsMetadata | None = None
        self._cached: tuple[str, str, str | None] | None = None
        self._exp = 0.0
        self._lock = threading.Lock()

    def get(self) -> tuple[str, str, str | None]:
        ak, sk = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        if ak and sk:
            return ak, sk, os.environ.get("AWS_SESSION_TOKEN") or None
        with self._lock:
            if self._cached and time.time() < self._exp - 300:
                return self._cached
            if self._md is None:
                self._md = AwsMetadata(metadata_base("aws", self._md_url))
            role = (self._md.get("iam/security-credentials/") or "").strip().splitlines()
            if not role:
                raise RuntimeError("no AWS credentials: no env keys and no instance role")
            doc = json.loads(self._md.get("iam/security-credentials/" + role[0]) or "{}")
            self._cached = (doc["AccessKeyId"], doc["SecretAccessKey"], doc.get("Token"))
            exp = doc.get("Expiration")
            try:
                self._exp = _dt.datetime.fromisoformat(exp.replace("Z", "+00:00")).timestamp()
            except Exception:  # noqa: BLE001
                self._exp = time.time() + 900
            log("aws_role_credentials", role=role[0], expires=exp)
            return self._cached


def aws_region(metadata_url: str | None = None) -> str:
    r = (
        os.environ.get("AWS_REGION")
        or os.environ.get("AWS_DEFAULT_REGION")
        or os.environ.get("TRAINFLEET_REGION")
    )
    if r:
        return r
    try:
        got = AwsMetadata(metadata_base("aws", metadata_url)).get("placement/region")
        if got:
            return got.strip()
    except Exception as e:  # noqa: BLE001
        log("region_lookup_failed", error=str(e)[:200])
    return "us-east-1"


def _q(s: str, safe: str = "-_.~") -> str:
    return urllib.parse.quote(s, safe=safe)


def sigv4_sign(method, url, region, service, creds, headers, payload_hash) -> dict:
    """AWS Signature Version 4. `url` must already have its path percent-encoded."""
    ak, sk, token = creds
    parts = urllib.parse.urlsplit(url)
    now = _dt.datetime.now(_dt.timezone.utc)  # noqa: UP017 - nodes may run python3 < 3.11
    amzdate = now.strftime("%Y%m%dT%H%M%SZ")
    datestamp = now.strftime("%Y%m%d")
    hdrs = dict(headers)
    hdrs["Host"] = parts.netloc
    hdrs["X-Amz-Date"] = amzdate
    hdrs["X-Amz-Content-Sha256"] = payload_hash
    if token:
        hdrs["X-Amz-Security-Token"] = token
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    cq = "&".join(f"{_q(k)}={_q(v)}" for k, v in sorted(query))
    canon = {k.lower(): " ".join(str(v).strip().split()) for k, v in hdrs.items()}
    signed = ";".join(sorted(canon))
    ch = "".join(f"{k}:{canon[k]}\n" for k in sorted(canon))
    creq = "\n".join([method, parts.path or "/", cq, ch, signed, payload_hash])
    scope = f"{datestamp}/{region}/{service}/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope, hashlib.sha256(creq.encode()).hexdigest()])

    def _h(key, msg):
        return hmac.new(key, msg.encode(), hashlib.sha256).digest()

    k = _h(_h(_h(_h(("AWS4" + sk).encode(), datestamp), region), service), "aws4_request")
    sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    hdrs["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={ak}/{scope}, SignedHeaders={signed}, Signature={sig}"
    )
    return hdrs


class BearerToken:
    """A managed-identity / service-account bearer token from the cloud's metadata server, cached."""

    def __init__(self, cloud: str, metadata_url: str | None, resource: str = "https://storage.azure.com/"):
        self.cloud = cloud
        self.base = metadata_base(cloud, metadata_url)
        self.resource = resource
        self._tok: str | None = None
        self._exp = 0.0
        self._lock = threading.Lock()

    def get(self) -> str:
        with self._lock:
            if self._tok and time.time() < self._exp - 120:
                return self._tok
            if self.cloud == "gcp":
                url = self.base + "/computeMetadata/v1/instance/service-accounts/default/token"
                r = http_request("GET", url, GcpMetadata.HDR, timeout=5)
            else:
                params = {"api-version": "2018-02-01", "resource": self.resource}
                if os.environ.get("AZURE_CLIENT_ID"):  # a user-assigned identity
                    params["client_id"] = os.environ["AZURE_CLIENT_ID"]
                q = urllib.parse.urlencode(params)
                r = http_request(
                    "GET", self.base + "/metadata/identity/oauth2/token?" + q, AzureMetadata.HDR, timeout=5
                )
            if r.status != 200:
                raise HTTPError(r.status, r.data, f"{self.cloud} metadata token")
            doc = r.json()
            self._tok = doc["access_token"]
            self._exp = time.time() + float(doc.get("expires_in", 300))
            return self._tok


# --------------------------------------------------------------------------------------- object stores


class ObjectStore:
    """put_file/put_bytes/get_bytes/download/list/delete; keys are full object names in the bucket."""

    part_size = int(os.environ.get("TRAINFLEET_PART_SIZE", str(64 << 20)))
    concurrency = int(os.environ.get("TRAINFLEET_UPLOAD_CONCURRENCY", "8"))

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def put_file(
        self, key: str, path: str, size: int, sha256: str, part_hashes: list[str] | None = None
    ) -> None:
        """Upload a file, streamed; files over `part_size` in parts (`part_hashes`: sha256 of each part)."""
        raise NotImplementedError

    def get_bytes(self, key: str) -> bytes | None:
        raise NotImplementedError

    def download(self, key: str, path: str) -> str:
        """Stream an object to `path`; return its sha256."""
        raise NotImplementedError

    def list(self, prefix: str) -> dict[str, int]:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError

    def _stream_to_file(self, resp, path: str) -> str:
        h = hashlib.sha256()
        with open(path, "wb") as f:
            while True:
                b = resp.read(CHUNK)
                if not b:
                    break
                h.update(b)
                f.write(b)
        return h.hexdigest()


class S3Store(ObjectStore):
    def __init__(self, bucket: str, metadata_url: str | None = None):
        self.bucket = bucket
        self.creds = AwsCredentials(metadata_url)
        self.region = aws_region(metadata_url)
        ep = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if ep:
            self.base = ep.rstrip("/") + "/" + bucket  # path-style for custom endpoints
        elif "." in bucket:  # a virtual-hosted name with dots would not match the TLS certificate
            self.base = f"https://s3.{self.region}.amazonaws.com/{bucket}"
        else:
            self.base = f"https://{bucket}.s3.{self.region}.amazonaws.com"

    def _url(self, key: str, query: dict | None = None) -> str:
        u = self.base + "/" + _q(key, safe="/-_.~")
        if query is not None:
            u += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        return u

    def _req(self, method, url, headers=None, body=None, payload_hash=None, ok=(200,), stream=False):
        if payload_hash is None:
            payload_hash = hashlib.sha256(body if isinstance(body, bytes) else b"").hexdigest()
        hdrs = sigv4_sign(method, url, self.region, "s3", self.creds.get(), headers or {}, payload_hash)
        if stream:
            conn, resp = http_open(method, url, hdrs, body, timeout=60)
            if resp.status not in ok:
                data = resp.read()
                conn.close()
                raise HTTPError(resp.status, data, f"S3 {method} {url}")
            return conn, resp
        r = http_request(method, url, hdrs, body, timeout=60)
        if r.status not in ok:
            raise HTTPError(r.status, r.data, f"S3 {method} {url}")
        return r

    def put_bytes(self, key, data):
        with_retries(lambda: self._req("PUT", self._url(key), {}, data), "s3 put " + key)

    def put_file(self, key, path, size, sha256, part_hashes=None):
        if size <= self.part_size:

            def once():
                with open(path, "rb") as f:
                    self._req("PUT", self._url(key), {"Content-Length": str(size)}, f, payload_hash=sha256)

            with_retries(once, "s3 put " + key)
            return
        if part_hashes is None:
            part_hashes = hash_file(path, self.part_size)[1]
        offsets = range(0, size, self.part_size)
        if len(part_hashes) != len(offsets):
            raise ValueError(
                f"{path}: {len(part_hashes)} part hashes for {len(offsets)} parts (file changed?)"
            )
        r = with_retries(lambda: self._req("POST", self._url(key, {"uploads": ""})), "s3 create multipart")
        upload_id = _xml_find(r.data, "UploadId")

        def part(n, off, ln, ph):
            def once():
                with FileSlice(path, off, ln) as body:
                    url = self._url(key, {"partNumber": str(n), "uploadId": upload_id})
                    return self._req("PUT", url, {"Content-Length": str(ln)}, body, payload_hash=ph)

            return n, with_retries(once, f"s3 part {n} {key}").headers.get("etag", "")

        jobs = [
            (lambda n=n, off=off, ph=ph: part(n, off, min(self.part_size, size - off), ph))
            for n, (off, ph) in enumerate(zip(offsets, part_hashes), start=1)  # noqa: B905 - py3.8 nodes
        ]
        try:
            parts = run_parallel(jobs, self.concurrency)
            xml = (
                "<CompleteMultipartUpload>"
                + "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in parts)
                + "</CompleteMultipartUpload>"
            )
            def complete():
                r = self._req("POST", self._url(key, {"uploadId": upload_id}), {}, xml.encode())
                # S3 may answer 200 and still fail: "a 200 OK response can contain either a success or an
                # error" (CompleteMultipartUpload API reference); the body is then an <Error> document.
                if b"<Error>" in r.data[:512]:
                    try:
                        code = _xml_find(r.data, "Code") or "unknown"
                    except Exception:  # noqa: BLE001 - an unreadable error document is still an error
                        code = "unknown"
                    status = 500 if code in ("InternalError", "SlowDown", "ServiceUnavailable") else 400
                    raise HTTPError(status, r.data, f"S3 complete multipart {key}: 200 with error {code}")
                return r

            with_retries(complete, "s3 complete multipart")
        except BaseException:
            try:
                self._req("DELETE", self._url(key, {"uploadId": upload_id}), ok=(200, 204))
            except Exception:  # noqa: BLE001
                pass
            raise

    def get_bytes(self, key):
        try:
            return with_retries(lambda: self._req("GET", self._url(key)), "s3 get " + key).data
        except HTTPError as e:
            if e.status in (404, 403):
                return None
            raise

    def download(self, key, path):
        def once():
            conn, resp = self._req("GET", self._url(key), stream=True)
            try:
                return self._stream_to_file(resp, path)
            finally:
                conn.close()

        return with_retries(once, "s3 download " + key)

    def list(self, prefix):
        out: dict[str, int] = {}
        token = None
        while True:
            q = {"list-type": "2", "prefix": prefix}
            if token:
                q["continuation-token"] = token
            url = self.base + "/?" + urllib.parse.urlencode(q, quote_via=urllib.parse.quote)
            r = with_retries(lambda url=url: self._req("GET", url), "s3 list")
            root = ET.fromstring(r.data)
            ns = root.tag.split("}")[0] + "}" if root.tag.startswith("{") else ""
            for c in root.findall(f"{ns}Contents"):
                out[c.findtext(f"{ns}Key")] = int(c.findtext(f"{ns}Size") or 0)
            if (root.findtext(f"{ns}IsTruncated") or "false").lower() != "true":
                return out
            token = root.findtext(f"{ns}NextContinuationToken")

    def delete(self, key):
        with_retries(lambda: self._req("DELETE", self._url(key), ok=(200, 204)), "s3 delete " + key)


def _xml_find(data: bytes, tag: str) -> str:
    for el in ET.fromstring(data).iter():
        if el.tag.split("}")[-1] == tag:
            return el.text or ""
    raise ValueError(f"no <{tag}> in response")


class GcsStore(ObjectStore):
    def __init__(self, bucket: str, metadata_url: str | None = None):
        self.bucket = bucket
        emu = os.environ.get("STORAGE_EMULATOR_HOST")
        if emu:
            self.base = (emu if "://" in emu else "http://" + emu).rstrip("/")
            self.token = None
        else:
            self.base = os.environ.get("TRAINFLEET_GCS_ENDPOINT", "https://storage.googleapis.com").rstrip(
                "/"
            )
            self.token = BearerToken("gcp", metadata_url)

    def _h(self, extra=None):
        h = dict(extra or {})
        if self.token is not None:
            h["Authorization"] = "Bearer " + self.token.get()
        return h

    def _obj(self, key):
        return f"{self.base}/storage/v1/b/{_q(self.bucket)}/o/{_q(key, safe='')}"

    def _check(self, r, what, ok=(200,)):
        if r.status not in ok:
            raise HTTPError(r.status, r.data, what)
        return r

    def _upload(self, key, body, size):
        """Large files: a streamed ``uploadType=media`` request. Small ones: ``uploadType=multipart``."""
        if isinstance(body, (bytes, bytearray)):  # noqa: UP038
            boundary = "trainfleet" + hashlib.sha256(bytes(body)).hexdigest()[:24]
            meta = json.dumps({"name": key}).encode()
            data = b"".join(
                [
                    f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                    meta,
                    f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                    bytes(body),
                    f"\r\n--{boundary}--\r\n".encode(),
                ]
            )
            url = f"{self.base}/upload/storage/v1/b/{_q(self.bucket)}/o?uploadType=multipart"
            hdrs = self._h({"Content-Type": f"multipart/related; boundary={boundary}"})
            self._check(http_request("POST", url, hdrs, data, timeout=60), "gcs upload " + key)
            return
        q = urllib.parse.urlencode({"uploadType": "media", "name": key})
        url = f"{self.base}/upload/storage/v1/b/{_q(self.bucket)}/o?{q}"
        hdrs = self._h({"Content-Type": "application/octet-stream", "Content-Length": str(size)})
        self._check(http_request("POST", url, hdrs, body, timeout=60), "gcs upload " + key)

    def put_bytes(self, key, data):
        with_retries(lambda: self._upload(key, data, len(data)), "gcs put " + key)

    def put_file(self, key, path, size, sha256, part_hashes=None):
        if size < CHUNK:
            with open(path, "rb") as f:
                data = f.read()
            return self.put_bytes(key, data)

        def once():
            with open(path, "rb") as f:
                self._upload(key, f, size)

        with_retries(once, "gcs put " + key)

    def get_bytes(self, key):
        def once():
            r = http_request("GET", self._obj(key) + "?alt=media", self._h(), timeout=60)
            if r.status == 404:
                return None
            return self._check(r, "gcs get " + key).data

        return with_retries(once, "gcs get " + key)

    def download(self, key, path):
        def once():
            conn, resp = http_open("GET", self._obj(key) + "?alt=media", self._h(), timeout=60)
            try:
                if resp.status != 200:
                    raise HTTPError(resp.status, resp.read(), "gcs download " + key)
                return self._stream_to_file(resp, path)
            finally:
                conn.close()

        return with_retries(once, "gcs download " + key)

    def list(self, prefix):
        out: dict[str, int] = {}
        page = None
        while True:
            q = {"prefix": prefix}
            if page:
                q["pageToken"] = page
            url = f"{self.base}/storage/v1/b/{_q(self.bucket)}/o?" + urllib.parse.urlencode(q)
            r = with_retries(
                lambda url=url: self._check(http_request("GET", url, self._h()), "gcs list"), "gcs list"
            )
            doc = r.json()
            for it in doc.get("items", []):
                out[it["name"]] = int(it.get("size", 0))
            page = doc.get("nextPageToken")
            if not page:
                return out

    def delete(self, key):
        with_retries(
            lambda: self._check(
                http_request("DELETE", self._obj(key), self._h()), "gcs delete", (200, 204, 404)
            ),
            "gcs delete " + key,
        )


class AzureBlobStore(ObjectStore):
    """Azure Blob REST; --bucket is 'account/container'. Bearer token from managed identity, or shared key."""

    VERSION = "2021-08-06"

    def __init__(self, bucket: str, metadata_url: str | None = None):
        if "/" not in bucket:
            raise ValueError("azure --bucket must be 'storageaccount/container'")
        self.account, self.container = bucket.split("/", 1)
        ep = os.environ.get("TRAINFLEET_AZURE_BLOB_ENDPOINT")
        self.base = (
            (ep.rstrip("/") if ep else f"https://{self.account}.blob.core.windows.net") + "/" + self.container
        )
        self.key = os.environ.get("AZURE_STORAGE_KEY")
        self.token = None if self.key else BearerToken("azure", metadata_url)

    def _sign(self, method, url, headers):
        h = dict(headers)
        h["x-ms-version"] = self.VERSION
        h["x-ms-date"] = email.utils.formatdate(usegmt=True)
        if self.token is not None:
            h["Authorization"] = "Bearer " + self.token.get()
            return h
        parts = urllib.parse.urlsplit(url)
        low = {k.lower(): str(v) for k, v in h.items()}
        length = low.get("content-length", "")
        if length == "0":
            length = ""
        std = [
            method,
            low.get("content-encoding", ""),
            low.get("content-language", ""),
            length,
            low.get("content-md5", ""),
            low.get("content-type", ""),
            "",
            low.get("if-modified-since", ""),
            low.get("if-match", ""),
            low.get("if-none-match", ""),
            low.get("if-unmodified-since", ""),
            low.get("range", ""),
        ]
        xms = "".join(f"{k}:{low[k].strip()}\n" for k in sorted(low) if k.startswith("x-ms-"))
        res = f"/{self.account}{urllib.parse.unquote(parts.path)}"
        q = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        for k in sorted(q, key=str.lower):
            res += f"\n{k.lower()}:{','.join(sorted(q[k]))}"
        sts = "\n".join(std) + "\n" + xms + res
        sig = base64.b64encode(
            hmac.new(base64.b64decode(self.key), sts.encode(), hashlib.sha256).digest()
        ).decode()
        h["Authorization"] = f"SharedKey {self.account}:{sig}"
        return h

    def _url(self, key, query=None):
        u = self.base + "/" + _q(key, safe="/-_.~")
        if query:
            u += "?" + urllib.parse.urlencode(query)
        return u

    def _req(self, method, url, headers=None, body=None, ok=(200, 201), stream=False):
        hdrs = self._sign(method, url, headers or {})
        if stream:
            conn, resp = http_open(method, url, hdrs, body, timeout=60)
            if resp.status not in ok:
                data = resp.read()
                conn.close()
                raise HTTPError(resp.status, data, f"blob {method}")
            return conn, resp
        r = http_request(method, url, hdrs, body, timeout=60)
        if r.status not in ok:
            raise HTTPError(r.status, r.data, f"blob {method} {url}")
        return r

    def put_bytes(self, key, data):
        hdrs = {"x-ms-blob-type": "BlockBlob", "Content-Length": str(len(data))}
        with_retries(lambda: self._req("PUT", self._url(key), hdrs, data), "blob put " + key)

    def put_file(self, key, path, size, sha256, part_hashes=None):
        if size <= self.part_size:

            def once():
                with open(path, "rb") as f:
                    hdrs = {"x-ms-blob-type": "BlockBlob", "Content-Length": str(size)}
                    self._req("PUT", self._url(key), hdrs, f)

            with_retries(once, "blob put " + key)
            return

        def block(n, off):
            ln = min(self.part_size, size - off)
            bid = base64.b64encode(f"{n:08d}".encode()).decode()

            def once():
                with FileSlice(path, off, ln) as body:
                    url = self._url(key, {"comp": "block", "blockid": bid})
                    self._req("PUT", url, {"Content-Length": str(ln)}, body)

            with_retries(once, f"blob block {n} {key}")
            return bid

        jobs = [(lambda n=n, off=off: block(n, off)) for n, off in enumerate(range(0, size, self.part_size))]
        ids = run_parallel(jobs, self.concurrency)
        xml = '<?xml version="1.0" encoding="utf-8"?><BlockList>' + "".join(
            f"<Latest>{i}</Latest>" for i in ids
        )
        xml = (xml + "</BlockList>").encode()
        with_retries(
            lambda: self._req(
                "PUT", self._url(key, {"comp": "blocklist"}), {"Content-Length": str(len(xml))}, xml
            ),
            "blob block list",
        )

    def get_bytes(self, key):
        try:
            return with_retries(lambda: self._req("GET", self._url(key), ok=(200,)), "blob get").data
        except HTTPError as e:
            if e.status == 404:
                return None
            raise

    def download(self, key, path):
        def once():
            conn, resp = self._req("GET", self._url(key), ok=(200,), stream=True)
            try:
                return self._stream_to_file(resp, path)
            finally:
                conn.close()

        return with_retries(once, "blob download " + key)

    def list(self, prefix):
        out: dict[str, int] = {}
        marker = ""
        while True:
            q = {"restype": "container", "comp": "list", "prefix": prefix}
            if marker:
                q["marker"] = marker
            url = self.base + "?" + urllib.parse.urlencode(q)
            r = with_retries(lambda url=url: self._req("GET", url, ok=(200,)), "blob list")
            root = ET.fromstring(r.data)
            for b in root.iter("Blob"):
                out[b.findtext("Name")] = int(b.findtext("Properties/Content-Length") or 0)
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return out

    def delete(self, key):
        with_retries(lambda: self._req("DELETE", self._url(key), ok=(200, 202, 404)), "blob delete " + key)


def make_store(cloud: str, bucket: str, metadata_url: str | None = None) -> ObjectStore:
    return {"aws": S3Store, "gcp": GcsStore, "azure": AzureBlobStore}[cloud](bucket, metadata_url)


# ------------------------------------------------------------------------------------ checkpoint sync


def complete_steps(ckpt_dir: str) -> list[int]:
    """Steps whose directory holds COMPLETE, ascending."""
    out = []
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        return out
    for name in names:
        m = STEP_RE.match(name)
        if m and os.path.isfile(os.path.join(ckpt_dir, name, "COMPLETE")):
            out.append(int(m.group(1)))
    return sorted(out)


def _key(prefix: str, *rest: str) -> str:
    p = prefix.strip("/")
    return "/".join([p, *rest]) if p else "/".join(rest)


def read_latest(store: ObjectStore, prefix: str) -> int | None:
    data = store.get_bytes(_key(prefix, "LATEST"))
    if not data:
        return None
    # Not UTF-8 (e.g. UTF-16 from Windows PowerShell's `>`): unreadable, like a missing LATEST, so
    # restore falls back to the newest verified step and the next commit rewrites it.
    m = STEP_RE.match(data.decode(errors="replace").strip())
    return int(m.group(1)) if m else None


def upload_step(store: ObjectStore, prefix: str, ckpt_dir: str, step: int, keep_last: int = 0) -> dict:
    """Files, then MANIFEST.json, then LATEST (only forward), then prune. Returns the manifest."""
    t0 = time.time()
    root = os.path.join(ckpt_dir, step_name(step))
    files = []
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            files.append((rel, full))
    files.sort()
    log("upload_start", step=step, files=len(files))

    def one(rel, full):
        size = os.path.getsize(full)
        digest, part_hashes = hash_file(full, store.part_size)
        store.put_file(_key(prefix, step_name(step), rel), full, size, digest, part_hashes)
        return {"path": rel, "size": size, "sha256": digest}

    # files in parallel (each large one also uploads its parts in parallel)
    entries = run_parallel([(lambda r=rel, f=full: one(r, f)) for rel, full in files], store.concurrency)
    manifest = {"step": step, "files": entries, "created": time.time(), "host": socket.gethostname()}
    store.put_bytes(_key(prefix, step_name(step), "MANIFEST.json"), json.dumps(manifest, indent=1).encode())
    current = read_latest(store, prefix)
    if current is None or step >= current:
        store.put_bytes(_key(prefix, "LATEST"), step_name(step).encode())
        latest = step
    else:
        latest = current
    total = sum(e["size"] for e in entries)
    log("durable", step=step, latest=latest, bytes=total, seconds=round(time.time() - t0, 3))
    if keep_last and keep_last > 0:
        try:
            prune(store, prefix, keep_last, latest)
        except Exception as e:  # noqa: BLE001
            log("prune_failed", error=str(e)[:300])
    return manifest


def bucket_steps(listing: dict[str, int], prefix: str) -> dict[int, dict[str, int]]:
    """{step: {relative path: size}} from a listing of the prefix."""
    base = _key(prefix, "")
    out: dict[int, dict[str, int]] = {}
    for k, size in listing.items():
        if not k.startswith(base):
            continue
        head, _, rest = k[len(base) :].partition("/")
        m = STEP_RE.match(head)
        if m and rest:
            out.setdefault(int(m.group(1)), {})[rest] = size
    return out


def prune(store: ObjectStore, prefix: str, keep_last: int, latest: int) -> list[int]:
    """Delete steps older than the newest `keep_last` complete ones at or below LATEST; never LATEST's."""
    steps = bucket_steps(store.list(_key(prefix, "")), prefix)
    complete = sorted((s for s, f in steps.items() if "MANIFEST.json" in f and s <= latest), reverse=True)
    keep = set(complete[:keep_last]) | {latest}
    oldest_kept = min(keep)
    doomed = [s for s in steps if s not in keep and s < oldest_kept]
    for s in sorted(doomed):
        # manifest first, so a half-deleted step is never mistaken for a complete one
        names = sorted(steps[s], key=lambda n: n != "MANIFEST.json")
        for n in names:
            store.delete(_key(prefix, step_name(s), n))
    if doomed:
        log("pruned", steps=sorted(doomed), kept=sorted(keep))
    return doomed


SHA256_RE = re.compile(r"[0-9a-f]{64}")


def safe_relative_path(path) -> bool:
    """A manifest path restore may write: relative, '/'-separated, no '..', '.', empty parts, backslashes or
    control characters. Anything else could place a file outside the destination (as root, at boot)."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
        return False
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def manifest_problem(manifest) -> str | None:
    """Why a parsed MANIFEST.json cannot be trusted, or None: a dict whose "files" is a list of entries with a
    safe relative path, a non-negative integer size and a sha256, each path once."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        return "not an object with a list of files"
    seen = set()
    for e in manifest["files"]:
        if not isinstance(e, dict):
            return "an entry is not an object"
        path, size, sha = e.get("path"), e.get("size"), e.get("sha256")
        if not safe_relative_path(path):
            return f"unsafe path {str(path)[:80]!r}"
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return f"bad size for {path!r}"
        if not isinstance(sha, str) or not SHA256_RE.fullmatch(sha):
            return f"bad sha256 for {path!r}"
        if path in seen:
            return f"{path!r} listed twice"
        seen.add(path)
    return None


def verify_manifest(store: ObjectStore, prefix: str, step: int, listing: dict | None = None) -> dict | None:
    data = store.get_bytes(_key(prefix, step_name(step), "MANIFEST.json"))
    if not data:
        return None
    try:
        manifest = json.loads(data)
    except ValueError:
        return None
    problem = manifest_problem(manifest)
    if problem is not None:
        log("manifest_malformed", step=step, problem=problem)
        return None
    if listing is None:
        listing = store.list(_key(prefix, step_name(step), ""))
    for e in manifest.get("files", []):
        if listing.get(_key(prefix, step_name(step), e["path"])) != e["size"]:
            log("manifest_mismatch", step=step, path=e["path"])
            return None
    return manifest


def restore(store: ObjectStore, prefix: str, dest: str) -> int | None:
    """Restore the newest verified checkpoint into dest/step-N (COMPLETE written last). None if nothing."""
    for name in os.listdir(dest):
        if name.startswith(".restore-step-"):  # left by a restore that was killed
            shutil.rmtree(os.path.join(dest, name), ignore_errors=True)
    listing = store.list(_key(prefix, ""))
    candidates = sorted(bucket_steps(listing, prefix), reverse=True)
    latest = read_latest(store, prefix)
    if latest is not None:
        candidates = [latest] + [s for s in candidates if s < latest]
    for step in candidates:
        manifest = verify_manifest(store, prefix, step, listing)
        if manifest is None:
            log("restore_skip", step=step, reason="manifest missing or does not verify")
            continue
        final = os.path.join(dest, step_name(step))
        if os.path.isfile(os.path.join(final, "COMPLETE")):
            log("restore_present", step=step)
            return step
        tmp = os.path.join(dest, f".restore-{step_name(step)}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        ok = True
        for e in manifest["files"]:
            if e["path"] == "COMPLETE":
                continue
            out = os.path.join(tmp, *e["path"].split("/"))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            # Checked again where it lands, once its folders exist: never outside the step's own temp folder
            # (verify_manifest checked the text; this checks the filesystem, links included).
            if not os.path.realpath(out).startswith(os.path.realpath(tmp) + os.sep):
                log("restore_skip", step=step, reason="path leaves the destination", path=e["path"][:80])
                ok = False
                break
            if store.download(_key(prefix, step_name(step), e["path"]), out) != e["sha256"]:
                log("restore_skip", step=step, reason="sha256 mismatch", path=e["path"])
                ok = False
                break
        if not ok:
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        open(os.path.join(final, "COMPLETE"), "w").close()
        log("restored", step=step, files=len(manifest["files"]))
        return step
    return None


# ------------------------------------------------------------------------------------------- watcher


class Notice:
    def __init__(self, kind: str, hard: bool, detail, deadline: float, event_ids: list[str] | None = None):
        self.kind = kind
        self.hard = hard
        self.detail = detail
        self.deadline = deadline
        self.event_ids = event_ids or []
        self.at = time.time()


class NoticeSource:
    """Polls a cloud's metadata service in its own thread; every poll is wrapped, with backoff."""

    def __init__(self, cloud: str, base: str, window_s: float, poll_s: float, timeout_s: float):
        self.cloud = cloud
        self.base = base
        self.window_s = window_s
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        self.failures = 0
        # the metadata service is local: back off, but never so far that a notice is caught late
        self.max_backoff_s = max(2.0, poll_s)
        self.seen_soft: set[str] = set()
        self._etag = None
        self._vm_name: str | None = None
        if cloud == "aws":
            self.md = AwsMetadata(base, timeout_s)
        elif cloud == "gcp":
            self.md = GcpMetadata(base, timeout_s)
        else:
            self.md = AzureMetadata(base, timeout_s)

    def run(self, on_notice, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                notices = self.poll()
                if self.failures:
                    log("metadata_recovered", after_failures=self.failures)
                self.failures = 0
                for n in notices:
                    on_notice(n)
                    if n.hard:
                        return
                wait = self.poll_s
            except Exception as e:  # noqa: BLE001 - a poll never kills the watcher
                self.failures += 1
                wait = min(self.poll_s * 2 ** min(self.failures, 6), self.max_backoff_s) * (
                    0.5 + random.random() / 2
                )
                log(
                    "metadata_error",
                    cloud=self.cloud,
                    failures=self.failures,
                    error=f"{type(e).__name__}: {e}"[:300],
                )
            stop.wait(wait)

    def poll(self) -> list[Notice]:
        return getattr(self, "_poll_" + self.cloud)()

    def _deadline(self, hint: float | None = None) -> float:
        d = time.time() + self.window_s
        return min(d, hint) if hint and hint > time.time() else d

    def _poll_aws(self) -> list[Notice]:
        out = []
        action = self.md.get("spot/instance-action")
        if action:
            doc = json.loads(action)
            hint = None
            try:
                hint = _dt.datetime.fromisoformat(doc["time"].replace("Z", "+00:00")).timestamp()
            except Exception:  # noqa: BLE001
                pass
            hard = doc.get("action") in ("terminate", "stop", "hibernate")
            out.append(Notice("aws-spot-" + str(doc.get("action")), hard, doc, self._deadline(hint)))
            return out
        # https://docs.aws.amazon.com/autoscaling/ec2/userguide/retrieving-target-lifecycle-state-through-imds.html
        target = (self.md.get("autoscaling/target-lifecycle-state") or "").strip()
        if target == "Terminated":
            return [Notice("aws-asg-terminate", True, target, time.time() + ASG_HOOK_S)]
        reb = self.md.get("events/recommendations/rebalance")
        if reb and reb not in self.seen_soft:
            self.seen_soft.add(reb)
            out.append(Notice("aws-rebalance", False, json.loads(reb), self._deadline()))
        return out

    def _poll_gcp(self) -> list[Notice]:
        params = {"wait_for_change": "true", "timeout_sec": str(int(max(1, self.poll_s * 10)))}
        if self._etag:
            params["last_etag"] = self._etag
        val, etag = self.md.get(
            "instance/preempted", params, timeout=float(params["timeout_sec"]) + self.timeout_s
        )
        self._etag = etag or None
        if (val or "").strip().upper() == "TRUE":
            return [Notice("gcp-preempted", True, val.strip(), self._deadline())]
        me, _ = self.md.get("instance/maintenance-event")
        me = (me or "NONE").strip()
        if me.startswith("TERMINATE"):
            return [Notice("gcp-maintenance-terminate", True, me, self._deadline())]
        if me != "NONE" and me not in self.seen_soft:
            self.seen_soft.add(me)
            return [Notice("gcp-maintenance", False, me, self._deadline())]
        if me == "NONE":
            self.seen_soft.clear()
        return []

    def _poll_azure(self) -> list[Notice]:
        if self._vm_name is None:
            try:
                inst = self.md.get_json("/metadata/instance?api-version=2021-02-01")
                self._vm_name = inst.get("compute", {}).get("name", "") or ""
            except Exception as e:  # noqa: BLE001
                log("azure_instance_lookup_failed", error=str(e)[:200])
        doc = self.md.get_json(AzureMetadata.EVENTS)
        hard_ids, soft, hint = [], [], None
        for ev in doc.get("Events", []):
            res = ev.get("Resources") or []
            if self._vm_name and res and self._vm_name not in res:
                continue
            et = ev.get("EventType")
            if et in ("Preempt", "Terminate", "Reboot", "Redeploy"):
                hard_ids.append(ev["EventId"])
                try:
                    nb = email.utils.parsedate_to_datetime(ev.get("NotBefore") or "").timestamp()
                    hint = nb if hint is None else min(hint, nb)
                except Exception:  # noqa: BLE001
                    pass
            elif ev.get("EventId") not in self.seen_soft:
                self.seen_soft.add(ev.get("EventId"))
                soft.append(ev)
        if hard_ids:
            return [
                Notice(
                    "azure-"
                    + "-".join(sorted({e["EventType"] for e in doc["Events"] if e["EventId"] in hard_ids})),
                    True,
                    doc,
                    self._deadline(hint),
                    hard_ids,
                )
            ]
        return [Notice("azure-" + ev.get("EventType", "event"), False, ev, self._deadline()) for ev in soft]


class Trainer:
    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def pid(self) -> int | None:
        try:
            with open(os.path.join(self.run_dir, "trainer.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        try:  # a zombie (exited child of ours) is not alive
            with open(f"/proc/{pid}/stat") as f:
                return f.read().split(") ")[-1][:1] != "Z"
        except OSError:
            return True

    def request(self, exit_after: bool) -> None:
        os.makedirs(self.run_dir, exist_ok=True)
        flag = os.path.join(self.run_dir, "checkpoint-requested")
        with open(flag + ".tmp", "w") as f:
            f.write("exit\n" if exit_after else "continue\n")
        os.replace(flag + ".tmp", flag)
        pid = self.pid()
        sig = signal.SIGTERM if exit_after else signal.SIGUSR1
        if pid is not None:
            try:
                os.kill(pid, sig)
                log("trainer_signalled", pid=pid, signal=sig.name)
            except ProcessLookupError:
                log("trainer_gone", pid=pid)
        else:
            log("trainer_pid_missing", flag=flag)

    def done_step(self) -> int | None:
        try:
            with open(os.path.join(self.run_dir, "DONE")) as f:
                txt = f.read().strip()
        except OSError:
            return None
        try:
            return int(txt or "-1")
        except ValueError:
            return -1


class Watcher:
    def __init__(self, args):
        self.args = args
        self.store = make_store(args.cloud, args.bucket, args.metadata_url)
        self.trainer = Trainer(args.run_dir)
        self._cadence_rank: str | None = None  # the node rank last read from node-rank (for the log)
        self.window = args.notice_window_s or NOTICE_WINDOW_S[args.cloud]
        self.synced: int | None = None
        self.notice: Notice | None = None
        self._lock = threading.Lock()
        self.stop = threading.Event()
        self.sigterm_at: float | None = None
        base = metadata_base(args.cloud, args.metadata_url)
        self.source = NoticeSource(args.cloud, base, self.window, args.poll_s, args.http_timeout_s)

    def on_sigterm(self, *_):
        """The node is shutting down (systemd stop: a GCP preemption's ACPI soft-off, an AWS stop/terminate, a
        missed notice): the first SIGTERM is handled as a spot notice, a second one exits at once."""
        if self.sigterm_at is not None:
            log("agent_sigterm", action="exit")
            sys.exit(143)
        self.sigterm_at = time.time()  # only a flag here: the main loop turns it into a notice

    def on_notice(self, n: Notice) -> None:
        log(
            "notice",
            kind=n.kind,
            hard=n.hard,
            detail=n.detail,
            deadline_in_s=round(n.deadline - time.time(), 1),
        )
        try:
            self.trainer.request(exit_after=n.hard)
        except Exception as e:  # noqa: BLE001
            log("signal_failed", error=str(e)[:200])
        if n.hard:
            with self._lock:
                self.notice = n

    def sync(self, step: int, reason: str) -> bool:
        try:
            upload_step(self.store, self.args.prefix, self.args.ckpt_dir, step, self.args.keep_last)
            self.synced = step if self.synced is None else max(self.synced, step)
            return True
        except Exception as e:  # noqa: BLE001
            log("sync_failed", step=step, reason=reason, error=f"{type(e).__name__}: {e}"[:300])
            return False

    def newest(self) -> int | None:
        steps = complete_steps(self.args.ckpt_dir)
        return steps[-1] if steps else None

    def run(self) -> int:
        a = self.args
        log(
            "watch_start",
            cloud=a.cloud,
            bucket=a.bucket,
            prefix=a.prefix,
            window_s=self.window,
            pid=os.getpid(),
        )
        t = self._start_source()  # first: a slow bucket must not delay noticing a notice
        try:
            self.synced = read_latest(self.store, a.prefix)
        except Exception as e:  # noqa: BLE001
            log("latest_lookup_failed", error=str(e)[:200])
        self.interval = a.interval_minutes * 60.0
        self.next_periodic = time.time() + self.interval if self.interval > 0 else float("inf")
        try:
            while True:
                if not t.is_alive() and self.notice is None and not self.stop.is_set():
                    log("metadata_thread_restarted")  # it only ends on a hard notice; never go blind
                    t = self._start_source()
                if self.sigterm_at is not None and self.notice is None:
                    self.on_notice(
                        Notice(
                            "sigterm",
                            True,
                            "agent received SIGTERM",
                            self.sigterm_at + min(self.window, 30.0),
                        )
                    )
                with self._lock:
                    notice = self.notice
                if notice is not None:
                    return self.handle_notice(notice)
                try:
                    finished = self.tick()
                except Exception as e:  # noqa: BLE001 - the watch loop never dies on a fault
                    log("watch_error", error=f"{type(e).__name__}: {e}"[:300])
                    finished = None
                if finished is not None:
                    return finished
                if time.time() >= self.next_periodic:
                    self.next_periodic = time.time() + self.interval
                    if self.trainer.alive() and self.keeps_the_cadence():
                        log("periodic_checkpoint_request")
                        self.trainer.request(exit_after=False)
                time.sleep(a.scan_s)
        finally:
            self.stop.set()

    def keeps_the_cadence(self) -> bool:
        """One checkpoint cadence per job: only node rank 0's agent asks for periodic checkpoints (the trainer's
        ranks agree on any rank's request, so every node's timer would multiply the checkpoints by the node
        count). The boot script writes the node's rank to `node-rank` in the run dir at each launch; without
        it (a single node, or before the first launch) this node keeps the cadence. Notices always count."""
        try:
            with open(os.path.join(self.args.run_dir, "node-rank")) as f:
                rank = f.read().strip()
        except OSError:
            return True
        keeps = rank in ("", "0")
        if rank != self._cadence_rank:
            self._cadence_rank = rank
            log("periodic_cadence", node_rank=rank, keeps_cadence=keeps)
        return keeps

    def _start_source(self) -> threading.Thread:
        t = threading.Thread(
            target=self.source.run, args=(self.on_notice, self.stop), daemon=True, name="notices"
        )
        t.start()
        return t

    def tick(self) -> int | None:
        """Sync a new complete checkpoint; on DONE do the final sync and return the exit code."""
        newest = self.newest()
        if newest is not None and (self.synced is None or newest > self.synced):
            self.sync(newest, "periodic")
        done = self.trainer.done_step()
        if done is None:
            return None
        newest = self.newest()
        if newest is not None and (self.synced is None or newest > self.synced):
            if not self.sync(newest, "final"):
                return None  # retried on the next tick
        log("training_done", final_step=done, synced=self.synced)
        return 0

    def handle_notice(self, n: Notice) -> int:
        baseline = self.newest()
        # Leave time to upload: stop waiting for the trainer's notice checkpoint with a quarter of the window
        # (at least 5 s, at most half) to spare, and fall back to the newest complete checkpoint on disk.
        span = max(0.0, n.deadline - n.at)
        wait_until = n.deadline - min(max(5.0, 0.25 * span), 0.5 * span)
        log("notice_wait", baseline=baseline, deadline_in_s=round(n.deadline - time.time(), 1))
        target = None
        while time.time() < wait_until:
            newest = self.newest()
            if newest is not None and (baseline is None or newest > baseline):
                target = newest
                break
            if not self.trainer.alive() and self.trainer.pid() is not None:
                time.sleep(0.2)  # the trainer may have renamed + marked COMPLETE just before exiting
                newest = self.newest()
                if newest is not None and (baseline is None or newest > baseline):
                    target = newest
                log("trainer_exited_during_notice", newest=newest)
                break
            time.sleep(0.05)
        if target is None:
            target = self.newest()
            log("notice_fallback", step=target, reason="no new checkpoint from the trainer in time")
        ok = True
        if target is not None and (self.synced is None or target > self.synced):
            ok = False
            while not ok and time.time() < n.deadline:
                ok = self.sync(target, "notice")
        if ok and target is not None:
            log("notice_durable", step=target, notice_to_durable_s=round(time.time() - n.at, 3), kind=n.kind)
        if n.kind == "aws-asg-terminate":
            complete_lifecycle_action(self.args.metadata_url)
        if self.args.cloud == "azure" and n.event_ids:
            try:
                self.source.md.ack(n.event_ids)
                log("azure_event_acknowledged", event_ids=n.event_ids)
            except Exception as e:  # noqa: BLE001
                log("azure_ack_failed", error=str(e)[:200])
        return 0 if ok else 1


def complete_lifecycle_action(metadata_url: str | None) -> None:
    """Let the group finish terminating this instance now that its checkpoint is safe (otherwise it waits out the
    hook's timeout, GPUs billing). Best effort: the hook's default result continues the termination anyway."""
    group = os.environ.get("TRAINFLEET_GROUP", "")
    try:
        instance = (AwsMetadata(metadata_base("aws", metadata_url)).get("instance-id") or "").strip()
        _aws_query(
            "autoscaling",
            {
                "Action": "CompleteLifecycleAction",
                "Version": "2011-01-01",
                "AutoScalingGroupName": group,
                "LifecycleHookName": ASG_HOOK_NAME,
                "InstanceId": instance,
                "LifecycleActionResult": "CONTINUE",
            },
            metadata_url,
        )
        log("lifecycle_action_completed", group=group, instance=instance)
    except Exception as e:  # noqa: BLE001
        log("lifecycle_action_failed", group=group, error=str(e)[:200])


# ------------------------------------------------------------------------------------------------ peers


def _aws_query(service: str, params: dict, metadata_url: str | None) -> bytes:
    region = aws_region(metadata_url)
    ep = os.environ.get(f"AWS_ENDPOINT_URL_{service.upper()}") or os.environ.get("AWS_ENDPOINT_URL")
    host = {"ec2": f"ec2.{region}.amazonaws.com", "autoscaling": f"autoscaling.{region}.amazonaws.com"}[
        service
    ]
    url = (ep.rstrip("/") if ep else "https://" + host) + "/"
    body = urllib.parse.urlencode(params, quote_via=urllib.parse.quote).encode()
    creds = AwsCredentials(metadata_url)

    def once():
        hdrs = sigv4_sign(
            "POST",
            url,
            region,
            service,
            creds.get(),
            {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
            hashlib.sha256(body).hexdigest(),
        )
        r = http_request("POST", url, hdrs, body, timeout=30)
        if r.status != 200:
            raise HTTPError(r.status, r.data, f"{service} {params.get('Action')}")
        return r.data

    return with_retries(once, f"{service} {params.get('Action')}")


def aws_group_ips(group: str, metadata_url: str | None) -> list[str]:
    return [m[0] for m in aws_group_members(group, metadata_url)]


def aws_group_members(group: str, metadata_url: str | None) -> list[tuple[str, bool, str]]:
    """(private IP, is spot, launch time) of every running or pending instance of the group. DescribeInstances
    marks a Spot Instance with instanceLifecycle "spot" and an on-demand one with no instanceLifecycle
    (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Instance.html)."""
    members, token = [], None
    while True:
        p = {
            "Action": "DescribeInstances",
            "Version": "2016-11-15",
            "Filter.1.Name": "tag:aws:autoscaling:groupName",
            "Filter.1.Value.1": group,
            "Filter.2.Name": "instance-state-name",
            "Filter.2.Value.1": "running",
            "Filter.2.Value.2": "pending",
        }
        if token:
            p["NextToken"] = token
        root = ET.fromstring(_aws_query("ec2", p, metadata_url))
        for el in root.iter():
            if el.tag.split("}")[-1] == "instancesSet":
                for inst in el:
                    fields = {c.tag.split("}")[-1]: (c.text or "") for c in inst}
                    if fields.get("privateIpAddress"):
                        spot = fields.get("instanceLifecycle") == "spot"
                        members.append((fields["privateIpAddress"], spot, fields.get("launchTime", "")))
        token = None
        for el in root:
            if el.tag.split("}")[-1] == "nextToken" and el.text:
                token = el.text
        if not token:
            return members


def _gcp_api(method: str, path: str, metadata_url: str | None, body: dict | None = None) -> dict:
    base = os.environ.get("TRAINFLEET_GCP_COMPUTE_ENDPOINT", "https://compute.googleapis.com").rstrip("/")
    tok = BearerToken("gcp", metadata_url)

    def once():
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Authorization": "Bearer " + tok.get(), "Content-Type": "application/json"}
        r = http_request(method, base + "/compute/v1/" + path, hdrs, data, timeout=30)
        if r.status != 200:
            raise HTTPError(r.status, r.data, "compute " + path)
        return r.json()

    return with_retries(once, "gcp " + path)


def _gcp_group_paths(group: str, metadata_url: str | None) -> list[str]:
    """--group is NAME (project and zone from the metadata server; a zonal MIG is tried first, then the
    regional one of the zone's region) or a full projects/P/zones|regions/L/instanceGroupManagers/NAME."""
    if group.startswith("projects/"):
        return [group]
    md = GcpMetadata(metadata_base("gcp", metadata_url))
    project = (md.get("project/project-id")[0] or "").strip()
    zone = (md.get("instance/zone")[0] or "").strip().rsplit("/", 1)[-1]
    region = zone.rsplit("-", 1)[0]
    return [
        f"projects/{project}/zones/{zone}/instanceGroupManagers/{group}",
        f"projects/{project}/regions/{region}/instanceGroupManagers/{group}",
    ]


def _gcp_mig_call(group: str, metadata_url: str | None, suffix: str) -> dict:
    paths = _gcp_group_paths(group, metadata_url)
    for i, path in enumerate(paths):
        try:
            return _gcp_api("POST", path + suffix, metadata_url)
        except HTTPError as e:
            if e.status != 404 or i == len(paths) - 1:
                raise
    raise AssertionError("unreachable")


def gcp_group_ips(group: str, metadata_url: str | None) -> list[str]:
    doc = _gcp_mig_call(group, metadata_url, "/listManagedInstances")
    ips = []
    for mi in doc.get("managedInstances", []):
        if mi.get("instanceStatus") not in (None, "RUNNING", "PROVISIONING", "STAGING"):
            continue
        inst_path = mi["instance"].split("/compute/v1/", 1)[-1]
        inst = _gcp_api("GET", inst_path, metadata_url)
        nics = inst.get("networkInterfaces") or []
        if nics and nics[0].get("networkIP"):
            ips.append(nics[0]["networkIP"])
    return ips


def _azure_api(method: str, path: str, metadata_url: str | None, body: dict | None = None, api="2023-09-01"):
    base = os.environ.get("TRAINFLEET_AZURE_ARM_ENDPOINT", "https://management.azure.com").rstrip("/")
    tok = BearerToken("azure", metadata_url, resource="https://management.azure.com/")
    url = base + path + ("&" if "?" in path else "?") + "api-version=" + api

    def once():
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Authorization": "Bearer " + tok.get(), "Content-Type": "application/json"}
        r = http_request(method, url, hdrs, data, timeout=30)
        if r.status not in (200, 201, 202):
            raise HTTPError(r.status, r.data, "arm " + path)
        return r.json() if r.data else {}

    return with_retries(once, "azure " + path)


def _azure_group_path(group: str, metadata_url: str | None) -> str:
    if group.startswith("/subscriptions/"):
        return group
    comp = AzureMetadata(metadata_base("azure", metadata_url)).get_json(
        "/metadata/instance?api-version=2021-02-01"
    )
    c = comp["compute"]
    return (
        f"/subscriptions/{c['subscriptionId']}/resourceGroups/{c['resourceGroupName']}"
        f"/providers/Microsoft.Compute/virtualMachineScaleSets/{group}"
    )


def azure_group_ips(group: str, metadata_url: str | None) -> list[str]:
    path = _azure_group_path(group, metadata_url) + "/networkInterfaces"
    ips = []
    while True:
        doc = _azure_api("GET", path, metadata_url, api="2018-10-01")
        for nic in doc.get("value", []):
            for cfg in nic.get("properties", {}).get("ipConfigurations", []):
                ip = cfg.get("properties", {}).get("privateIPAddress")
                if ip and cfg.get("properties", {}).get("primary", True):
                    ips.append(ip)
        nxt = doc.get("nextLink")
        if not nxt:
            return ips
        path = urllib.parse.urlsplit(nxt).path + "?" + urllib.parse.urlsplit(nxt).query


def self_ip(cloud: str, metadata_url: str | None) -> str:
    base = metadata_base(cloud, metadata_url)
    if cloud == "aws":
        return (AwsMetadata(base).get("local-ipv4") or "").strip()
    if cloud == "gcp":
        return (GcpMetadata(base).get("instance/network-interfaces/0/ip")[0] or "").strip()
    doc = AzureMetadata(base).get_json("/metadata/instance/network?api-version=2021-02-01")
    return doc["interface"][0]["ipv4"]["ipAddress"][0]["privateIpAddress"]


def choose_members(members: list[tuple[str, bool, str]], nodes: int) -> list[tuple[str, bool, str]]:
    """The job's members, in rank order: on-demand before spot (the on-demand base holds rank 0 and the
    checkpoint cadence), then the longest running, then by IP; exactly `nodes` of them when there are more
    (0: all). Every node computes the same answer from the same listing, so a node the group added beyond the
    job's size (capacity rebalancing launches the replacement first) waits as a standby instead of changing
    the data-parallel size that the job's ZeRO state was saved at."""
    unique = {m[0]: m for m in members}.values()
    ordered = sorted(unique, key=lambda m: (m[1], m[2], ipaddress.ip_address(m[0])))
    return ordered[:nodes] if nodes else ordered


def default_slots() -> int:
    for env in ("TRAINFLEET_SLOTS",):
        if os.environ.get(env):
            return int(os.environ[env])
    if os.path.isdir("/dev/accel"):  # Habana Gaudi
        n = len([d for d in os.listdir("/dev/accel") if d.startswith("accel") and d[5:].isdigit()])
        if n:
            return n
    n = len([d for d in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", d)]) if os.path.isdir("/dev") else 0
    return n or 1


def _as_members(fn):
    """GCP and Azure groups are all spot or all regular: members differ only by IP."""
    return lambda group, url: [(ip, False, "") for ip in fn(group, url)]


def cmd_peers(a) -> int:
    fn = {"aws": aws_group_members, "gcp": _as_members(gcp_group_ips), "azure": _as_members(azure_group_ips)}[
        a.cloud
    ]
    me = a.self_ip or self_ip(a.cloud, a.metadata_url)
    deadline = time.time() + a.wait_s
    while True:
        members = fn(a.group, a.metadata_url)
        ips = [m[0] for m in members]
        if len(set(ips)) >= a.min_nodes and me in ips or time.time() >= deadline:
            break
        log("peers_waiting", have=len(set(ips)), want=a.min_nodes, self_in_group=me in ips)
        time.sleep(2)
    if me not in ips:
        log("self_not_in_group", self_ip=me, group=a.group, members=ips)
        print(f"this node ({me}) is not a running member of group {a.group}", file=sys.stderr)
        return 3
    ordered = [m[0] for m in choose_members(members, a.nodes)]
    if me not in ordered:
        log("standby", self_ip=me, nodes=a.nodes, members=len(set(ips)))
        print(f"this node ({me}) is a standby: the job runs on {a.nodes} of the group's nodes", file=sys.stderr)
        return 4
    slots = a.slots or default_slots()
    text = "".join(f"{ip} slots={slots}\n" for ip in ordered)  # DeepSpeed numbers nodes in hostfile order
    if a.hostfile:
        tmp = a.hostfile + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, a.hostfile)
    rank = ordered.index(me)
    print(f"NODE_RANK={rank}")
    print(f"NNODES={len(ordered)}")
    print(f"MASTER_ADDR={ordered[0]}")
    print(f"SELF_ADDR={me}")
    print(f"HOSTS={','.join(ordered)}")
    if a.hostfile:
        print(f"HOSTFILE={a.hostfile}")
    else:
        sys.stdout.write(text)
    log("peers", rank=rank, nodes=len(ordered), master=ordered[0])
    return 0


def cmd_scale_to_zero(a) -> int:
    if a.cloud == "aws":
        _aws_query(
            "autoscaling",
            {
                # SetDesiredCapacity only: the node role may not reconfigure its group (MinSize is 0 already).
                "Action": "SetDesiredCapacity",
                "Version": "2011-01-01",
                "AutoScalingGroupName": a.group,
                "DesiredCapacity": "0",
            },
            a.metadata_url,
        )
    elif a.cloud == "gcp":
        _gcp_mig_call(a.group, a.metadata_url, "/resize?size=0")
    else:
        _azure_api(
            "PATCH", _azure_group_path(a.group, a.metadata_url), a.metadata_url, {"sku": {"capacity": 0}}
        )
    log("scaled_to_zero", cloud=a.cloud, group=a.group)
    return 0


# -------------------------------------------------------------------------------------------------- cli


def cmd_restore(a) -> int:
    os.makedirs(a.dest, exist_ok=True)
    store = make_store(a.cloud, a.bucket, a.metadata_url)
    step = restore(store, a.prefix, a.dest)
    if step is None:
        log("restore_nothing", bucket=a.bucket, prefix=a.prefix)
        return 0
    print(step)
    return 0


def cmd_sync(a) -> int:
    store = make_store(a.cloud, a.bucket, a.metadata_url)
    steps = complete_steps(a.ckpt_dir)
    if not steps:
        log("sync_nothing", ckpt_dir=a.ckpt_dir)
        return 0
    upload_step(store, a.prefix, a.ckpt_dir, steps[-1], a.keep_last)
    print(steps[-1])
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trainfleet_agent", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp, bucket=True):
        sp.add_argument("--cloud", choices=["aws", "gcp", "azure"], required=True)
        sp.add_argument("--metadata-url", default=None, help="metadata service base URL (tests)")
        if bucket:
            sp.add_argument("--bucket", required=True)
            sp.add_argument("--prefix", default="")

    r = sub.add_parser("restore", help="restore the newest complete checkpoint from the bucket")
    common(r)
    r.add_argument("--dest", required=True)

    w = sub.add_parser("watch", help="watch for spot notices; sync checkpoints")
    common(w)
    w.add_argument("--ckpt-dir", required=True)
    w.add_argument("--run-dir", required=True)
    w.add_argument("--interval-minutes", type=float, default=0.0)
    w.add_argument("--keep-last", type=int, default=0)
    w.add_argument("--notice-window-s", type=float, default=None)
    w.add_argument("--poll-s", type=float, default=1.0, help="metadata poll period (GCP: hanging-get base)")
    w.add_argument("--scan-s", type=float, default=0.5, help="checkpoint directory scan period")
    w.add_argument("--http-timeout-s", type=float, default=2.0, help="per-request metadata timeout")

    s = sub.add_parser("sync", help="upload the newest complete checkpoint once")
    common(s)
    s.add_argument("--ckpt-dir", required=True)
    s.add_argument("--keep-last", type=int, default=0)

    pe = sub.add_parser("peers", help="discover group members; write a DeepSpeed hostfile")
    common(pe, bucket=False)
    pe.add_argument("--group", required=True)
    pe.add_argument("--hostfile", default=None)
    pe.add_argument("--slots", type=int, default=0)
    pe.add_argument("--self-ip", default=None, help="this node's private IP (default: from metadata)")
    pe.add_argument("--min-nodes", type=int, default=1)
    pe.add_argument("--nodes", type=int, default=0, help="the job's exact node count (0: every member)")
    pe.add_argument("--wait-s", type=float, default=0.0)

    z = sub.add_parser("scale-to-zero", help="set the group's desired capacity to 0")
    common(z, bucket=False)
    z.add_argument("--group", required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    try:
        if a.cmd == "watch":
            w = Watcher(a)
            signal.signal(signal.SIGTERM, w.on_sigterm)
            return w.run()
        return {
            "restore": cmd_restore,
            "sync": cmd_sync,
            "peers": cmd_peers,
            "scale-to-zero": cmd_scale_to_zero,
        }[a.cmd](a)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - one clear line, never a traceback
        log("fatal", command=a.cmd, error=f"{type(e).__name__}: {e}"[:500])
        print(f"trainfleet_agent {a.cmd}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
