"""Instance metadata clients: AWS IMDSv2, GCP metadata server, Azure IMDS and Scheduled Events."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.parse

from .common import DEFAULT_METADATA, log
from .http_client import HTTPError, http_request


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

    def get_json(self, path: str, timeout: float | None = None):
        r = http_request("GET", self.base + path, self.HDR, timeout=timeout or self.timeout)
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
