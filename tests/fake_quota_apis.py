"""Stand-ins for the three quota APIs `cli/quota_limits.py` reads, each an HTTP server on its own 127.0.0.1 port,
built from the API references (request checks, answers and errors in the services' own shapes), holding a
"fresh account": the quotas a new account starts with, where a source says so; the rest are marked as assumptions.

- FakeServiceQuotas: AWS Service Quotas, JSON 1.1 protocol
  (https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html,
  .../API_GetAWSDefaultServiceQuota.html, .../CommonErrors.html): POST / with X-Amz-Target
  ServiceQuotasV20190624.<Operation>, Content-Type application/x-amz-json-1.1, a SigV4 Authorization whose scope
  names the region and the signing name `servicequotas`; body {ServiceCode, QuotaCode}; answer {"Quota": {...}};
  errors HTTP 400 {"__type": "<Code>", "message": "..."}. moto implements Service Quotas for the `vpc` service
  only (moto/servicequotas/models.py, /tmp/i28/facts.md item 8), hence this stand-in.
- FakeComputeQuotas: GCP Compute Engine v1 regions.get and projects.get
  (https://cloud.google.com/compute/docs/reference/rest/v1/regions/get, .../projects/get): GET
  /compute/v1/projects/{project}/regions/{region} and /compute/v1/projects/{project}; quotas are
  [{metric, limit, usage}] with float numbers; errors {"error": {code, message, errors[{message, domain, reason}]}}.
  A live OAuth token with a compute read scope is required (tests/metadata_servers.py GOOGLE_AUTH).
- FakeArmUsages: Azure Resource Manager, Usage - List (https://learn.microsoft.com/rest/api/compute/usage/list):
  GET /subscriptions/{sub}/providers/Microsoft.Compute/locations/{location}/usages?api-version=...; answer
  {"value": [{unit, currentValue, limit, name{value, localizedValue}}], "nextLink"}, nextLink absent on the last
  page; errors {"error": {code, message}}; a bearer token from the Entra stand-in (tests/metadata_servers.py).
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.metadata_servers import COMPUTE_READ_SCOPES, GOOGLE_AUTH, arm_refusal

Answer = tuple[int, dict[str, str], str]


class _Fake:
    """One stand-in on its own port; subclasses answer through `answer`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[str] = []  # one line per request, for assertions
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with outer.lock:
                    status, headers, text = outer.answer(method, self.path, self.headers, body)
                data = text.encode()
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._serve("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._serve("POST")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # a short poll, so stop() (shutdown waits for the loop to look) takes milliseconds, not half a second
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self):
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, method: str, path: str, headers: Any, body: bytes) -> Answer:
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------ AWS
# EC2 vCPU quotas: code -> (name, default value for a new account).
# Spot names and defaults: https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/using-spot-limits.html (every GPU and
# accelerator family 0, Standard 5). On-demand defaults: P and G at 0 and Standard at 5 from a third-party reference
# (facts item 8); DL and Trn on-demand at 0 are ASSUMED (no source seen). Codes: see infra/quotas.py.
EC2_QUOTAS: dict[str, tuple[str, float]] = {
    "L-7212CCBC": ("All P4, P3 and P2 Spot Instance Requests", 0.0),
    "L-C4BD4855": ("All P5 Spot Instance Requests", 0.0),
    "L-3819A6DF": ("All G and VT Spot Instance Requests", 0.0),
    "L-85EED4F7": ("All DL Spot Instance Requests", 0.0),
    "L-6B0D517C": ("All Trn Spot Instance Requests", 0.0),
    "L-34B43A08": ("All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests", 5.0),
    "L-417A185B": ("Running On-Demand P instances", 0.0),
    "L-DB2E81BA": ("Running On-Demand G and VT instances", 0.0),
    "L-6E869C2A": ("Running On-Demand DL instances", 0.0),
    "L-2C3B7624": ("Running On-Demand Trn instances", 0.0),
    "L-1216C47A": ("Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances", 5.0),
}
EC2_NAME = "Amazon Elastic Compute Cloud (Amazon EC2)"
SQ_TARGET = "ServiceQuotasV20190624."
# SigV4: Credential=<key id>/<yyyymmdd>/<region>/<signing name>/aws4_request
SIGV4 = re.compile(r"AWS4-HMAC-SHA256 Credential=[^/]+/\d{8}/([a-z0-9-]+)/([a-z0-9-]+)/aws4_request, SignedHeaders=[^,]+, Signature=[0-9a-f]{64}")
# Request syntax constraints (API_GetServiceQuota.html): ServiceCode ^[a-zA-Z][a-zA-Z0-9-]{1,63}$, QuotaCode
# ^[a-zA-Z][a-zA-Z0-9-]{1,128}$, both required.
SQ_CODE = {"ServiceCode": re.compile(r"[a-zA-Z][a-zA-Z0-9-]{1,63}"), "QuotaCode": re.compile(r"[a-zA-Z][a-zA-Z0-9-]{1,128}")}


