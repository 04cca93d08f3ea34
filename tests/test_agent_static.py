"""The agent ships to nodes as one zipapp of templates/agent/trainfleet_agent/: old-Python syntax, runnable."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.agent_support import AGENT, AGENT_SRC

MODULES = sorted((AGENT_SRC / "trainfleet_agent").glob("*.py"))


def test_the_agent_package_parses_as_python38():
    assert len(MODULES) >= 8, MODULES
    for path in MODULES:
        ast.parse(path.read_text(), feature_version=(3, 8))


def test_the_agent_zipapp_runs_in_isolated_mode(tmp_path):
    # -I: isolated mode (no user site, no PYTHON* env, no cwd on the path)
    res = subprocess.run(
        [sys.executable, "-I", str(AGENT), "--help"], capture_output=True, text=True, env={}, timeout=30
    )
    assert res.returncode == 0, res.stderr
    for cmd in ("restore", "watch", "peers", "scale-to-zero", "event"):
        assert cmd in res.stdout
    bad = subprocess.run(
        [sys.executable, "-I", str(AGENT), "watch", "--cloud", "aws"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "required" in bad.stderr

