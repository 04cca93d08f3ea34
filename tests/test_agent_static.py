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


def test_hash_file_gives_the_whole_and_per_part_sha256_in_one_pass(tmp_path):
    import hashlib
    import os

    from tests.agent_support import load_agent_module

    mod = load_agent_module()
    data = os.urandom((3 << 20) + 5)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    for part in (1 << 20, (3 << 20) + 5, 1 << 22, 1_000_003):
        whole, parts = mod.hash_file(str(p), part)
        assert whole == hashlib.sha256(data).hexdigest()
        assert parts == [hashlib.sha256(data[i : i + part]).hexdigest() for i in range(0, len(data), part)]
    (tmp_path / "empty").write_bytes(b"")
    assert mod.hash_file(str(tmp_path / "empty"), 1 << 20) == (
        hashlib.sha256(b"").hexdigest(),
        [hashlib.sha256(b"").hexdigest()],
    )