class FakeServiceQuotas(_Fake):
    """A fresh account: no applied values (GetServiceQuota answers NoSuchResourceException, as the reference says
    it does when "the applied quota value is not available"; that a new account has none for EC2 is ASSUMED), so
    readers fall back to GetAWSDefaultServiceQuota and the defaults above. `apply(region, code, value)` is an
    approved increase. `deny` refuses every call (AccessDeniedException); `throttle` answers that many next calls
    with TooManyRequestsException."""

    def __init__(self, account: str = "123456789012"):
        super().__init__()
        self.account = account
        self.applied: dict[tuple[str, str], float] = {}
        self.deny = False
        self.throttle = 0

    def apply(self, region: str, code: str, value: float) -> None:
        with self.lock:
            self.applied[(region, code)] = float(value)

    @staticmethod
    def _error(code: str, message: str) -> Answer:
        return 400, {"Content-Type": "application/x-amz-json-1.1"}, json.dumps({"__type": code, "message": message})

    def _quota(self, region: str, code: str, value: float, applied: bool) -> dict:
        name, _ = EC2_QUOTAS[code]
        # an applied quota's ARN names the account; a default's does not (moto's vpc defaults: arn:aws:servicequotas:eu-west-1::vpc/...)
        return {
            "ServiceCode": "ec2", "ServiceName": EC2_NAME,
            "QuotaArn": f"arn:aws:servicequotas:{region}:{self.account if applied else ''}:ec2/{code}",
            "QuotaCode": code, "QuotaName": name, "Value": value, "Unit": "None",
            "Adjustable": True, "GlobalQuota": False, "QuotaAppliedAtLevel": "ACCOUNT",
        }  # fmt: skip

    def answer(self, method: str, path: str, headers: Any, body: bytes) -> Answer:
        target = headers.get("X-Amz-Target", "")
        auth = SIGV4.fullmatch(headers.get("Authorization", "") or "")
        self.requests.append(f"{target.removeprefix(SQ_TARGET)} {body.decode(errors='replace')}")
        if method != "POST" or path != "/" or not target.startswith(SQ_TARGET):
            return self._error("UnknownOperationException", "")
        if headers.get("Content-Type", "").split(";")[0] != "application/x-amz-json-1.1":
            return self._error("SerializationException", "Unsupported Content-Type")
        if auth is None:
            return self._error("MissingAuthenticationTokenException", "Missing Authentication Token")
        region, service = auth.groups()
        if service != "servicequotas":
            return self._error("InvalidSignatureException", f"Credential should be scoped to correct service: 'servicequotas'. (got {service!r})")
        if self.throttle > 0:
            self.throttle -= 1
            return self._error("TooManyRequestsException", "Due to throttling, the request was denied. Slow down the rate of request calls, or request an increase for this quota.")
        if self.deny:
            return self._error("AccessDeniedException", "You do not have sufficient access to perform this action.")
        operation = target.removeprefix(SQ_TARGET)
        if operation not in ("GetServiceQuota", "GetAWSDefaultServiceQuota"):
            return self._error("UnknownOperationException", "")
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return self._error("SerializationException", "Start of structure or map found where not expected")
        for key, pattern in SQ_CODE.items():
            if not isinstance(request.get(key), str) or not pattern.fullmatch(request[key]):
                return self._error("IllegalArgumentException", "Invalid input was provided.")
        service_code, code = request["ServiceCode"], request["QuotaCode"]
        if service_code != "ec2" or code not in EC2_QUOTAS:
            return self._error("NoSuchResourceException", "The specified resource does not exist.")
        if operation == "GetServiceQuota":
            if (region, code) not in self.applied:
                return self._error("NoSuchResourceException", "The specified resource does not exist.")
            quota = self._quota(region, code, self.applied[(region, code)], applied=True)
        else:
            quota = self._quota(region, code, EC2_QUOTAS[code][1], applied=False)
        return 200, {"Content-Type": "application/x-amz-json-1.1"}, json.dumps({"Quota": quota})


