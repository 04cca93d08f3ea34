"""The on-node agent as one pinned artifact: a zipapp of templates/agent/trainfleet_agent/.

Built byte-for-byte reproducibly (sorted entries, fixed timestamps and modes), so the same trainfleet
renders the same sha256 and a node can check what it runs. User-data carries it base64-encoded
(cloud-init `encoding: b64`; on AWS fetched from the bucket and decoded by trainfleet-fetch.py).
"""

from __future__ import annotations

import base64
import hashlib
import io
import zipfile
from pathlib import Path

from infra.errors import TrainfleetError

PACKAGE = "trainfleet_agent"
ZIPAPP_NAME = "trainfleet_agent.pyz"
_MAIN = f"import sys\n\nfrom {PACKAGE}.cli import main\n\nsys.exit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)


def package_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "templates" / "agent" / PACKAGE


def _entry(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def build_zipapp() -> bytes:
    """`python3 trainfleet_agent.pyz <command>` runs the agent's CLI."""
    root = package_dir()
    modules = sorted(p for p in root.glob("*.py"))
    if not modules:
        raise TrainfleetError(f"the on-node agent {root} is missing; reinstall trainfleet (templates/agent ships with it)")
    buf = io.BytesIO()
    buf.write(b"#!/usr/bin/env python3\n")  # as zipapp writes it: the zip follows the interpreter line
    with zipfile.ZipFile(buf, "w") as zf:
        _entry(zf, "__main__.py", _MAIN.encode())
        for path in modules:
            _entry(zf, f"{PACKAGE}/{path.name}", path.read_bytes())
    return buf.getvalue()


def zipapp_base64() -> str:
    """The zipapp as base64 text in 76-character lines (what cloud-init's `encoding: b64` decodes)."""
    return base64.encodebytes(build_zipapp()).decode("ascii")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
