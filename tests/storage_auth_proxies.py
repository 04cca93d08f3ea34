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

Both run as threads of the test process on 127.0.0.1, port 0, and record what they saw.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import ssl
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.agent_support import TlsFiles
from tests.metadata_servers import GCS_READ_SCOPES, GCS_WRITE_SCOPES, GOOGLE_AUTH

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade", "host", "content-length"}  # fmt: skip


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


class ForwardingProxy:
    """Forwards each request `refusal` lets through to `upstream` and relays the answer (buffered)."""

    def __init__(self, upstream: str, tls: TlsFiles | None = None):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.tls = tls
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

    def refusal(self, method: str, path: str, headers) -> tuple[int, dict, bytes] | None:
        """None to forward the request; else the (status, headers, body) to answer with."""
        raise NotImplementedError

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
        answer = self.refusal(method, h.path, h.headers) or self._forward(method, h.path, h.headers, body)
        status, headers, data = answer
        with self.lock:
            auth = (h.headers.get("Authorization") or "").split(" ", 1)[0] or "none"
            self.seen.append({"method": method, "path": h.path, "auth": auth, "status": status})
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
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
        if body or method in ("PUT", "POST", "PATCH"):
            out["Content-Length"] = str(len(body))
        try:
            conn.request(method, path, body=body or None, headers=out)
            resp = conn.getresponse()
            data = resp.read()
            relay = {k: v for k, v in resp.getheaders() if k.lower() not in HOP_BY_HOP}
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

    def refusal(self, method, path, headers):
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

    def refusal(self, method, path, headers):
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