# ------------------------------------------------------------------------------------------------ GCP
# A new project's regional quotas. Google documents no fixed defaults ("Not all projects have the same quotas":
# https://cloud.google.com/compute/resource-usage); the GPU quotas at 0 follow public reports (facts item 4) and are
# ASSUMED, as are the CPU figures. H100 and newer metrics are ABSENT, as field reports say regions.get leaves them out.
# No PREEMPTIBLE_* metric at all: "Preemptible quota is not visible in the gcloud CLI or Google Cloud console quota
# pages unless Compute Engine has granted the quota" (https://cloud.google.com/compute/docs/instances/spot#quotas).
FRESH_REGION_QUOTAS: dict[str, float] = {
    "CPUS": 24.0, "DISKS_TOTAL_GB": 4096.0, "INSTANCES": 24.0,
    "NVIDIA_T4_GPUS": 0.0, "NVIDIA_A100_GPUS": 0.0, "NVIDIA_A100_80GB_GPUS": 0.0, "NVIDIA_L4_GPUS": 0.0,
}  # fmt: skip
FRESH_PROJECT_QUOTAS: dict[str, float] = {"CPUS_ALL_REGIONS": 32.0, "GPUS_ALL_REGIONS": 0.0, "FIREWALLS": 200.0}
GCP_REGIONS = ("us-central1", "us-east1", "europe-west4")


