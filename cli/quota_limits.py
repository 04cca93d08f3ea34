"""Read the current limits of the quotas a stack needs (infra/quotas.py) and say which fall short.

One read per quota (per region on GCP and Azure, whose APIs answer every quota of a region at once), through the
clouds' own SDKs:
- AWS Service Quotas GetServiceQuota, and GetAWSDefaultServiceQuota when the account has no applied value ("If the
  applied quota value is not available for a quota, the quota is not retrieved":
  https://docs.aws.amazon.com/servicequotas/2019-06-24/apireference/API_GetServiceQuota.html).
- GCP Compute regions.get / projects.get, `quotas[{metric, limit, usage}]`
  (https://cloud.google.com/compute/docs/reference/rest/v1/regions/get). Newer GPUs (H100 and later) can be missing
  from that list altogether: a missing metric is unknown, never 0. A Spot fleet's preemptible metric is missing too
  until Google grants it, and Spot VMs then draw the standard metric.
- Azure Compute usages, `value[{currentValue, limit, name{value, localizedValue}}]` paged by nextLink
  (https://learn.microsoft.com/rest/api/compute/usage/list).

Nothing here raises for a cloud's answer: a refusal, a throttle that outlasts the retries, a missing SDK or missing
credentials each make the affected quotas "unknown", with one line saying why and what to do.

"short" compares what the whole stack needs of a quota with its limit. Usage is shown where the API gives it but
not subtracted: a stack that is already up counts in it.
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from infra.quotas import GPUS_ALL_REGIONS, QuotaNeed, stack_totals

ARM = "https://management.azure.com"
GCP_READ_SCOPE = "https://www.googleapis.com/auth/compute.readonly"


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    need: QuotaNeed
    limit: float | None
    usage: float | None
    status: str  # "ok" | "short" | "unknown"
    line: str


@dataclass(frozen=True, slots=True)
class _Found:
    """What a cloud said about one quota: its limit, or why it is unknown."""

    limit: float | None
    usage: float | None = None
    note: str = ""  # said after the limit, e.g. " (AWS default)"
    why: str = ""  # when limit is None


class _Retry:
    """Retry a call while `transient(exc)`, waiting backoff_s, 2x, 4x, ... (or what the service asked for)."""

    def __init__(self, attempts: int, backoff_s: float, sleep: Callable[[float], None]):
        self.attempts, self.backoff_s, self.sleep = max(1, attempts), backoff_s, sleep

    def __call__(self, call: Callable[[], Any], transient: Callable[[BaseException], bool],
                 asked_wait: Callable[[BaseException], float | None] = lambda exc: None) -> Any:  # fmt: skip
        for attempt in range(self.attempts):
            try:
                return call()
            except Exception as exc:
                if attempt == self.attempts - 1 or not transient(exc):
                    raise
                wait = asked_wait(exc)
                self.sleep(self.backoff_s * 2**attempt if wait is None else wait)
        raise AssertionError("unreachable")


def _normal(name: str) -> str:
    """Azure spells a usage name with varying case and stray spaces: compare without either."""
    return re.sub(r"\s+", "", name).lower()


def _loopback_http(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")


# ------------------------------------------------------------------------------------------------ AWS
class _Aws:
    def __init__(self, endpoint: str | None, session: Any, retry: _Retry):
        self.endpoint, self.session, self.retry = endpoint, session, retry
        self.clients: dict[str, Any] = {}

    def _client(self, region: str) -> Any:
        if region not in self.clients:
            import boto3
            from botocore.config import Config

            session = self.session or boto3.Session()
            # botocore's own retries off (its `max_attempts` counts retries, `total_max_attempts` the first try
            # too): throttling is retried here, with the backoff the caller chose
            config = Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=30)
            self.clients[region] = session.client(
                "service-quotas", region_name=region, endpoint_url=self.endpoint, config=config
            )
        return self.clients[region]

    def read(self, need: QuotaNeed) -> _Found:
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        def code(exc: BaseException) -> str:
            return exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""

        def throttled(exc: BaseException) -> bool:
            return code(exc) in ("TooManyRequestsException", "ThrottlingException")

        action, note = "GetServiceQuota", ""
        try:
            client = self._client(need.region)
            ask = dict(ServiceCode="ec2", QuotaCode=need.code)
            try:
                quota = self.retry(lambda: client.get_service_quota(**ask), throttled)["Quota"]
            except ClientError as exc:
                if code(exc) != "NoSuchResourceException":
                    raise
                action, note = "GetAWSDefaultServiceQuota", " (AWS default: no value applied to this account)"
                quota = self.retry(lambda: client.get_aws_default_service_quota(**ask), throttled)["Quota"]
        except NoCredentialsError:
            return _Found(None, why="no AWS credentials (run `aws configure` or `aws sso login`, or set AWS_PROFILE)")
        except ClientError as exc:
            why = {
                "AccessDeniedException": f"access denied: the caller lacks the permission servicequotas:{action}",
                "NoSuchResourceException": f"Service Quotas knows no ec2 quota {need.code} in {need.region}",
                "TooManyRequestsException": f"throttled (TooManyRequestsException) {self.retry.attempts} times; "
                "run the check again later",
            }.get(code(exc), f"Service Quotas {action} failed: {code(exc) or exc}")
            return _Found(None, why=why)
        except BotoCoreError as exc:
            return _Found(None, why=f"cannot reach Service Quotas in {need.region} ({exc})")
        if "Value" not in quota:
            reason = quota.get("ErrorReason", {})
            return _Found(None, why=f"Service Quotas has no value: {reason.get('ErrorCode', '?')} {reason.get('ErrorMessage', '')}".strip())
        return _Found(float(quota["Value"]), note=note)


# ------------------------------------------------------------------------------------------------ GCP
class _Gcp:
    def __init__(self, endpoint: str | None, credentials: Any, project: str | None, retry: _Retry):
        self.endpoint, self.credentials, self.project, self.retry = endpoint, credentials, project, retry
        self.clients: dict[str, Any] | None = None
        self.setup_failed = ""
        self.quotas: dict[str, dict[str, tuple[float, float]] | str] = {}  # region or "global" -> metrics or why

    def _setup(self) -> None:
        if self.clients is not None or self.setup_failed:
            return
        try:
            from google.api_core.client_options import ClientOptions
            from google.cloud import compute_v1
        except ImportError:
            self.setup_failed = "the GCP SDK is not installed (pip install 'trainfleet[live]')"
            return
        if self.credentials is None:
            import google.auth
            from google.auth.exceptions import DefaultCredentialsError

            try:
                self.credentials, found_project = google.auth.default(scopes=[GCP_READ_SCOPE])
            except DefaultCredentialsError:
                self.setup_failed = "no GCP credentials (run `gcloud auth application-default login`)"
                return
            self.project = self.project or found_project
        if not self.project:
            self.setup_failed = "no GCP project (pass the stack's gcp:project)"
            return
        kw: dict[str, Any] = dict(credentials=self.credentials, transport="rest")
        if self.endpoint:
            kw["client_options"] = ClientOptions(api_endpoint=self.endpoint.rstrip("/"))
        self.clients = {"regions": compute_v1.RegionsClient(**kw), "projects": compute_v1.ProjectsClient(**kw)}

    def _read(self, where: str) -> dict[str, tuple[float, float]] | str:
        from google.api_core import exceptions as gexc

        assert self.clients is not None
        project = self.project
        if where == "global":
            permission = "compute.projects.get"
            call: Callable[[], Any] = lambda: self.clients["projects"].get(project=project, retry=None, timeout=30)  # noqa: E731
        else:
            permission = "compute.regions.get"
            call = lambda: self.clients["regions"].get(project=project, region=where, retry=None, timeout=30)  # noqa: E731

        def transient(exc: BaseException) -> bool:
            return isinstance(exc, gexc.TooManyRequests | gexc.ServiceUnavailable)

        try:
            answer = self.retry(call, transient)
        except gexc.Forbidden as exc:
            if "SERVICE_DISABLED" in str(exc) or "has not been used in project" in str(exc):
                return (f"the Compute Engine API is disabled in project {project} "
                        f"(`gcloud services enable compute.googleapis.com --project={project}`)")  # fmt: skip
            return f"permission denied: the caller lacks the permission {permission} on project {project}"
        except gexc.Unauthorized:
            return "GCP refused the credentials (run `gcloud auth application-default login`)"
        except gexc.NotFound:
            return f"project {project} or region {where} not found"
        except (gexc.TooManyRequests, gexc.ServiceUnavailable) as exc:
            return f"throttled ({exc.code}) {self.retry.attempts} times; run the check again later"
        except Exception as exc:  # connection refused, DNS, TLS: the transport's own exceptions
            return f"cannot read {permission.removesuffix('.get').removeprefix('compute.')} quotas ({type(exc).__name__}: {exc})"
        return {q.metric: (float(q.limit), float(q.usage)) for q in answer.quotas}

    def read(self, need: QuotaNeed) -> _Found:
        self._setup()
        if self.setup_failed:
            return _Found(None, why=self.setup_failed)
        where = "global" if need.code == GPUS_ALL_REGIONS else need.region
        if where not in self.quotas:
            self.quotas[where] = self._read(where)
        quotas = self.quotas[where]
        if isinstance(quotas, str):
            return _Found(None, why=quotas)
        # Spot VMs and preemptible quota (https://cloud.google.com/compute/docs/instances/spot#quotas, 2026-03-19):
        # "Preemptible quota is not visible ... unless Compute Engine has granted the quota"; "In regions where you
        # don't have preemptible quota, you can use standard quota to launch Spot VMs"; "Once you request
        # preemptible quota in a region, you are limited to using that quota for Spot VMs in that region."
        standard = need.code.removeprefix("PREEMPTIBLE_")
        if need.code not in quotas and standard != need.code and standard in quotas:
            limit, usage = quotas[standard]
            return _Found(limit, usage, note=f" (no preemptible quota granted, so Spot VMs draw {standard})")
        if need.code not in quotas:
            return _Found(None, why=(
                f"the Compute API lists no {need.code} for {where} (it leaves out newer GPUs); check `gcloud alpha "
                f"quotas info list --service=compute.googleapis.com --project={self.project}`"
            ))  # fmt: skip
        limit, usage = quotas[need.code]
        return _Found(limit, usage)


# ---------------------------------------------------------------------------------------------- Azure
class _Azure:
    def __init__(self, endpoint: str | None, credential: Any, subscription: str | None, retry: _Retry):
        self.base_url = (endpoint or ARM).rstrip("/")
        self.credential, self.retry = credential, retry
        self.subscription = subscription or os.environ.get("AZURE_SUBSCRIPTION_ID")
        self.client: Any = None
        self.setup_failed = ""
        self.usages: dict[str, dict[str, tuple[float, float]] | str] = {}

    def _setup(self) -> None:
        if self.client is not None or self.setup_failed:
            return
        try:
            from azure.mgmt.compute import ComputeManagementClient
        except ImportError:
            self.setup_failed = "the Azure SDK is not installed (pip install 'trainfleet[live]')"
            return
        if not self.subscription:
            self.setup_failed = "no Azure subscription (set AZURE_SUBSCRIPTION_ID)"
            return
        if self.credential is None:
            from azure.identity import DefaultAzureCredential

            self.credential = DefaultAzureCredential()
        # azure-core's retries off: 429 is retried here, honouring Retry-After, with the caller's sleep
        self.client = ComputeManagementClient(
            self.credential, self.subscription, base_url=self.base_url,
            credential_scopes=[ARM + "/.default"], retry_total=0,
        )  # fmt: skip

    def _read(self, location: str) -> dict[str, tuple[float, float]] | str:
        from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError

        # azure-core sends bearer tokens over https only; a stand-in on this machine's loopback speaks http
        kw = {"enforce_https": False} if _loopback_http(self.base_url) else {}

        def listing() -> dict[str, tuple[float, float]]:
            # a fresh listing on every try: a 429 on page 2 must not keep page 1 twice
            return {_normal(u.name.value): (float(u.limit), float(u.current_value))
                    for u in self.client.usage.list(location, **kw)}  # fmt: skip

        def throttled(exc: BaseException) -> bool:
            return isinstance(exc, HttpResponseError) and exc.status_code == 429

        def retry_after(exc: BaseException) -> float | None:
            response = getattr(exc, "response", None)
            try:
                return min(60.0, float(response.headers["Retry-After"])) if response is not None else None
            except (KeyError, ValueError):
                return None

        scope = f"/subscriptions/{self.subscription}"
        try:
            return self.retry(listing, throttled, retry_after)
        except ClientAuthenticationError as exc:
            if exc.response is None:  # the credential found no identity
                return f"no Azure credentials (run `az login`): {str(exc).splitlines()[0]}"
            return "Azure refused the credentials (401); run `az login`"
        except HttpResponseError as exc:
            code = exc.error.code if exc.error is not None else ""
            if exc.status_code == 403 or code == "AuthorizationFailed":
                return f"access denied ({code}): the caller lacks the permission Microsoft.Compute/locations/usages/read on {scope}"
            if code == "MissingSubscriptionRegistration":
                return "Microsoft.Compute is not registered on the subscription (`az provider register --namespace Microsoft.Compute`)"
            if exc.status_code == 429:
                return f"throttled (429) {self.retry.attempts} times; run the check again later"
            return f"the usages API answered {exc.status_code} {code}".strip()
        except ServiceRequestError as exc:
            return f"cannot reach {self.base_url} ({exc})"

    def read(self, need: QuotaNeed) -> _Found:
        self._setup()
        if self.setup_failed:
            return _Found(None, why=self.setup_failed)
        if need.region not in self.usages:
            self.usages[need.region] = self._read(need.region)
        usages = self.usages[need.region]
        if isinstance(usages, str):
            return _Found(None, why=usages)
        if _normal(need.code) not in usages:
            return _Found(None, why=f"the usages API lists no {need.code} in {need.region} (`az vm list-usage --location {need.region}`)")
        limit, usage = usages[_normal(need.code)]
        return _Found(limit, usage)


# ------------------------------------------------------------------------------------------ the check
def _line(need: QuotaNeed, total: int, found: _Found) -> tuple[str, str]:
    head = need.label
    wants = f"needs {need.needed} {need.unit}" + (f" ({total} for the whole stack)" if total != need.needed else "")
    if not need.code:
        return "unknown", f"{head}: {wants}; {need.fix}"
    if found.limit is None:
        return "unknown", f"{head}: {wants}, limit unknown: {found.why}; to raise it: {need.fix}"
    used = f", {found.usage:g} in use" if found.usage else ""
    said = f"{head}: {wants}, limit {found.limit:g}{found.note}{used}"
    if total > found.limit:
        return "short", f"{said}: short by {total - found.limit:g}; raise it: {need.fix}"
    return "ok", f"{said}: ok"


def read_limits(
    needs: Sequence[QuotaNeed],
    *,
    aws_endpoint: str | None = None,
    gcp_endpoint: str | None = None,
    azure_endpoint: str | None = None,
    aws_session: Any = None,
    gcp_credentials: Any = None,
    gcp_project: str | None = None,
    azure_credential: Any = None,
    azure_subscription: str | None = None,
    attempts: int = 4,
    backoff_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[QuotaCheck]:
    """One QuotaCheck per need, in order. Endpoints default to the clouds' own; credentials to each SDK's
    default chain (boto3's, Application Default Credentials, DefaultAzureCredential); the GCP project to the
    ADC's and the Azure subscription to AZURE_SUBSCRIPTION_ID. Throttled reads are tried `attempts` times, waiting
    backoff_s, 2x, 4x, ... between (on Azure, what Retry-After asks, at most 60 s)."""
    retry = _Retry(attempts, backoff_s, sleep)
    totals = stack_totals(list(needs))
    readers: dict[str, Any] = {
        "aws": _Aws(aws_endpoint, aws_session, retry),
        "gcp": _Gcp(gcp_endpoint, gcp_credentials, gcp_project, retry),
        "azure": _Azure(azure_endpoint, azure_credential, azure_subscription, retry),
    }
    found: dict[tuple[str, str, str], _Found] = {}
    checks = []
    for need in needs:
        if need.code and need.key not in found:
            found[need.key] = readers[need.cloud].read(need)
        result = found.get(need.key, _Found(None))
        status, line = _line(need, totals.get(need.key, need.needed), result)
        checks.append(QuotaCheck(need, result.limit, result.usage, status, line))
    return checks
