"""Checking reverse proxies in front of the storage emulators, for the auth rules the emulators skip.

- GcsAuthProxy: gcp-storage-emulator checks no credentials at all. The proxy forwards a request only when
  it carries ``Authorization: Bearer <token>`` with a live token a GceMetadata stand-in issued
  (tests/metadata_servers.py GOOGLE_AUTH) whose scopes allow the call
  (https://cloud.google.com/storage/docs/oauth-scopes); otherwise it answers 401/403 with the JSON API's error
  (https://cloud.google.com/storage/docs/json_api/v1/status-codes).
- AzureBearerVersionGate: Azurite checks a bearer token's issuer, audience and lifetime but not the service
  version ("TODO: Check API Version" in its BlobTokenAuthenticator). Azure Storage takes bearer tokens only
  with x-ms-version 2017-11-09 or later
  (https://learn.microsoft.com/en-us/rest/api/storageservices/authorize-with-azure-active-directory) and
  answers an older or missing one with 403 AuthenticationFailed, "Authentication scheme Bearer is not
  supported in this version." (as quoted in https://github.com/MicrosoftDocs/azure-docs/issues/95050 and
  https://github.com/Azure/azure-sdk-for-net/issues/35009). It serves HTTPS, as Azure Storage does.

And, for the integrity checks of the agent's object stores (tests/test_agent_stores.py, test_agent_checkpoint.py):

- S3ChecksumGate: moto stores the x-amz-checksum-* value a client sends without checking it against the body.
  S3 checks it and answers 400 BadDigest ("The Content-MD5 or checksum value that you specified did not match
  what the server received.", https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html; the
  checksums: https://docs.aws.amazon.com/AmazonS3/latest/userguide/checking-object-integrity.html). The gate
  does the same for every PUT (PutObject, UploadPart) that carries one.
- S3CompleteAnswers200Error: CompleteMultipartUpload "can return a 200 OK response with an error in the body
  ... the 200 OK response can contain either a success or an error"
  (https://docs.aws.amazon.com/AmazonS3/latest/API/API_CompleteMultipartUpload.html); moto never does. The
  proxy answers the first `times` completions so, without forwarding them: the upload is really not complete.
- Any proxy here can flip one byte of one request's body in transit (`flip`), as a faulty link or NIC would,
  for the services' own checks to catch.

All run as threads of the test process on 127.0.0.1, port 0, and record what they saw.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import http.client
import json
import ssl
import threading
import time
import urllib.parse
import uuid
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.agent_support import TlsFiles
from tests.metadata_servers import GCS_READ_SCOPES, GCS_WRITE_SCOPES, GOOGLE_AUTH

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length", "expect"}  # fmt: skip


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


Matcher = Callable[[str, str, dict], bool]  # (method, path, headers) -> whether it applies


class ForwardingProxy:
    """Forwards each request `refusal` lets through to `upstream` and relays the answer (buffered).

    `flip`: the first request it matches has the middle byte of its body inverted on the way through.
    `preserve_host`: forward the client's Host header, as a reverse proxy that keeps it does, so the URLs the
    upstream builds from it (a resumable upload's session URI) name the proxy."""

    preserve_host = False

    def __init__(self, upstream: str, tls: TlsFiles | None = None, flip: Matcher | None = None):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.tls = tls
        self.flip = flip
        self.flipped: list[str] = []  # paths of the requests whose body was damaged
        self.lock = threading.Lock()
        self.seen: list[dict] = []  # one per request: method, path, auth scheme, status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def setup(self):
                if isinstance(self.request, ssl.SSLSocket):
                    self.request.do_handshake()  # here, in the request's thread, not in accept()
                super().setup()

            def _any(self):
                outer.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _any

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls.cert, tls.key)
            self.httpd.socket = ctx.wrap_socket(
                self.httpd.socket, server_side=True, do_handshake_on_connect=False
            )
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def refusal(self, method: str, path: str, headers, body: bytes) -> tuple[int, dict, bytes] | None:
        """None to forward the request; else the (status, headers, body) to answer with."""
        return None

    def auth_schemes(self) -> set[str]:
        with self.lock:
            return {s["auth"] for s in self.seen}

    def statuses(self) -> list[int]:
        with self.lock:
            return [s["status"] for s in self.seen]

    # ----------------------------------------------------------------------------------------------

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        method = h.command
        body = _read_body(h)
        if body and self.flip is not None:
            with self.lock:
                hit = not self.flipped and self.flip(method, h.path, h.headers)
                if hit:
                    self.flipped.append(h.path)
            if hit:
                middle = len(body) // 2
                body = body[:middle] + bytes([body[middle] ^ 0xFF]) + body[middle + 1 :]
        answer = self.refusal(method, h.path, h.headers, body) or self._forward(method, h.path, h.headers, body)
        status, headers, data = answer
        with self.lock:
            auth = (h.headers.get("Authorization") or "").split(" ", 1)[0] or "none"
            self.seen.append({"method": method, "path": h.path, "auth": auth, "status": status})
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        if not any(k.lower() == "content-length" for k in headers):
            h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if method != "HEAD":
            h.wfile.write(data)

    def _forward(self, method, path, headers, body: bytes) -> tuple[int, dict, bytes]:
        host, port = self.upstream.hostname, self.upstream.port
        if self.upstream.scheme == "https":
            ctx = ssl.create_default_context(cafile=str(self.tls.ca)) if self.tls else None
            conn = http.client.HTTPSConnection(host, port, timeout=60, context=ctx)
        else:
            conn = http.client.HTTPConnection(host, port, timeout=60)
        out = {k: v for k, v in headers.items() if k.lower() not in HOP_BY_HOP}
        if self.preserve_host and headers.get("Host"):
            out["Host"] = headers["Host"]
        if body or method in ("PUT", "POST", "PATCH"):
            out["Content-Length"] = str(len(body))
        try:
            conn.request(method, path, body=body or None, headers=out)
            resp = conn.getresponse()
            data = resp.read()
            relay = {k: v for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP}
            if method == "HEAD" and resp.getheader("Content-Length"):  # the object's size, with no body
                relay["Content-Length"] = resp.getheader("Content-Length")
            return resp.status, relay, data
        finally:
            conn.close()