class FakeComputeQuotas(_Fake):
    """`regions[region][metric] = [limit, usage]` and `project_quotas` likewise. `denied` holds the permissions the
    caller lacks (compute.regions.get, compute.projects.get); `api_disabled` answers as a project where the Compute
    Engine API was never enabled (it is off in a new project: facts item 1); `throttle` answers the next calls 429."""

    def __init__(self, project: str = "my-ml-project", project_number: str = "1025699268247"):
        super().__init__()
        self.project, self.number = project, project_number
        self.regions = {r: {m: [v, 0.0] for m, v in FRESH_REGION_QUOTAS.items()} for r in GCP_REGIONS}
        self.project_quotas = {m: [v, 0.0] for m, v in FRESH_PROJECT_QUOTAS.items()}
        self.denied: set[str] = set()
        self.api_disabled = False
        self.throttle = 0

    def set(self, where: str, metric: str, limit: float, usage: float = 0.0) -> None:
        with self.lock:
            (self.project_quotas if where == "global" else self.regions[where])[metric] = [limit, usage]

    @staticmethod
    def _error(code: int, message: str, reason: str, status: str = "", details: list | None = None) -> Answer:
        error: dict[str, Any] = {"code": code, "message": message,
                                 "errors": [{"message": message, "domain": "global", "reason": reason}]}  # fmt: skip
        if status:
            error["status"] = status
        if details:
            error["details"] = details
        return code, {"Content-Type": "application/json; charset=UTF-8"}, json.dumps({"error": error})

    def _disabled(self) -> Answer:
        # As quoted in terraform-google-modules/terraform-google-project-factory#710 (facts item 2).
        overview = f"https://console.developers.google.com/apis/api/compute.googleapis.com/overview?project={self.number}"
        message = (f"Compute Engine API has not been used in project {self.number} before or it is disabled. Enable it "
                   f"by visiting {overview} then retry. If you enabled this API recently, wait a few minutes for the "
                   "action to propagate to our systems and retry.")  # fmt: skip
        details = [
            {"@type": "type.googleapis.com/google.rpc.Help",
             "links": [{"description": "Google developers console API activation", "url": overview}]},
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED", "domain": "googleapis.com",
             "metadata": {"consumer": f"projects/{self.number}", "service": "compute.googleapis.com"}},
        ]  # fmt: skip
        return self._error(403, message, "accessNotConfigured", "PERMISSION_DENIED", details)

    def _quotas(self, table: dict[str, list[float]]) -> list[dict]:
        return [{"metric": m, "limit": lim, "usage": use} for m, (lim, use) in table.items()]

    def answer(self, method: str, path: str, headers: Any, body: bytes) -> Answer:
        parts = urllib.parse.urlsplit(path)
        self.requests.append(f"{method} {parts.path}")
        refused = GOOGLE_AUTH.check(headers.get("Authorization"), COMPUTE_READ_SCOPES)
        if refused:
            status, doc = refused
            return status, {"Content-Type": "application/json; charset=UTF-8"}, json.dumps(doc)
        m = re.fullmatch(r"/compute/v1/projects/([^/]+)(?:/regions/([^/]+))?", parts.path)
        if method != "GET" or m is None:
            return self._error(404, f"The requested URL {parts.path} was not found on this server.", "notFound")
        project, region = m.groups()
        resource = f"projects/{project}" + (f"/regions/{region}" if region else "")
        if project != self.project:
            return self._error(404, f"The resource '{resource}' was not found", "notFound")
        if self.api_disabled:
            return self._disabled()
        if self.throttle > 0:
            self.throttle -= 1
            return self._error(429, "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per "
                               f"minute' of service 'compute.googleapis.com' for consumer 'project_number:{self.number}'.",
                               "rateLimitExceeded", "RESOURCE_EXHAUSTED")  # fmt: skip
        permission = "compute.regions.get" if region else "compute.projects.get"
        if permission in self.denied:
            return self._error(403, f"Required '{permission}' permission for '{resource}'", "forbidden")
        base = "https://www.googleapis.com/compute/v1/"
        js = {"Content-Type": "application/json; charset=UTF-8"}
        if region is None:
            doc = {"kind": "compute#project", "id": self.number, "creationTimestamp": "2026-01-05T09:12:44.301-08:00",
                   "name": project, "commonInstanceMetadata": {"kind": "compute#metadata", "fingerprint": "kZ2a0CcEfiI="},
                   "quotas": self._quotas(self.project_quotas), "selfLink": base + resource,
                   "defaultServiceAccount": f"{self.number}-compute@developer.gserviceaccount.com",
                   "xpnProjectStatus": "UNSPECIFIED_XPN_PROJECT_STATUS", "defaultNetworkTier": "PREMIUM"}  # fmt: skip
            return 200, js, json.dumps(doc)
        if region not in self.regions:
            return self._error(404, f"The resource '{resource}' was not found", "notFound")
        doc = {"kind": "compute#region", "id": str(1000 + GCP_REGIONS.index(region)), "name": region,
               "creationTimestamp": "1969-12-31T16:00:00.000-08:00", "description": region, "status": "UP",
               "zones": [f"{base}{resource.replace('regions/' + region, 'zones/' + region)}-{z}" for z in "abc"],
               "quotas": self._quotas(self.regions[region]), "selfLink": base + resource, "supportsPzs": False}  # fmt: skip
        return 200, js, json.dumps(doc)


# ---------------------------------------------------------------------------------------------- Azure
# A new pay-as-you-go subscription's usages in a region. Microsoft documents no per-family defaults; these follow
# what public `az vm list-usage` output shows for new subscriptions (facts item 7: "Total Regional vCPUs" 10,
# "Total Regional Low-priority vCPUs" 3, GPU families 0) and are ASSUMED. Names as the API spells them, mixed case.
FRESH_USAGES: list[tuple[str, str, int]] = [
    ("availabilitySets", "Availability Sets", 2500),
    ("cores", "Total Regional vCPUs", 10),
    ("virtualMachines", "Virtual Machines", 25000),
    ("virtualMachineScaleSets", "Virtual Machine Scale Sets", 2500),
    ("standardDSv5Family", "Standard DSv5 Family vCPUs", 10),
    ("standardDDSv5Family", "Standard DDSv5 Family vCPUs", 10),
    ("standardNCASv3_T4Family", "Standard NCASv3_T4 Family vCPUs", 0),
    ("StandardNVADSA10v5Family", "Standard NVADSA10v5 Family vCPUs", 0),
    ("StandardNCADSA100v4Family", "Standard NCADS_A100_v4 Family vCPUs", 0),
    ("standardNDASv4_A100Family", "Standard NDASv4_A100 Family vCPUs", 0),
    ("standardNDSH100v5Family", "Standard NDSH100v5 Family vCPUs", 0),
    ("lowPriorityCores", "Total Regional Low-priority vCPUs", 3),
]
AZURE_LOCATIONS = ("eastus", "westus3", "swedencentral")
API_VERSION = re.compile(r"\d{4}-\d{2}-\d{2}(-preview)?")


