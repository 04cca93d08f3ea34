"""`trainfleet render`: run as a user would, for every stack in stacks/."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json

import pytest

from infra.stack_file import list_stack_files, read_stack_file, stack_name
from infra.userdata import render_fleets
from tests.conftest import STACKS, assert_one_line_error, run_trainfleet

STACK_NAMES = [stack_name(p) for p in list_stack_files(STACKS.parent)]


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_render_writes_each_fleets_user_data_and_parts_for_review(stack, tmp_path):
    out = tmp_path / "userdata"
    result = run_trainfleet("render", "--stack", stack, "--out", str(out), "--json")
    assert result.code == 0, result.stderr
    summaries = result.json()
    config = read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config
    assert [s["fleet"] for s in summaries] == [f.name for f in config.fleets]
    expected = render_fleets(stack, config)
    for s in summaries:
        folder = out / s["fleet"]
        r = expected[s["fleet"]]
        assert (folder / "user-data").read_text() == r.document
        assert (folder / "user-data.encoded").read_text() == r.encoded()
        assert sorted(p.name for p in (folder / "parts").iterdir()) == sorted(r.parts)
        for name, text in r.parts.items():
            assert (folder / "parts" / name).read_text() == text
        assert s["headroom_bytes"] >= 0
        assert json.loads((folder / "SUMMARY.json").read_text()) == s
        if s["cloud"] == "aws":
            payload = base64.b64decode((folder / "user-data.encoded").read_text())
            assert len(payload) <= 16 * 1024
            text = gzip.decompress(payload).decode() if s["gzipped"] else payload.decode()
            assert text == r.document
            assets = json.loads((folder / "assets.json").read_text())
            for a in assets:
                assert a["sha256"] == hashlib.sha256(r.assets[a["key"]].encode()).hexdigest()
                assert a["sha256"] in (folder / "parts" / "trainfleet-fetch.py").read_text()


def test_render_table_names_fleets_and_sizes(tmp_path):
    stack = STACK_NAMES[0]
    result = run_trainfleet("render", "--stack", stack, "--out", str(tmp_path / "o"))
    assert result.code == 0, result.stderr
    config = read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config
    for fleet in config.fleets:
        assert fleet.name in result.stdout
    assert "headroom" in result.stdout


def test_render_removes_parts_left_from_an_earlier_render(tmp_path):
    stack = STACK_NAMES[0]
    out = tmp_path / "o"
    assert run_trainfleet("render", "--stack", stack, "--out", str(out)).code == 0
    fleet = read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config.fleets[0].name
    stale = out / fleet / "parts" / "old-part.sh"
    stale.write_text("echo stale\n")
    assert run_trainfleet("render", "--stack", stack, "--out", str(out)).code == 0
    assert not stale.exists()


def test_render_unknown_stack_is_one_line_naming_the_known_ones(tmp_path):
    result = run_trainfleet("render", "--stack", "no-such-stack", "--out", str(tmp_path))
    assert_one_line_error(result, "no-such-stack", STACK_NAMES[0])


def test_render_bad_stack_file_is_one_line_naming_the_key(tmp_path):
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(
        "config:\n  trainfleet:job: {name: j1, params: 1B, tokens: 1B}\n"
        "  trainfleet:fleets: [{name: f1, cloud: aws, region: us-east-1, instance_type: g5.12xlarge, nodes: 1}]\n"
        "  trainfleet:deepspeed: {zero_stage: 5}\n"
    )
    result = run_trainfleet("render", "--stack", str(bad), "--out", str(tmp_path / "o"))
    assert_one_line_error(result, "trainfleet:deepspeed.zero_stage")
    assert not (tmp_path / "o").exists()


def test_render_out_that_is_a_file_is_refused(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    result = run_trainfleet("render", "--stack", STACK_NAMES[0], "--out", str(f))
    assert_one_line_error(result, "is a file")


def test_a_non_editable_install_ships_the_templates_and_renders(tmp_path):
    """pyproject ships templates/**/* as package data: a plain `pip install .` must render on its own."""
    import shutil
    import subprocess
    import sys

    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    for name in ("infra", "cli", "templates"):
        shutil.copytree(STACKS.parent / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(STACKS.parent / name, src / name)
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    result = subprocess.run(
        [*pip, "--target", str(site), str(src)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    shipped = {
        p.relative_to(site / "templates").as_posix() for p in (site / "templates").rglob("*") if p.is_file()
    }
    repo = STACKS.parent / "templates"
    wanted = {
        p.relative_to(repo).as_posix()
        for p in repo.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert wanted <= shipped, sorted(wanted - shipped)
    stack = STACK_NAMES[0]
    probe = (
        "import sys, infra.userdata as u; from pathlib import Path;"
        "from infra.stack_file import read_stack_file;"
        f"assert u.templates_root() == Path({str(site / 'templates')!r}), u.templates_root();"
        f"sf = read_stack_file(Path({str(STACKS / f'Pulumi.{stack}.yaml')!r}));"
        f"print(len(u.render_fleets({stack!r}, sf.config)))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert int(run.stdout) == len(read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config.fleets)