def _read_body(h: BaseHTTPRequestHandler) -> bytes:
    """The request body, whether sent with Content-Length or chunked."""
    if "chunked" in (h.headers.get("Transfer-Encoding") or "").lower():
        parts = []
        while True:
            size = int(h.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while h.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                    pass
                return b"".join(parts)
            parts.append(h.rfile.read(size))
            h.rfile.readline()
    n = int(h.headers.get("Content-Length") or 0)
    return h.rfile.read(n) if n else b""


class GcsAuthProxy(ForwardingProxy):
    """GCS JSON API auth in front of gcp-storage-emulator: a live bearer token with a storage scope."""

    preserve_host = True  # a resumable upload's chunks go to the session URI, which must be the proxy's

    def refusal(self, method, path, headers, body):
        scopes = GCS_READ_SCOPES if method in ("GET", "HEAD") else GCS_WRITE_SCOPES
        bad = GOOGLE_AUTH.check(headers.get("Authorization"), scopes)
        if bad is None:
            return None
        status, doc = bad
        hdrs = {"Content-Type": "application/json; charset=UTF-8"}
        if status == 401:
            hdrs["WWW-Authenticate"] = 'Bearer realm="https://accounts.google.com/"'
        return status, hdrs, json.dumps(doc).encode()


OAUTH_MIN_VERSION = "2017-11-09"  # x-ms-version values are dates, so string order is date order


class AzureBearerVersionGate(ForwardingProxy):
    """Azure Storage's version floor for bearer tokens, in front of Azurite (which checks the token itself)."""

    def refusal(self, method, path, headers, body):
        if not (headers.get("Authorization") or "").startswith("Bearer "):
            return None
        if (headers.get("x-ms-version") or "") >= OAUTH_MIN_VERSION:
            return None
        request_id = str(uuid.uuid4())
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f0Z")
        body = (
            '<?xml version="1.0" encoding="utf-8"?><Error><Code>AuthenticationFailed</Code>'
            "<Message>Server failed to authenticate the request. Make sure the value of Authorization header "
            f"is formed correctly including the signature.\nRequestId:{request_id}\nTime:{now}</Message>"
            "<AuthenticationErrorDetail>Authentication scheme Bearer is not supported in this version."
            "</AuthenticationErrorDetail></Error>"
        )
        hdrs = {"Content-Type": "application/xml", "x-ms-error-code": "AuthenticationFailed",
                "x-ms-request-id": request_id}  # fmt: skip
        return 403, hdrs, body.encode()


# ------------------------------------------------------------------------------------------------- S3


def s3_error(status: int, code: str, message: str) -> tuple[int, dict, bytes]:
    """S3's REST error document (ErrorResponses.html: Code, Message, RequestId, HostId)."""
    request_id = uuid.uuid4().hex[:16].upper()
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message><RequestId>{request_id}</RequestId>"
        f"<HostId>{base64.b64encode(uuid.uuid4().bytes).decode()}</HostId></Error>"
    )
    return status, {"Content-Type": "application/xml", "x-amz-request-id": request_id}, body.encode()


def s3_checksum(algorithm: str, body: bytes) -> str:
    """The base64 value S3 computes for x-amz-checksum-<algorithm> (checking-object-integrity.html)."""
    from awscrt import checksums  # moto's own CRC64NVME and CRC32C implementation too (moto/s3/utils.py)

    if algorithm == "crc64nvme":
        digest = checksums.crc64nvme(body).to_bytes(8, "big")
    elif algorithm == "crc32c":
        digest = checksums.crc32c(body).to_bytes(4, "big")
    elif algorithm == "crc32":
        digest = zlib.crc32(body).to_bytes(4, "big")
    elif algorithm in ("sha1", "sha256"):
        digest = hashlib.new(algorithm, body).digest()
    else:
        raise ValueError(algorithm)
    return base64.b64encode(digest).decode()