class FakeArmUsages(_Fake):
    """`usages[location]` lists [name, localized, limit, current] in the API's order, `page_size` entries a page
    (so the fresh listing takes two pages). `deny` answers 403 AuthorizationFailed; `throttle_page` answers that page
    (1-based) once with 429 and Retry-After `retry_after` seconds, as ARM throttles."""

    def __init__(self, subscription: str = "00000000-0000-0000-0000-000000000000", page_size: int = 8):
        super().__init__()
        self.subscription, self.page_size = subscription, page_size
        self.usages = {loc: [[v, n, lim, 0] for v, n, lim in FRESH_USAGES] for loc in AZURE_LOCATIONS}
        self.deny = False
        self.throttle_page: int | None = None
        self.retry_after = 17

    def set(self, location: str, name: str, limit: int, current: int = 0) -> None:
        with self.lock:
            for row in self.usages[location]:
                if row[0].lower() == name.lower():
                    row[2], row[3] = limit, current

    @staticmethod
    def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Answer:
        return status, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, json.dumps(
            {"error": {"code": code, "message": message}}
        )

    def answer(self, method: str, path: str, headers: Any, body: bytes) -> Answer:
        parts = urllib.parse.urlsplit(path)
        query = dict(urllib.parse.parse_qsl(parts.query))
        self.requests.append(f"{method} {parts.path} skip={query.get('$skiptoken', '0')}")
        refused = arm_refusal(headers.get("Authorization"))
        if refused:
            return refused
        version = query.get("api-version")
        if version is None:
            return self._error(400, "MissingApiVersionParameter",
                               "The api-version query parameter (?api-version=) is required for all requests.")  # fmt: skip
        if not API_VERSION.fullmatch(version):
            return self._error(400, "InvalidApiVersionParameter",
                               f"The api-version '{version}' is invalid. The supported versions are in the form YYYY-MM-DD.")  # fmt: skip
        m = re.fullmatch(r"/subscriptions/([^/]+)/providers/Microsoft\.Compute/locations/([^/]+)/usages", parts.path,
                         re.IGNORECASE)  # ARM paths are case-insensitive  # fmt: skip
        if method != "GET" or m is None:
            return self._error(404, "InvalidResourceType", f"The resource type could not be found in the namespace for path '{parts.path}'.")
        subscription, location = m.group(1), m.group(2).lower()
        if subscription != self.subscription:
            return self._error(404, "SubscriptionNotFound", f"The subscription '{subscription}' could not be found.")
        if self.deny:
            oid = "5b1c0e2a-0000-4000-8000-0000000000a1"
            return self._error(403, "AuthorizationFailed",
                               f"The client '{oid}' with object id '{oid}' does not have authorization to perform action "
                               f"'Microsoft.Compute/locations/usages/read' over scope '/subscriptions/{subscription}' or "
                               "the scope is invalid. If access was recently granted, please refresh your credentials.")  # fmt: skip
        if location not in self.usages:
            return self._error(404, "LocationNotAvailableForResourceType",
                               f"The provided location '{location}' is not available for resource type "
                               "'Microsoft.Compute/locations/usages'.")  # fmt: skip
        start = int(query.get("$skiptoken", "0"))
        if self.throttle_page == start // self.page_size + 1:
            self.throttle_page = None
            return self._error(429, "TooManyRequests",
                               "The request is being throttled as the limit has been reached for operation type - "
                               "Read_ObservationWindow_00:05:00. For more information, see - https://aka.ms/srpthrottlinglimits",
                               {"Retry-After": str(self.retry_after)})  # fmt: skip
        rows = self.usages[location]
        page = [{"unit": "Count", "currentValue": cur, "limit": lim, "name": {"value": v, "localizedValue": n}}
                for v, n, lim, cur in rows[start : start + self.page_size]]  # fmt: skip
        doc: dict[str, Any] = {"value": page}
        if start + self.page_size < len(rows):
            doc["nextLink"] = f"{self.url}{parts.path}?api-version={version}&$skiptoken={start + self.page_size}"
        return 200, {"Content-Type": "application/json; charset=utf-8"}, json.dumps(doc)
