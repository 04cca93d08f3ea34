"""Small JSON-over-HTTP client (urllib) with retries on throttling, and one-line errors per request."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class FetchError(Exception):
    """One request (or one region) failed; the message is one line saying why, `status` the HTTP status if any."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _retries() -> int:
    return max(1, int(os.environ.get("TRAINFLEET_HTTP_ATTEMPTS", "4")))


def _backoff() -> float:
    return float(os.environ.get("TRAINFLEET_HTTP_BACKOFF_S", "1.0"))


def request_json(
    url: str,
    *,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
    what: str = "",
) -> Any:
    """Send a request and parse the JSON answer; retries 429 and 5xx with backoff (Retry-After honoured)."""
    host = urllib.parse.urlsplit(url).netloc or url
    label = what or host
    data = None if body is None else json.dumps(body).encode()
    hdrs = {"Accept": "application/json", "User-Agent": "trainfleet", **(headers or {})}
    if data is not None:
        hdrs["Content-Type"] = "application/json"
    attempts = _retries()
    for attempt in range(1, attempts + 1):
        req = urllib.request.Request(url, data=data, headers=hdrs, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = _error_detail(exc)
            if exc.code in (429, 500, 502, 503, 504) and attempt < attempts:
                time.sleep(_retry_after(exc, attempt))
                continue
            if exc.code == 429:
                raise FetchError(f"{label}: throttled (HTTP 429) after {attempts} attempts{detail}", 429) from None
            raise FetchError(f"{label}: HTTP {exc.code}{detail}", exc.code) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if attempt < attempts:
                time.sleep(_backoff() * 2 ** (attempt - 1))
                continue
            raise FetchError(f"{label}: cannot reach {host} ({reason})") from None
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise FetchError(f"{label}: malformed JSON from {host} ({exc})") from None
    raise FetchError(f"{label}: no answer from {host}")  # pragma: no cover - loop always returns/raises


def _retry_after(exc: urllib.error.HTTPError, attempt: int) -> float:
    """Retry-After seconds; else Azure Resource Graph's x-ms-user-quota-resets-after (hh:mm:ss, the time until the
    caller's query quota resets); else exponential backoff. At most 30 s."""
    headers = exc.headers or {}
    try:
        if headers.get("Retry-After") is not None:
            return min(float(headers["Retry-After"]), 30.0)
        if headers.get("x-ms-user-quota-resets-after") is not None:
            h, m, sec = headers["x-ms-user-quota-resets-after"].split(":")
            return min(int(h) * 3600 + int(m) * 60 + float(sec), 30.0)
    except ValueError:
        pass
    return _backoff() * 2 ** (attempt - 1)


def _error_detail(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        return ""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        msg = err.get("message") or err.get("code") or ""
        if isinstance(err.get("code"), str) and err.get("message"):  # ARM names the error: AuthorizationFailed
            msg = f"{err['code']}: {msg}"
    elif isinstance(body, dict):
        msg = body.get("message") or body.get("Message") or ""
    else:
        msg = ""
    msg = " ".join(str(msg).split())[:200]
    return f": {msg}" if msg else ""