class S3ChecksumGate(ForwardingProxy):
    """S3's check of a PUT's x-amz-checksum-<algorithm> header against the body it received, in front of moto.
    `checked` records (path, algorithm, matched) for every PUT; a PUT with a body and no checksum header, or one
    sent in an aws-chunked trailer (which this gate does not decode), is recorded with algorithm None."""

    def __init__(self, upstream: str, flip: Matcher | None = None):
        super().__init__(upstream, flip=flip)
        self.checked: list[tuple[str, str | None, bool]] = []

    def refusal(self, method, path, headers, body):
        if method != "PUT" or not body:
            return None
        names = [k.lower() for k in headers if k.lower().startswith("x-amz-checksum-") and k.lower() != "x-amz-checksum-type"]
        if not names or headers.get("x-amz-trailer"):
            with self.lock:
                self.checked.append((path, None, False))
            return None
        algorithm = names[0][len("x-amz-checksum-") :]
        matched = s3_checksum(algorithm, body) == headers[names[0]]
        with self.lock:
            self.checked.append((path, algorithm, matched))
        if matched:
            return None
        return s3_error(400, "BadDigest", f"The {algorithm.upper()} you specified did not match the calculated checksum.")


def is_complete_multipart(method: str, path: str, headers=None) -> bool:
    """POST /<key>?uploadId=... (CompleteMultipartUpload), not UploadPart (PUT ?partNumber&uploadId)."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query, keep_blank_values=True)
    return method == "POST" and "uploadId" in query


def is_upload_part(method: str, path: str, headers=None) -> bool:
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query, keep_blank_values=True)
    return method == "PUT" and "partNumber" in query and "uploadId" in query


class S3CompleteAnswers200Error(ForwardingProxy):
    """The first `times` CompleteMultipartUpload requests are answered 200 with an <Error> document (not
    forwarded); later ones go through. `completions` counts them all."""

    def __init__(self, upstream: str, error_code: str, times: int):
        super().__init__(upstream)
        self.error_code, self.times, self.completions = error_code, times, 0

    def refusal(self, method, path, headers, body):
        if not is_complete_multipart(method, path):
            return None
        with self.lock:
            self.completions += 1
            n = self.completions
        if n > self.times:
            return None
        _status, hdrs, doc = s3_error(200, self.error_code, "We encountered an internal error. Please try again.")
        return 200, hdrs, doc


class GcsPreconditionGate(ForwardingProxy):
    """GCS's request preconditions in front of gcp-storage-emulator, which ignores them: an upload with
    `ifGenerationMatch=N` is written only while the object's live generation is N (0: no live object), else GCS
    answers 412 conditionNotMet (cloud.google.com/storage/docs/request-preconditions; JSON API objects.insert
    `ifGenerationMatch`). The object's name is in the query (uploadType=media, resumable) or in the JSON part of a
    multipart upload's body."""

    preserve_host = True

    def refusal(self, method, path, headers, body):
        split = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(split.query)
        if method != "POST" or "ifGenerationMatch" not in query or not split.path.startswith("/upload/"):
            return None
        bucket = split.path.split("/b/", 1)[1].split("/", 1)[0]
        name = (query.get("name") or [None])[0]
        if name is None:  # multipart: the metadata part is JSON with the name
            start = body.find(b"{")
            name = json.loads(body[start : body.index(b"}", start) + 1])["name"]
        status, _, data = self._forward("GET", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}",
                                        {"Host": self.upstream.netloc}, b"")  # fmt: skip
        live = json.loads(data)["generation"] if status == 200 else "0"
        if str(live) == query["ifGenerationMatch"][0]:
            return None
        error = {"error": {"code": 412, "message": "At least one of the pre-conditions you specified did not hold.",
                           "errors": [{"reason": "conditionNotMet", "domain": "global",
                                       "message": "At least one of the pre-conditions you specified did not hold."}]}}  # fmt: skip
        return 412, {"Content-Type": "application/json"}, json.dumps(error).encode()


class S3SlowWrites(ForwardingProxy):
    """A node's link to S3 at `bytes_per_s`, in front of moto: each PUT with a body (an object, a multipart part) is
    answered only after its bytes would have crossed the link; one request at a time, as through one link.
    Everything else goes through at once. `written` counts the bytes shaped."""

    def __init__(self, upstream: str, bytes_per_s: float):
        super().__init__(upstream)
        self.bytes_per_s, self.written = bytes_per_s, 0
        self._link = threading.Lock()

    def refusal(self, method, path, headers, body):
        if method == "PUT" and body:
            with self._link:
                time.sleep(len(body) / self.bytes_per_s)
                self.written += len(body)
        return None
