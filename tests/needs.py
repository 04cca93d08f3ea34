"""Optional test dependencies: a developer's machine may lack one and skips; CI must not.

`.ci/run` installs every one of them (torch and deepspeed, Azurite, shellcheck, cloud-init), so under
CI=true a missing dependency is a broken install and fails the run instead of silently skipping tests.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1")


def need(available: bool, what: str, install: str) -> None:
    """Skip (or, under CI, fail) the calling test or module when `what` is not available."""
    if available:
        return
    message = f"{what} is not available ({install})"
    if in_ci():
        pytest.fail(f"{message}; .ci/run installs it, so under CI its absence is a failure", pytrace=False)
    pytest.skip(message, allow_module_level=True)


def need_module(name: str, install: str) -> ModuleType:
    """Import `name`, or skip (fail under CI) saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        need(False, f"python module {name}", install)
        raise  # unreachable: need() skips or fails


def need_tool(tool: str, package: str | None = None) -> str:
    """The path of a command-line tool (shellcheck, cloud-init, bash), or skip (fail under CI); `package`
    names the Debian package when it differs from the tool (node: nodejs)."""
    import shutil

    path = shutil.which(tool)
    need(path is not None, tool, f"apt-get install {package or tool}")
    return path  # type: ignore[return-value]
