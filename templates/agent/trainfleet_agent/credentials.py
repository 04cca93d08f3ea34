"""Credentials: AWS keys (env or instance role), SigV4 signing, GCP/Azure bearer tokens."""

from __future__ import annotations

import datetime as _dt
import hashlib
import hmac
import json
import os
import threading
import time
import urllib.parse

from .common import log
from .http_client import HTTPError, http_request
from .metadata import AwsMetadata, AzureMetadata, GcpMetadata, metadata_base


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


