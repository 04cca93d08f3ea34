"""Local metadata services on 127.0.0.1 that speak each cloud's protocol, with fault injection.

- AwsImds: IMDSv2. ``PUT /latest/api/token`` (``X-aws-ec2-metadata-token-ttl-seconds`` 1..21600) returns a
  session token; every ``GET /latest/meta-data/...`` needs it in ``X-aws-ec2-metadata-token`` (401 when missing,
  unknown or expired). ``spot/instance-action`` and ``events/recommendations/rebalance`` are 404 until a notice
  is posted, then JSON (``{"action": "terminate", "time": "...Z"}`` / ``{"noticeTime": "...Z"}``). Also
  instance-id, local-ipv4, placement/region|availability-zone, iam/security-credentials/<role>.
- GceMetadata: ``Metadata-Flavor: Google`` required (403 otherwise). ``instance/preempted`` is ``FALSE`` then
  ``TRUE``; ``?wait_for_change=true`` is a hanging GET (returns when the value's ETag differs from
  ``last_etag``, or after ``timeout_sec``). ``instance/maintenance-event``, ``instance/upcoming-maintenance``,
  ``service-accounts/default/token``.
- AzureImds: ``Metadata: true`` required (400 otherwise) and ``api-version``. ``/metadata/scheduledevents``
  returns ``{"DocumentIncarnation", "Events": [...]}``; a POST of ``{"StartRequests": [{"EventId"}]}``
  acknowledges (the event is started, for every VM it names, and leaves the document). Several VMs' IMDS
  share one ScheduledEvents (a placement group); the first request for events may be answered late
  (``first_delay_s``: the service being enabled). ``/metadata/instance``, ``/metadata/identity/oauth2/token``.

Faults (``server.inject([...])``) apply, in order, one per request to the notice endpoints: ``"500"``,
``"503"``, ``"timeout"`` (answers after ``slow_s``, longer than the agent's per-request timeout), ``"hang"``
(accepts and never answers until the server stops) and, for AWS, ``"expire"`` (every session token becomes
stale, so the next GET is a 401).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import secrets
import threading
import time
import urllib.parse
import uuid
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True


class MetadataServer:
    notice_paths: tuple[str, ...] = ()

    def __init__(self, slow_s: float = 6.0):
        self.lock = threading.Condition()
        self.faults: deque[str] = deque()
        self.faults_served: list[str] = []
        self.requests: list[tuple[str, str, int]] = []
        self.slow_s = slow_s
        self.stopping = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _go(self, method):
                try:
                    status, headers, body = outer.dispatch(self, method)
                except _Hang:
                    outer.stopping.wait(600)
                    return
                except BrokenPipeError:
                    return
                with outer.lock:
                    outer.requests.append((method, self.path, status))
                    outer.lock.notify_all()
                data = body if isinstance(body, bytes) else body.encode()
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                self._go("GET")

            def do_PUT(self):
                self._go("PUT")

            def do_POST(self):
                self._go("POST")

            def do_PATCH(self):
                self._go("PATCH")

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def inject(self, faults: list[str]) -> None:
        with self.lock:
            self.faults.extend(faults)

    def _fault(self, path: str):
        """Apply the next queued fault if `path` is a notice endpoint; return a response or None."""
        if not any(path.startswith(p) for p in self.notice_paths):
            return None
        with self.lock:
            if not self.faults:
                return None
            f = self.faults.popleft()
            self.faults_served.append(f)
        if f in ("500", "502", "503"):
            return int(f), {"Content-Type": "text/plain"}, "injected server error"
        if f == "timeout":
            self.stopping.wait(self.slow_s)
            return None
        if f == "hang":
            raise _Hang()
        if f == "expire":
            self.expire_tokens()
            return None
        raise ValueError(f)

    def expire_tokens(self):
        pass

    def body(self, handler) -> bytes:
        n = int(handler.headers.get("Content-Length") or 0)
        return handler.rfile.read(n) if n else b""

    def count(self, path_part: str, status: int | None = None) -> int:
        with self.lock:
            return sum(1 for _m, p, s in self.requests if path_part in p and (status is None or s == status))

    def wait_count(self, path_part: str, n: int, timeout: float = 30.0) -> int:
        """Wait until `n` requests for `path_part` have been answered (a request count, not a time window)."""
        end = time.time() + timeout
        with self.lock:
            while True:
                seen = sum(1 for _m, p, _s in self.requests if path_part in p)
                if seen >= n or time.time() >= end:
                    return seen
                self.lock.wait(min(0.5, max(0.0, end - time.time())))


class _Hang(Exception):
    pass


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------ identity providers
# One per test process, shared by every stand-in in it, as the real ones are shared by a cloud's services:
# the metadata servers issue credentials from them, the API stand-ins check credentials against them.

ENTRA_TENANT = "8a1f2b3c-0000-4000-8000-00000000c0de"
ENTRA_ISSUER = f"https://sts.windows.net/{ENTRA_TENANT}/"  # v1.0 tokens, as managed identities get
_ENTRA_KEY = secrets.token_bytes(32)  # the tenant's signing key (HS256 here; Entra ID signs with RS256)


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def entra_token(resource: str, lifetime_s: int = 3599, now: float | None = None) -> tuple[str, dict]:
    """An access token for `resource` with the claims Entra ID puts in a managed identity's v1.0 token
    (https://learn.microsoft.com/en-us/entra/identity-platform/access-token-claims-reference): aud is the
    resource asked for, iat/nbf are backdated 5 minutes for clock skew, exp is `lifetime_s` from now."""
    now = int(time.time() if now is None else now)
    principal = str(uuid.uuid4())
    claims = {
        "aud": resource,
        "iss": ENTRA_ISSUER,
        "iat": now - 300,
        "nbf": now - 300,
        "exp": now + lifetime_s,
        "aio": _b64url(secrets.token_bytes(24)),
        "appid": str(uuid.uuid4()),
        "appidacr": "2",
        "idp": ENTRA_ISSUER,
        "idtyp": "app",
        "oid": principal,
        "sub": principal,
        "tid": ENTRA_TENANT,
        "uti": _b64url(secrets.token_bytes(16)),
        "ver": "1.0",
        "xms_mirid": "/subscriptions/00000000-0000-0000-0000-000000000000/resourcegroups/trainfleet-rg"
        "/providers/Microsoft.Compute/virtualMachineScaleSets/trainfleet-vmss",
    }
    header = {"typ": "JWT", "alg": "HS256"}
    signing_input = _b64url(json.dumps(header).encode()) + "." + _b64url(json.dumps(claims).encode())
    signature = hmac.new(_ENTRA_KEY, signing_input.encode(), hashlib.sha256).digest()
    return signing_input + "." + _b64url(signature), claims


def entra_claims(token: str) -> dict | None:
    """The claims of a token this tenant signed, or None (malformed or not signed with the tenant key).
    Lifetime and audience are the caller's to check: they are per service."""
    try:
        head, body, sig = token.split(".")
        expected = hmac.new(_ENTRA_KEY, f"{head}.{body}".encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(expected, _unb64url(sig)):
            return None
        return json.loads(_unb64url(body))
    except (ValueError, TypeError):
        return None


def jwt_claims_unverified(token: str) -> dict:
    """Read a JWT's claims without checking anything (for assertions in tests)."""
    return json.loads(_unb64url(token.split(".")[1]))


GOOGLE_SCOPE = "https://www.googleapis.com/auth/"


class GoogleAuth:
    """Google's OAuth token service as the APIs see it: every access token the GCE metadata stand-ins issued,
    with its expiry and scopes. `check` answers what a Google API answers for an Authorization header."""

    # https://cloud.google.com/storage/docs/json_api/v1/status-codes#401-unauthorized and the
    # "Request is missing required authentication credential" form every Google API returns
    MISSING = "Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."

    def __init__(self):
        self.lock = threading.Lock()
        self.tokens: dict[str, tuple[float, frozenset[str]]] = {}  # token -> (expires at, scopes)

    def issue(self, scopes: list[str], lifetime_s: int = 3599) -> str:
        token = "ya29.c." + secrets.token_urlsafe(48)
        with self.lock:
            self.tokens[token] = (time.time() + lifetime_s, frozenset(scopes))
        return token

    def expires_in(self, token: str) -> int:
        with self.lock:
            return max(0, int(self.tokens[token][0] - time.time()))

    def expire(self, tokens) -> None:
        with self.lock:
            for t in tokens:
                if t in self.tokens:
                    self.tokens[t] = (time.time() - 1, self.tokens[t][1])

    def check(self, authorization: str | None, any_scope: set[str]) -> tuple[int, dict] | None:
        """None when the header carries a live token with one of `any_scope`; else (status, error JSON)."""
        if not authorization or not authorization.startswith("Bearer "):
            return 401, self._error(401, self.MISSING, "required", "UNAUTHENTICATED", located=True)
        with self.lock:
            exp, scopes = self.tokens.get(authorization[len("Bearer ") :], (0.0, frozenset()))
        if exp <= time.time():
            return 401, self._error(401, "Invalid Credentials", "authError", "UNAUTHENTICATED", located=True)
        if not scopes & any_scope:
            # https://cloud.google.com/storage/docs/json_api/v1/status-codes#403-forbidden
            return 403, self._error(
                403, "Request had insufficient authentication scopes.", "insufficientPermissions",
                "PERMISSION_DENIED",
            )  # fmt: skip
        return None

    @staticmethod
    def _error(code: int, message: str, reason: str, status: str, located: bool = False) -> dict:
        item = {"message": message, "domain": "global", "reason": reason}
        if located:
            item.update(locationType="header", location="Authorization")
        return {"error": {"code": code, "message": message, "errors": [item], "status": status}}


GOOGLE_AUTH = GoogleAuth()

# What each API accepts (https://cloud.google.com/storage/docs/oauth-scopes,
# https://cloud.google.com/compute/docs/access/service-accounts#accesscopesiam): reads take any of the
# read scopes, writes only the read-write ones. cloud-platform covers every API.
GCS_READ_SCOPES = {GOOGLE_SCOPE + s for s in ("devstorage.read_only", "devstorage.read_write",
                   "devstorage.full_control", "cloud-platform", "cloud-platform.read-only")}  # fmt: skip
GCS_WRITE_SCOPES = {
    GOOGLE_SCOPE + s for s in ("devstorage.read_write", "devstorage.full_control", "cloud-platform")
}
COMPUTE_READ_SCOPES = {
    GOOGLE_SCOPE + s for s in ("compute", "compute.readonly", "cloud-platform", "cloud-platform.read-only")
}
COMPUTE_WRITE_SCOPES = {GOOGLE_SCOPE + s for s in ("compute", "cloud-platform")}

# The scopes trainfleet's GCP stacks give nodes (infra/gcp/iam.py NODE_SCOPES; test_agent_gcp checks they match).
NODE_SCOPES = [
    GOOGLE_SCOPE + "devstorage.read_write",
    GOOGLE_SCOPE + "compute",
    GOOGLE_SCOPE + "logging.write",
    GOOGLE_SCOPE + "monitoring.write",
]
# The node's service account, as the metadata server names it (instance/service-accounts/default/email).
SERVICE_ACCOUNT_EMAIL = "trainfleet-node@trainfleet-test.iam.gserviceaccount.com"


class AwsImds(MetadataServer):
    notice_paths = ("/latest/meta-data/spot/", "/latest/meta-data/events/")

    def __init__(self, role: str = "trainfleet-node", creds: tuple[str, str, str] | None = None, **kw):
        super().__init__(**kw)
        self.tokens: dict[str, float] = {}
        self.instance_action: dict | None = None
        self.rebalance: dict | None = None
        self.role = role
        self.creds = creds or (
            "ASIAIMDSROLEKEY00001",
            "imdsRoleSecret/abcdefghijklmnopqrstuv",
            "imds-session-token",
        )
        self.values = {
            "instance-id": "i-0123456789abcdef0",
            "local-ipv4": "10.0.0.10",
            "placement/region": "us-east-1",
            "placement/availability-zone": "us-east-1a",
        }

    def expire_tokens(self):
        with self.lock:
            self.tokens.clear()

    def notice(self, action: str = "terminate", in_s: float = 120.0):
        with self.lock:
            self.instance_action = {"action": action, "time": _iso(time.time() + in_s)}

    def rebalance_recommendation(self):
        with self.lock:
            self.rebalance = {"noticeTime": _iso(time.time())}

    def dispatch(self, h, method):
        path = urllib.parse.urlsplit(h.path).path
        if method == "PUT" and path == "/latest/api/token":
            ttl = h.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            if not ttl or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return 400, {}, "missing or invalid X-aws-ec2-metadata-token-ttl-seconds"
            tok = secrets.token_urlsafe(32)
            with self.lock:
                self.tokens[tok] = time.time() + int(ttl)
            return 200, {"X-aws-ec2-metadata-token-ttl-seconds": ttl, "Content-Type": "text/plain"}, tok
        if method != "GET" or not path.startswith("/latest/meta-data/"):
            return 405 if method != "GET" else 404, {}, ""
        tok = h.headers.get("X-aws-ec2-metadata-token")
        with self.lock:
            valid = tok is not None and self.tokens.get(tok, 0) > time.time()
        if not valid:
            return 401, {}, ""
        fault = self._fault(path)
        if fault:
            return fault
        with self.lock:
            valid = self.tokens.get(tok, 0) > time.time()  # "expire" may have just staled it
        if not valid:
            return 401, {}, ""
        key = path[len("/latest/meta-data/") :]
        with self.lock:
            if key == "spot/instance-action":
                return (
                    (200, {"Content-Type": "text/plain"}, json.dumps(self.instance_action))
                    if self.instance_action
                    else (404, {}, "")
                )
            if key == "events/recommendations/rebalance":
                return (200, {}, json.dumps(self.rebalance)) if self.rebalance else (404, {}, "")
        if key == "iam/security-credentials/":
            return 200, {}, self.role
        if key == "iam/security-credentials/" + self.role:
            ak, sk, st = self.creds
            doc = {
                "Code": "Success",
                "LastUpdated": _iso(time.time()),
                "Type": "AWS-HMAC",
                "AccessKeyId": ak,
                "SecretAccessKey": sk,
                "Token": st,
                "Expiration": _iso(time.time() + 6 * 3600),
            }
            return 200, {}, json.dumps(doc)
        if key in self.values:
            return 200, {}, self.values[key]
        return 404, {}, ""


class GceMetadata(MetadataServer):
    notice_paths = (
        "/computeMetadata/v1/instance/preempted",
        "/computeMetadata/v1/instance/maintenance-event",
    )

    def __init__(self, scopes: list[str] | None = None, **kw):
        super().__init__(**kw)
        self.scopes = list(NODE_SCOPES if scopes is None else scopes)
        self.issued: list[str] = []  # access tokens, newest last
        self.values = {
            "instance/preempted": "FALSE",
            "instance/maintenance-event": "NONE",
            # https://cloud.google.com/compute/docs/instances/monitor-plan-host-maintenance-event: "{ }" when no
            # maintenance is scheduled, else the window (`schedule_maintenance`)
            "instance/upcoming-maintenance": "{ }",
            "project/project-id": "trainfleet-test",
            "instance/zone": "projects/123456789/zones/us-central1-a",
            "instance/name": "node-0",
            "instance/network-interfaces/0/ip": "10.128.0.10",
        }
        self.hanging_gets = 0

    def preempt(self):
        self.set("instance/preempted", "TRUE")

    def schedule_maintenance(self, window_start_s: float, window_s: float = 3600.0, status: str = "PENDING"):
        """instance/upcoming-maintenance as the metadata server answers it when maintenance is scheduled (the doc's
        example: snake_case fields, RFC 3339 UTC times)."""
        start = time.time() + window_start_s
        doc = {
            "can_reschedule": "true",
            "latest_window_start_time": _iso(start),
            "maintenance_reasons": ["PLANNED_UPDATE"],
            "maintenance_status": status,
            "type": "SCHEDULED",
            "window_end_time": _iso(start + window_s),
            "window_start_time": _iso(start),
        }
        self.set("instance/upcoming-maintenance", json.dumps(doc, indent=1))

    def expire_tokens(self):
        """Every token this server issued stops working (Google rejects it as expired)."""
        with self.lock:
            issued = list(self.issued)
        GOOGLE_AUTH.expire(issued)

    def _token(self) -> dict:
        """The service account's token, reused while it has 5+ minutes left, as the metadata server does
        (https://cloud.google.com/compute/docs/access/authenticate-workloads#applications)."""
        with self.lock:
            if self.issued and GOOGLE_AUTH.expires_in(self.issued[-1]) > 300:
                tok = self.issued[-1]
            else:
                tok = GOOGLE_AUTH.issue(self.scopes)
                self.issued.append(tok)
        return {"access_token": tok, "expires_in": GOOGLE_AUTH.expires_in(tok), "token_type": "Bearer"}

    def set(self, key: str, value: str):
        with self.lock:
            self.values[key] = value
            self.lock.notify_all()

    @staticmethod
    def etag(value: str) -> str:
        return hashlib.sha1(value.encode()).hexdigest()[:16]

    def dispatch(self, h, method):
        parts = urllib.parse.urlsplit(h.path)
        q = dict(urllib.parse.parse_qsl(parts.query))
        if h.headers.get("Metadata-Flavor") != "Google":
            return 403, {"Content-Type": "text/html"}, "Missing Metadata-Flavor:Google header."
        if method != "GET" or not parts.path.startswith("/computeMetadata/v1/"):
            return 405 if method != "GET" else 404, {}, ""
        fault = self._fault(parts.path)
        if fault:
            return fault
        key = parts.path[len("/computeMetadata/v1/") :]
        hdr = {"Metadata-Flavor": "Google", "Content-Type": "application/text"}
        if key == "instance/service-accounts/default/token":
            return 200, {**hdr, "Content-Type": "application/json"}, json.dumps(self._token())
        if key == "instance/service-accounts/default/scopes":
            return 200, hdr, "".join(sc + "\n" for sc in self.scopes)
        # the account answers by its email too (its alias "default" is what the docs' examples use)
        key = key.replace(f"instance/service-accounts/{SERVICE_ACCOUNT_EMAIL}/", "instance/service-accounts/default/")
        if key == "instance/service-accounts/default/" and q.get("recursive") == "true":
            # the account's directory as JSON (what google-auth's compute_engine credentials read first):
            # https://cloud.google.com/compute/docs/metadata/querying-metadata#aggcontents
            account = {"aliases": ["default"], "email": SERVICE_ACCOUNT_EMAIL, "scopes": self.scopes}
            return 200, {**hdr, "Content-Type": "application/json"}, json.dumps(account)
        with self.lock:
            if key not in self.values:
                return 404, hdr, ""
            if q.get("wait_for_change") == "true":
                self.hanging_gets += 1
                timeout = float(q.get("timeout_sec", "300"))
                end = time.time() + timeout
                last = q.get("last_etag")
                if last is None:
                    last = self.etag(self.values[key])
                while (
                    self.etag(self.values[key]) == last and time.time() < end and not self.stopping.is_set()
                ):
                    self.lock.wait(min(0.5, max(0.0, end - time.time())))
            value = self.values[key]
        return 200, {**hdr, "ETag": self.etag(value)}, value


class ScheduledEvents:
    """Azure's Scheduled Events for one placement group, as every VM in it sees them
    (https://learn.microsoft.com/en-us/azure/virtual-machines/linux/scheduled-events): each VM's IMDS serves
    the same document ("Scheduled Events for all virtual machines ... in a Placement Group ... are delivered to
    all other VMs in the same group", hence `Resources`), and approving an event from any VM ("Acknowledging an
    event allows the event to proceed for all Resources in the event") starts it for all of them; here the
    started event leaves the document at once. A canceled event leaves the document before it starts."""

    def __init__(self):
        self.lock = threading.Lock()
        self.incarnation = 1
        self.events: list[dict] = []
        self.acked: list[str] = []
        self.approvals: list[tuple[str, str, float]] = []  # (vm that approved, event id, when), in order

    def schedule(self, event_type: str, not_before_s: float, resources: list[str]) -> str:
        eid = str(uuid.uuid4()).upper()
        nb = dt.datetime.fromtimestamp(time.time() + not_before_s, dt.UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
        ev = {
            "EventId": eid,
            "EventType": event_type,
            "ResourceType": "VirtualMachine",
            "Resources": list(resources),
            "EventStatus": "Scheduled",
            "NotBefore": nb,
            "Description": "",
            "EventSource": "Platform",
            "DurationInSeconds": -1,
        }
        with self.lock:
            self.events.append(ev)
            self.incarnation += 1
        return eid

    def cancel(self, event_id: str) -> None:
        with self.lock:
            self.events = [e for e in self.events if e["EventId"] != event_id]
            self.incarnation += 1

    def approve(self, vm: str, ids: list[str]) -> None:
        with self.lock:
            self.approvals.extend((vm, i, time.time()) for i in ids)
            self.acked.extend(i for i in ids if i not in self.acked)
            self.events = [e for e in self.events if e["EventId"] not in ids]
            self.incarnation += 1

    def document(self) -> dict:
        with self.lock:
            return {"DocumentIncarnation": self.incarnation, "Events": [dict(e) for e in self.events]}


class AzureImds(MetadataServer):
    """One VM's IMDS. `events` may be shared with other VMs' (one placement group). With `first_delay_s`, Scheduled
    Events is not enabled yet: "Scheduled Events is enabled for your service the first time you make a request
    for events. You should expect a delayed response in your first call of up to two minutes" (the doc above).
    The service is enabled `first_delay_s` after the first request for events; until then every request for
    events is answered only then (or not at all, for a client that gave up)."""

    notice_paths = ("/metadata/scheduledevents",)

    def __init__(
        self, vm_name: str = "node_0", events: ScheduledEvents | None = None, first_delay_s: float = 0.0, **kw
    ):
        super().__init__(**kw)
        self.vm_name = vm_name
        self.hub = events or ScheduledEvents()
        self.first_delay_s = first_delay_s
        self.enabled_at: float | None = None

    @property
    def events(self) -> list[dict]:
        return self.hub.events

    @property
    def acked(self) -> list[str]:
        return self.hub.acked

    def schedule(self, event_type: str, not_before_s: float, resources: list[str] | None = None) -> str:
        return self.hub.schedule(event_type, not_before_s, [self.vm_name] if resources is None else resources)

    def preempt(self, not_before_s: float = 30.0, resources: list[str] | None = None) -> str:
        return self.schedule("Preempt", not_before_s, resources)

    def _wait_until_enabled(self) -> None:
        with self.lock:
            if self.enabled_at is None:
                self.enabled_at = time.time() + self.first_delay_s
            left = self.enabled_at - time.time()
        if left > 0:
            self.stopping.wait(left)

    def dispatch(self, h, method):
        parts = urllib.parse.urlsplit(h.path)
        q = dict(urllib.parse.parse_qsl(parts.query))
        if h.headers.get("Metadata") != "true":
            return (
                400,
                {"Content-Type": "application/json"},
                json.dumps({"error": "Bad request. Required metadata header not specified"}),
            )
        if "api-version" not in q:
            return 400, {}, json.dumps({"error": "Bad request. api-version was not specified in the request"})
        if parts.path == "/metadata/scheduledevents":
            self._wait_until_enabled()
        fault = self._fault(parts.path)
        if fault:
            return fault
        js = {"Content-Type": "application/json; charset=utf-8"}
        if parts.path == "/metadata/scheduledevents":
            if method == "POST":
                try:
                    req = json.loads(self.body(h) or b"{}")
                    ids = [s["EventId"] for s in req["StartRequests"]]
                except (ValueError, KeyError, TypeError):
                    return 400, js, json.dumps({"error": "bad StartRequests"})
                self.hub.approve(self.vm_name, ids)
                return 200, js, ""
            return 200, js, json.dumps(self.hub.document())
        if parts.path == "/metadata/instance":
            doc = {
                "compute": {
                    "name": self.vm_name,
                    "subscriptionId": "00000000-0000-0000-0000-000000000000",
                    "resourceGroupName": "trainfleet-rg",
                    "vmScaleSetName": "trainfleet-vmss",
                    "location": "eastus",
                },
                "network": {"interface": [{"ipv4": {"ipAddress": [{"privateIpAddress": "10.1.0.4"}]}}]},
            }
            return 200, js, json.dumps(doc)
        if parts.path == "/metadata/instance/network":
            return (
                200,
                js,
                json.dumps({"interface": [{"ipv4": {"ipAddress": [{"privateIpAddress": "10.1.0.4"}]}}]}),
            )
        if parts.path == "/metadata/identity/oauth2/token":
            return self._token(q.get("resource"), js)
        return 404, js, json.dumps({"error": "Not found"})

    # Resources this tenant issues tokens for (an unknown one is AADSTS50001 below).
    RESOURCES = {
        "https://storage.azure.com/", "https://storage.azure.com",
        "https://management.azure.com/", "https://management.azure.com",
        "https://management.core.windows.net/", "https://vault.azure.net",
    }  # fmt: skip

    def _token(self, resource: str | None, js: dict):
        """GET /metadata/identity/oauth2/token, as documented in
        https://learn.microsoft.com/en-us/entra/identity/managed-identities-azure-resources/how-to-use-vm-token#get-a-token-using-http
        (`resource` is required; its error table gives 400 for a missing or unknown one)."""
        if not resource:
            missing = "Required query variable 'resource' is missing"
            return 400, js, json.dumps({"error": "invalid_request", "error_description": missing})
        if resource not in self.RESOURCES:
            unknown = f"AADSTS50001: The application named {resource} was not found in the tenant named {ENTRA_TENANT}."
            return 400, js, json.dumps({"error": "invalid_resource", "error_description": unknown})
        token, claims = entra_token(resource)
        now = int(time.time())
        doc = {  # every number is a string in this API's answer
            "access_token": token,
            "client_id": claims["appid"],
            "expires_in": str(claims["exp"] - now),
            "expires_on": str(claims["exp"]),
            "ext_expires_in": str(claims["exp"] - now),
            "not_before": str(claims["nbf"]),
            "resource": resource,
            "token_type": "Bearer",
        }
        return 200, js, json.dumps(doc)


class _ApiServer(MetadataServer):
    """A cloud control-plane API on loopback that requires a bearer token."""

    def refusal(self, h, method):
        """None when the request's credentials are good for this API; else the response to send."""
        raise NotImplementedError


class GoogleApiServer(_ApiServer):
    """A Google API: a live access token (issued by a GceMetadata stand-in) with one of the API's scopes."""

    read_scopes: set[str] = set()
    write_scopes: set[str] = set()

    def is_write(self, method: str, path: str) -> bool:
        return method != "GET"

    def refusal(self, h, method):
        path = urllib.parse.urlsplit(h.path).path
        scopes = self.write_scopes if self.is_write(method, path) else self.read_scopes
        bad = GOOGLE_AUTH.check(h.headers.get("Authorization"), scopes)
        if bad is None:
            return None
        status, body = bad
        return status, {"Content-Type": "application/json; charset=UTF-8"}, json.dumps(body)


# Azure Resource Manager accepts these audiences and no other; its 401 names them. The bodies below are
# ARM's, as quoted in https://github.com/hashicorp/go-azure-helpers/issues/51 and
# https://github.com/Azure-Samples/active-directory-dotnetcore-daemon-v2/issues/145 .
ARM_AUDIENCES = (
    "https://management.core.windows.net/", "https://management.core.windows.net",
    "https://management.azure.com/", "https://management.azure.com",
)  # fmt: skip


def arm_refusal(authorization: str | None, now: float | None = None):
    """None for a token ARM accepts; else (401, headers, error JSON) as ARM answers."""
    now = time.time() if now is None else now
    challenge = {
        "Content-Type": "application/json; charset=utf-8",
        "WWW-Authenticate": f'Bearer authorization_uri="https://login.windows.net/{ENTRA_TENANT}", '
        'error="invalid_token", error_description="The access token is invalid."',
    }

    def refuse(code: str, message: str):
        return 401, challenge, json.dumps({"error": {"code": code, "message": message}})

    if not authorization:
        return refuse("AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
    claims = entra_claims(authorization[len("Bearer ") :]) if authorization.startswith("Bearer ") else None
    if claims is None or claims.get("iss") != ENTRA_ISSUER:
        return refuse("InvalidAuthenticationToken", "The access token is invalid.")
    if not claims.get("nbf", now + 1) <= now < claims.get("exp", 0):
        return refuse(
            "ExpiredAuthenticationToken",
            f"The access token expiry UTC time '{_iso(claims.get('exp', 0))}' is earlier than current UTC time '{_iso(now)}'.",
        )
    if claims.get("aud") not in ARM_AUDIENCES:
        allowed = ",".join(f"'{a}'" for a in ARM_AUDIENCES)
        return refuse(
            "InvalidAuthenticationTokenAudience",
            f"The access token has been obtained for wrong audience or resource '{claims.get('aud')}'. "
            f"It should exactly match with one of the allowed audiences {allowed}.",
        )
    return None


class GceComputeApi(GoogleApiServer):
    """Compute Engine API v1 as its reference describes it, for the calls the agent makes:
    - instanceGroupManagers.listManagedInstances / regionInstanceGroupManagers.listManagedInstances
      (https://cloud.google.com/compute/docs/reference/rest/v1/instanceGroupManagers/listManagedInstances):
      a POST that reads; `maxResults` 0..500 (default 500), `pageToken`; the answer is
      `{"managedInstances": [...], "nextPageToken"}` with nextPageToken absent on the last page. A page may hold
      fewer than maxResults (`page_size` caps it here, so a client that ignores nextPageToken is caught).
    - instanceGroupManagers.resize / regionInstanceGroupManagers.resize (`size` required) answer an Operation
      (https://cloud.google.com/compute/docs/reference/rest/v1/zoneOperations), RUNNING.
    - instances.get: the instance with its networkInterfaces[].networkIP.
    Errors are Google's JSON error (`{"error": {"code", "message", "errors": [{"message", "domain", "reason"}]}}`);
    a missing resource is 404 "The resource '<path>' was not found".
    """

    read_scopes = COMPUTE_READ_SCOPES
    write_scopes = COMPUTE_WRITE_SCOPES
    MAX_RESULTS = 500

    def is_write(self, method: str, path: str) -> bool:
        return method != "GET" and not path.endswith("/listManagedInstances")  # a POST that only reads

    def __init__(self, project="trainfleet-test", zone="us-central1-a", page_size: int = MAX_RESULTS, **kw):
        super().__init__(**kw)
        self.project, self.zone = project, zone
        self.region = zone.rsplit("-", 1)[0]
        self.page_size = page_size
        self.groups: dict[str, list[tuple[str, str, str | None]]] = {}  # group -> [(name, ip, instanceStatus)]
        self.sizes: dict[str, int] = {}
        self.regional: set[str] = set()
        self.page_tokens: list[str | None] = []  # pageToken of each listManagedInstances request, in order

    def add_group(
        self, name: str, members: list[tuple], status: str | None = "RUNNING", regional: bool = False
    ):
        """members: (instance name, networkIP) or (instance name, networkIP, instanceStatus); a status of None is
        an instance still being created (no instanceStatus in the listing)."""
        self.groups[name] = [(m[0], m[1], m[2] if len(m) > 2 else status) for m in members]
        self.sizes[name] = len(members)
        if regional:
            self.regional.add(name)

    @staticmethod
    def _error(code: int, message: str, reason: str):
        body = {"error": {"code": code, "message": message,
                          "errors": [{"message": message, "domain": "global", "reason": reason}]}}  # fmt: skip
        return code, {"Content-Type": "application/json; charset=UTF-8"}, json.dumps(body)

    def _operation(self, g: str, scope: str, location: str, op_type: str, target: str) -> dict:
        base = f"https://www.googleapis.com/compute/v1/projects/{self.project}/{scope}/{location}"
        name = f"operation-{int(time.time() * 1000)}-{uuid.uuid4().hex[:12]}"
        now = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
        return {
            "kind": "compute#operation",
            "id": str(uuid.uuid4().int % 10**19),
            "name": name,
            scope[:-1]: base,
            "operationType": op_type,
            "targetLink": f"{base}/{target}",
            "targetId": str(abs(hash(g)) % 10**19),
            "status": "RUNNING",
            "user": SERVICE_ACCOUNT_EMAIL,
            "progress": 0,
            "insertTime": now,
            "startTime": now,
            "selfLink": f"{base}/operations/{name}",
        }

    def dispatch(self, h, method):
        refused = self.refusal(h, method)
        if refused:
            self.body(h)
            return refused
        parts = urllib.parse.urlsplit(h.path)
        q = dict(urllib.parse.parse_qsl(parts.query))
        js = {"Content-Type": "application/json; charset=UTF-8"}
        self.body(h)
        prefix = "/compute/v1/"
        if not parts.path.startswith(prefix):
            return 404, {"Content-Type": "text/html"}, "<html><body>Not Found</body></html>"
        resource = parts.path[len(prefix) :]
        not_found = self._error(404, f"The resource '{resource.rsplit('/', 1)[0] if method == 'POST' else resource}' was not found", "notFound")
        zonal = f"projects/{self.project}/zones/{self.zone}/"
        regional = f"projects/{self.project}/regions/{self.region}/"
        if resource.startswith(zonal):
            rest, scope, location = resource[len(zonal) :].split("/"), "zones", self.zone
        elif resource.startswith(regional):
            rest, scope, location = resource[len(regional) :].split("/"), "regions", self.region
        else:
            return not_found
        if rest[0] == "instanceGroupManagers" and len(rest) == 3 and method == "POST":
            g = rest[1]
            if g not in self.groups or (g in self.regional) != (scope == "regions"):
                return not_found
            if rest[2] == "listManagedInstances":
                return self._list_managed(g, q, js)
            if rest[2] == "resize":
                if not q.get("size", "").isdigit():
                    return self._error(400, "Invalid value for field 'size': ''. Must be a non-negative integer.", "invalid")
                self.sizes[g] = int(q["size"])
                kind = "instanceGroupManagers" if scope == "zones" else "regionInstanceGroupManagers"
                op = self._operation(g, scope, location, f"compute.{kind}.resize", f"instanceGroupManagers/{g}")
                return 200, js, json.dumps(op)
        if rest[0] == "instances" and len(rest) == 2 and method == "GET" and scope == "zones":
            for members in self.groups.values():
                for n, ip, _st in members:
                    if n == rest[1]:
                        return 200, js, json.dumps({"name": n, "networkInterfaces": [{"name": "nic0", "networkIP": ip}]})
        return not_found

    def _list_managed(self, g: str, q: dict, js: dict):
        try:
            max_results = int(q.get("maxResults", self.MAX_RESULTS))
            if not 0 <= max_results <= self.MAX_RESULTS:
                raise ValueError
        except ValueError:
            return self._error(400, f"Invalid value for field 'maxResults': '{q.get('maxResults')}'. Must be between 0 and 500.", "invalid")
        token = q.get("pageToken")
        self.page_tokens.append(token)
        start = 0
        if token:
            if not token.startswith("mi-") or not token[3:].isdigit():
                return self._error(400, f"Invalid value for field 'pageToken': '{token}'.", "invalid")
            start = int(token[3:])
        members = self.groups[g]
        count = min(max_results or self.MAX_RESULTS, self.page_size)
        items = []
        for n, _ip, st in members[start : start + count]:
            mi = {
                "instance": f"https://www.googleapis.com/compute/v1/projects/{self.project}/zones/{self.zone}/instances/{n}",
                "id": str(abs(hash(n)) % 10**12),
                "name": n,
                "currentAction": "NONE" if st else "CREATING",
            }
            if st:
                mi["instanceStatus"] = st
            items.append(mi)
        doc: dict = {"managedInstances": items}
        if start + count < len(members):
            doc["nextPageToken"] = f"mi-{start + count}"
        return 200, js, json.dumps(doc)


class AzureArmApi(_ApiServer):
    """Azure Resource Manager, for the calls the agent makes, as the REST reference describes them:
    - Network Interface In VM SS, List Virtual Machine Scale Set Network Interfaces
      (https://learn.microsoft.com/en-us/rest/api/virtualnetwork/network-interface-in-vm-ss/list-virtual-machine-scale-set-network-interfaces,
      api-version 2018-10-01): `{"value": [NetworkInterface], "nextLink"}`, nextLink absent on the last page
      (`page_size` splits the listing into pages here);
    - Virtual Machine Scale Sets, Update (https://learn.microsoft.com/en-us/rest/api/compute/virtual-machine-scale-sets/update):
      a PATCH of the fields to change; 200 with the scale set (provisioningState "Updating") and an
      Azure-AsyncOperation header to poll (answered Succeeded).
    Errors are ARM's `{"error": {"code", "message"}}`; a scale set that is not there is ResourceNotFound.
    ARM only speaks HTTPS: with `tls` (an object with .cert and .key PEM paths, e.g. tests.agent_support's
    TlsFiles) the server does too, as the Azure SDKs require for bearer tokens; without it, plain HTTP for raw
    requests in tests."""

    NIC_API_VERSIONS = ("2017-03-30", "2018-10-01")  # the versions of the VMSS network-interface API

    def __init__(self, subscription="00000000-0000-0000-0000-000000000000", rg="trainfleet-rg", tls=None,
                 page_size: int | None = None, **kw):  # fmt: skip
        super().__init__(**kw)
        self.subscription, self.rg = subscription, rg
        self.prefix = f"/subscriptions/{subscription}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets/"
        self.groups: dict[str, list[str]] = {}
        self.capacity: dict[str, int] = {}
        self.patches: list[dict] = []  # the body of each accepted PATCH, in order
        self.page_size = page_size
        if tls is not None:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(str(tls.cert), str(tls.key))
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
            self.url = "https://" + self.url.split("://", 1)[1]

    def add_group(self, name: str, ips: list[str]):
        self.groups[name] = ips
        self.capacity[name] = len(ips)

    def refusal(self, h, method):
        return arm_refusal(h.headers.get("Authorization"))

    def _error(self, status: int, code: str, message: str):
        return status, {"Content-Type": "application/json; charset=utf-8", "x-ms-failure-cause": "gateway"}, json.dumps(
            {"error": {"code": code, "message": message}}
        )

    def _nic(self, g: str, i: int, ip: str) -> dict:
        vm = f"{self.prefix}{g}/virtualMachines/{i}"
        nic_id = f"{vm}/networkInterfaces/{g}-nic"
        subnet = f"/subscriptions/{self.subscription}/resourceGroups/{self.rg}/providers/Microsoft.Network/virtualNetworks/trainfleet-vnet/subnets/nodes"
        return {
            "name": f"{g}-nic",
            "id": nic_id,
            "etag": f'W/"{uuid.uuid5(uuid.NAMESPACE_URL, nic_id)}"',
            "properties": {
                "provisioningState": "Succeeded",
                "resourceGuid": str(uuid.uuid5(uuid.NAMESPACE_URL, nic_id + "/guid")),
                "ipConfigurations": [{
                    "name": f"{g}-ipconfig",
                    "id": f"{nic_id}/ipConfigurations/{g}-ipconfig",
                    "properties": {"provisioningState": "Succeeded", "privateIPAddress": ip,
                                   "privateIPAllocationMethod": "Dynamic", "subnet": {"id": subnet},
                                   "primary": True, "privateIPAddressVersion": "IPv4"},
                }],
                "dnsSettings": {"dnsServers": [], "appliedDnsServers": []},
                "macAddress": f"00-0D-3A-00-{i // 256 % 256:02X}-{i % 256:02X}",
                "enableAcceleratedNetworking": True,
                "enableIPForwarding": False,
                "primary": True,
                "virtualMachine": {"id": vm},
            },
        }  # fmt: skip

    def dispatch(self, h, method):
        refused = self.refusal(h, method)
        if refused:
            self.body(h)
            return refused
        parts = urllib.parse.urlsplit(h.path)
        q = dict(urllib.parse.parse_qsl(parts.query))
        js = {"Content-Type": "application/json; charset=utf-8"}
        if "api-version" not in q:
            return self._error(400, "MissingApiVersionParameter",
                               "The api-version query parameter (?api-version=) is required for all requests.")  # fmt: skip
        body = self.body(h)
        ops = f"/subscriptions/{self.subscription}/providers/Microsoft.Compute/locations/eastus/operations/"
        if parts.path.startswith(ops) and method == "GET":
            return 200, js, json.dumps({"name": parts.path[len(ops) :], "status": "Succeeded"})
        rest = parts.path[len(self.prefix) :].split("/") if parts.path.startswith(self.prefix) else [""]
        g = rest[0]
        if g not in self.groups:
            return self._error(404, "ResourceNotFound",
                               f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{g}' under resource group "
                               f"'{self.rg}' was not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix")  # fmt: skip
        if len(rest) == 2 and rest[1] == "networkInterfaces" and method == "GET":
            if q["api-version"] not in self.NIC_API_VERSIONS:
                return self._error(400, "NoRegisteredProviderFound",
                                   f"No registered resource provider found for location 'eastus' and API version "
                                   f"'{q['api-version']}' for type 'virtualMachineScaleSets/networkInterfaces'.")  # fmt: skip
            nics = [self._nic(g, i, ip) for i, ip in enumerate(self.groups[g])]
            start = int(q.get("$skiptoken", "0"))
            end = len(nics) if self.page_size is None else start + self.page_size
            doc: dict = {"value": nics[start:end]}
            if end < len(nics):
                doc["nextLink"] = f"{self.url}{parts.path}?api-version={q['api-version']}&$skiptoken={end}"
            return 200, js, json.dumps(doc)
        if len(rest) == 1 and method == "PATCH":
            try:
                update = json.loads(body)
                capacity = update["sku"]["capacity"]
                if not isinstance(capacity, int) or capacity < 0:
                    raise ValueError
            except (ValueError, KeyError, TypeError):
                return self._error(400, "InvalidParameter",
                                   "The value of parameter sku.capacity is invalid.")  # fmt: skip
            self.patches.append(update)
            self.capacity[g] = capacity
            op = str(uuid.uuid4())
            vmss = {
                "name": g, "id": f"{self.prefix}{g}", "type": "Microsoft.Compute/virtualMachineScaleSets",
                "location": "eastus", "sku": {"name": "Standard_ND96asr_v4", "tier": "Standard", "capacity": capacity},
                "properties": {"provisioningState": "Updating", "orchestrationMode": "Uniform",
                               "upgradePolicy": {"mode": "Manual"}, "overprovision": False},
            }  # fmt: skip
            headers = {**js, "Azure-AsyncOperation": f"{self.url}{ops}{op}?api-version={q['api-version']}"}
            return 200, headers, json.dumps(vmss)
        return self._error(405, "MethodNotAllowed", f"The requested method {method} is not allowed here.")
