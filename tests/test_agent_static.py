"""The agent is copied onto nodes by cloud-init: one file, Python standard library only, old-Python syntax."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.agent_support import AGENT


def test_the_agent_imports_only_the_standard_library():
    tree = ast.parse(AGENT.read_text())
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            mods.add(node.module.split(".")[0])
    assert mods, "parsed no imports"
    assert mods - {"__future__"} <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)


def test_the_agent_parses_as_python38():
    ast.parse(AGENT.read_text(), feature_version=(3, 8))


def test_the_agent_runs_with_an_empty_environment_and_no_site_packages(tmp_path):
    # -I: isolated mode (no user site, no PYTHON* env); -S: no site-packages at all
    res = subprocess.run(
        [sys.executable, "-I", "-S", str(AGENT), "--help"], capture_output=True, text=True, env={}, timeout=30
    )
    assert res.returncode == 0, res.stderr
    for cmd in ("restore", "watch", "peers", "scale-to-zero"):
        assert cmd in res.stdout
    bad = subprocess.run(
        [sys.executable, "-I", "-S", str(AGENT), "watch", "--cloud", "aws"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "required" in bad.stderr
