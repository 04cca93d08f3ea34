"""Run events: what happened to a run (membership changes, conversions, resumes), kept in the bucket.

One small immutable JSON object per event, so writers on many nodes never race on a shared object and a
listing sorted by name is in time order (PROTOCOL.md section 7):

    <prefix>/events/<UTC %Y%m%dT%H%M%S.%fZ>-<node>-<event>.json
    {"ts": <epoch seconds>, "time": "<ISO 8601, UTC>", "node": <node>, "event": <event>, <fields>...}

`trainfleet events` (cli/events.py) lists them with `parse_event`, the same rules as `record` writes by.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import time

from .common import log

EVENTS_DIR = "events"
_UTC = dt.timezone.utc  # noqa: UP017 - nodes may run python3 < 3.11
TIME_FORMAT = "%Y%m%dT%H%M%S.%fZ"
# A node or event name: plain characters only, so a key can never leave <prefix>/events/ (no '/', no
# leading '.' or '-') and stays one readable word in a listing.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
KEY_RE = re.compile(r"^(\d{8}T\d{6}\.\d{6}Z)-([A-Za-z0-9][A-Za-z0-9._-]*)\.json$")
RESERVED = ("ts", "time", "node", "event")
MAX_FIELDS = 64
MAX_STRING = 1024
MAX_BODY = 16 << 10
INT_RE = re.compile(r"^[-+]?\d{1,30}$")
FLOAT_RE = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][-+]?\d+)$")


def events_prefix(prefix: str) -> str:
    """Where a run's events live: `<prefix>/events/` (`events/` for an empty prefix)."""
    p = prefix.strip("/")
    return f"{p}/{EVENTS_DIR}/" if p else f"{EVENTS_DIR}/"


def check_name(what: str, name: object) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValueError(
            f"{what} {name!r} is not a plain name: use 1 to 64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    return name


def _check_value(key: str, value: object) -> object:
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"field {key!r}: {value!r} is not a finite number")
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            raise ValueError(f"field {key!r}: {len(value)} characters, over {MAX_STRING}")
        return value
    raise ValueError(
        f"field {key!r}: {type(value).__name__} is not a JSON scalar (string, number, bool, null)"
    )


def check_fields(fields: dict) -> dict:
    """The fields as they go in the body: plain keys (not the reserved ones), JSON scalar values."""
    if len(fields) > MAX_FIELDS:
        raise ValueError(f"{len(fields)} fields, over {MAX_FIELDS}")
    out = {}
    for key, value in fields.items():
        if not isinstance(key, str) or not FIELD_RE.match(key):
            raise ValueError(f"field name {key!r} is not a plain name: letters, digits and '_', up to 64")
        if key in RESERVED:
            raise ValueError(f"field name {key!r} is reserved (every event has {', '.join(RESERVED)})")
        out[key] = _check_value(key, value)
    return out


def parse_value(text: str) -> object:
    """A --field value as typed: int, float, true/false, null when it looks like one, else the string."""
    if INT_RE.match(text):
        return int(text)
    if FLOAT_RE.match(text):
        value = float(text)
        return value if math.isfinite(value) else text
    return {"true": True, "false": False, "null": None}.get(text, text)


def parse_field(text: str) -> tuple:
    """`key=value` (the value as `parse_value` reads it); ValueError when it is not one."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"{text!r} is not key=value")
    checked = check_fields({key: parse_value(value)})
    return key, checked[key]


def parse_fields_json(text: str) -> dict:
    """A JSON object of scalar details (e.g. trainfleet-resize.py's summary line); ValueError when it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"{text[:80]!r} is not JSON") from None
    if not isinstance(value, dict):
        raise ValueError("--json must be one JSON object")
    return check_fields(value)


def event_key(prefix: str, when: float, node: str, event: str) -> str:
    stamp = dt.datetime.fromtimestamp(when, _UTC).strftime(TIME_FORMAT)
    return f"{events_prefix(prefix)}{stamp}-{check_name('node', node)}-{check_name('event', event)}.json"


def record(store, prefix: str, node: str, event: str, fields: dict | None = None) -> str:
    """Write one event object to the bucket (and the same event to this node's log); return its key."""
    body_fields = check_fields(dict(fields or {}))
    now = time.time()
    key = event_key(prefix, now, node, event)
    moment = dt.datetime.fromtimestamp(now, _UTC)
    body = {
        "ts": round(now, 6),
        "time": moment.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "node": node,
        "event": event,
        **body_fields,
    }
    data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > MAX_BODY:
        raise ValueError(f"event {event!r} is {len(data)} bytes, over {MAX_BODY}")
    log(event, node=node, **body_fields)  # the node's journal has it even when the bucket cannot be reached
    store.put_bytes(key, data)
    return key


def parse_event(key: str, data: bytes) -> dict:
    """An event object read back: its body, checked as `record` writes it; ValueError if it is not one."""
    name = key.rsplit("/", 1)[-1]
    if not KEY_RE.match(name):
        raise ValueError(f"{name!r} is not named <time>-<node>-<event>.json")
    if len(data) > MAX_BODY:
        raise ValueError(f"{len(data)} bytes, over {MAX_BODY}")
    try:
        body = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"not JSON ({type(e).__name__})") from None
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    ts = body.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        raise ValueError("no numeric 'ts'")
    node, event = check_name("node", body.get("node")), check_name("event", body.get("event"))
    if not name.endswith(f"-{node}-{event}.json"):
        raise ValueError(f"its body names node {node!r} and event {event!r}, its name does not")
    if not isinstance(body.get("time"), str):
        raise ValueError("no 'time'")
    check_fields({k: v for k, v in body.items() if k not in RESERVED})
    return body
