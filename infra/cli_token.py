"""A cloud's bearer token the way its own tools hand one out: an environment variable the user set, else what the
cloud's CLI prints when asked (`az account get-access-token ...`, `gcloud auth print-access-token`)."""

from __future__ import annotations

import os
import shutil
import subprocess


def token_from(variable: str, command: list[str], timeout: float) -> str | None:
    """$variable, else the stripped output of `command` when its program is installed and succeeds; None when
    neither gives a token (the caller says in its own one line what to set)."""
    token = os.environ.get(variable, "").strip()
    if token:
        return token
    program = shutil.which(command[0])
    if program is None:
        return None
    try:
        out = subprocess.run([program, *command[1:]], capture_output=True, text=True, timeout=timeout, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
