"""Nothing a user wrote is ever lost, and file inputs never crash (issue 10, part B).

Every case runs the CLI the way a user does (`cli.app.main([...])`, exit code and streams), in a copy of the
project under tmp_path. Expected bytes come from the fixture files (tests/fixtures/no_data_lost/), never from
the code under test.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from cli.app import main
from infra.stack_file import read_stack_file
from tests.conftest import REPO, STACKS, Result, assert_one_line_error

FIXTURE = REPO / "tests" / "fixtures" / "no_data_lost" / "Pulumi.prod.yaml"
PREVIEW = REPO / "tests" / "fixtures" / "preview"
PLAN = ["plan", "--params", "7B", "--tokens", "50B", "--time-value", "100", "--clouds", "aws"]


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A copy of the project (Pulumi.yaml + stacks/) with the hand-kept prod stack, as the working dir."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copytree(STACKS, root / "stacks")
    shutil.copy(FIXTURE, root / "stacks" / "Pulumi.prod.yaml")
    os.chmod(root / "stacks" / "Pulumi.prod.yaml", 0o640)
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def tf(capsys):
    def run(*args: str) -> Result:
        capsys.readouterr()
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def full_disk_after(monkeypatch, allowed_writes: int = 0) -> None:
    """os.write succeeds `allowed_writes` times, then fails as a full disk does (ENOSPC)."""
    real = os.write
    calls = {"n": 0}

    def write(fd, data):
        calls["n"] += 1
        if calls["n"] > allowed_writes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def backups(folder: Path, name: str) -> list[Path]:
    return sorted(folder.glob(f"{name}.bak-*"))


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ---- plan --write-stack: only the planner's keys change ------------------------------------------------


def test_plan_force_keeps_secrets_salt_comments_and_other_sections_byte_for_byte(project, tf):
    fixture = FIXTURE.read_text()
    target = project / "stacks" / "Pulumi.prod.yaml"
    result = tf(*PLAN, "--write-stack", "prod", "--force", "--json")
    assert result.code == 0, result.stderr
    best = result.json()["best"]
    after = target.read_text()
    # Everything above the planner's first key: comments, encryptionsalt, secure values, other namespaces.
    head = fixture[: fixture.index("  aws:region:")]
    assert after.startswith(head)
    for secret in ("  aws:secretKey:\n    secure: AAABAJ2p", "  datadog:apiKey:\n    secure: AAABAGk2mQ"):
        assert secret in after
    # Everything the planner does not produce: budget, launch, tags and the closing comment, byte for byte.
    tail = fixture[fixture.index("  trainfleet:budget:") :]
    assert after.endswith(tail)
    for line in (
        "    name: llama-13b   # names the bucket and the groups: do not change\n",
        "      root_volume_gb: 500\n",
        "      ssh_cidrs: ['203.0.113.0/24']\n",
        "  # checkpoints: keep three, a month of versions\n",
        '    keep_last: 3\n    retention_days: 30\n    bucket_name: "acme-llama-ckpt-prod"\n',
    ):
        assert line in after, line
    # The planner's keys took the plan, and the file still validates.
    stack = read_stack_file(target)
    fleet = stack.config.fleets[0]
    assert (fleet.name, fleet.cloud, fleet.region, fleet.instance_type, fleet.nodes, fleet.purchase) == (
        "main", best["cloud"], best["region"], best["instance_type"], best["nodes"], best["purchase"])  # fmt: skip
    assert stack.config.deepspeed.zero_stage == best["zero_stage"]
    assert stack.config.checkpoint.interval_minutes == pytest.approx(best["checkpoint_interval_minutes"], abs=0.05)
    assert stack.config.job.params == 7 * 10**9 and stack.config.job.name == "llama-13b"
    assert stack.config.budget == read_stack_file(FIXTURE).config.budget
    assert stack.other_config["aws:secretKey"] == {"secure": "AAABAJ2p6Yc3Yl8nq5d6zq4nq8wLxY0mK9fZ7vH3b1dQ5rP2tX8uE4cW6yA0sB=="}
    # Same mode as before, and the previous file kept beside it, byte for byte.
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    (backup,) = backups(target.parent, target.name)
    assert backup.read_bytes() == FIXTURE.read_bytes()
    assert stat.S_IMODE(backup.stat().st_mode) == 0o640
    assert "kept as" in result.stderr and backup.name in result.stderr
    assert not list(target.parent.glob(".*.tmp"))


def test_plan_force_twice_with_the_same_plan_changes_nothing_more(project, tf):
    target = project / "stacks" / "Pulumi.prod.yaml"
    assert tf(*PLAN, "--write-stack", "prod", "--force", "--json").code == 0
    once = target.read_bytes()
    again = tf(*PLAN, "--write-stack", "prod", "--force", "--json")
    assert again.code == 0, again.stderr
    assert target.read_bytes() == once
    assert len(backups(target.parent, target.name)) == 1  # nothing replaced, so no second backup


def test_plan_force_through_a_symlinked_stack_file_edits_the_file_it_points_to(project, tf):
    envs = project / "envs"
    envs.mkdir()
    real = envs / "prod.yaml"
    shutil.copy(FIXTURE, real)
    link = project / "stacks" / "Pulumi.prod.yaml"
    link.unlink()
    link.symlink_to(Path("..") / "envs" / "prod.yaml")
    result = tf(*PLAN, "--write-stack", "prod", "--force", "--json")
    assert result.code == 0, result.stderr
    assert link.is_symlink() and os.readlink(link) == str(Path("..") / "envs" / "prod.yaml")
    fixture = FIXTURE.read_text()
    assert real.read_text().startswith(fixture[: fixture.index("  aws:region:")])
    assert real.read_text().endswith(fixture[fixture.index("  trainfleet:budget:") :])
    assert [p.read_bytes() for p in backups(envs, "prod.yaml")] == [FIXTURE.read_bytes()]


def test_plan_force_refuses_a_stack_with_two_fleets(project, tf):
    target = project / "stacks" / "Pulumi.prod.yaml"
    text = FIXTURE.read_text().replace(
        "  trainfleet:deepspeed:",
        "    - name: eval\n      cloud: aws\n      region: us-east-1\n      instance_type: g5.12xlarge\n"
        "      nodes: 1\n  trainfleet:deepspeed:",
    )
    target.write_text(text)
    result = tf(*PLAN, "--write-stack", "prod", "--force")
    assert_one_line_error(result, "2 fleets", "main, eval")
    assert target.read_text() == text
    assert not backups(target.parent, target.name)


def test_plan_write_stack_refuses_to_replace_a_file_that_is_not_a_stack(project, tf):
    target = project / "stacks" / "Pulumi.notes.yaml"
    target.write_text("my notes:\n  - keep this\nmy notes: twice\n")
    result = tf(*PLAN, "--write-stack", "notes", "--force")
    assert_one_line_error(result, "Pulumi.notes.yaml", "line 3", "appears twice")
    assert target.read_text() == "my notes:\n  - keep this\nmy notes: twice\n"


def test_plan_write_stack_new_file_is_not_private_0600(project, tf):
    result = tf(*PLAN, "--write-stack", "fresh", "--json")
    assert result.code == 0, result.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((project / "stacks" / "Pulumi.fresh.yaml").stat().st_mode) == 0o666 & ~umask


def test_plan_write_stack_full_disk_keeps_the_old_file(project, tf, monkeypatch):
    target = project / "stacks" / "Pulumi.prod.yaml"
    full_disk_after(monkeypatch)
    result = tf(*PLAN, "--write-stack", "prod", "--force", "--json")
    assert_one_line_error(result, "no space left on device", "free space and retry")
    assert target.read_bytes() == FIXTURE.read_bytes()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in target.parent.iterdir() if "prod" in p.name) == ["Pulumi.prod.yaml"]


PULUMI_INIT = (
    "# pulumi stack init prod && pulumi config set aws:profile prod && pulumi config set --secret db:password\n"
    "encryptionsalt: v1:J6cBr3o3Fb0=:v1:kMq9bDk0Yx7uTz+1:fZ3pQ0m1c2W4aFq8lN5Yvg==\n"
    "config:\n"
    "  aws:profile: prod   # SSO profile\n"
    "  db:password:\n"
    "    secure: v1:Qm9nVXM0cmFuZG9tOnYxOmNpcGhlcnRleHQ=\n"
    "\n"
    "# set by the platform team\n"
    "backend: {url: 's3://acme-pulumi-state'}"  # no newline at the end, as some editors leave it
)


def test_plan_force_into_a_bare_pulumi_stack_adds_sections_and_keeps_every_byte(project, tf):
    target = project / "stacks" / "Pulumi.bare.yaml"
    target.write_text(PULUMI_INIT)
    result = tf(*PLAN, "--write-stack", "bare", "--force", "--json")
    assert result.code == 0, result.stderr
    after = target.read_text()
    head, tail = PULUMI_INIT.split("\n\n# set by the platform team")
    assert after.startswith(head + "\n")
    assert after.endswith("\n\n# set by the platform team" + tail)
    stack = read_stack_file(target)
    assert stack.config.fleets[0].instance_type == result.json()["best"]["instance_type"]
    assert stack.other_config["db:password"] == {"secure": "v1:Qm9nVXM0cmFuZG9tOnYxOmNpcGhlcnRleHQ="}
    assert stack.other_top == {
        "encryptionsalt": "v1:J6cBr3o3Fb0=:v1:kMq9bDk0Yx7uTz+1:fZ3pQ0m1c2W4aFq8lN5Yvg==",
        "backend": {"url": "s3://acme-pulumi-state"},
    }
    assert [p.read_text() for p in backups(target.parent, target.name)] == [PULUMI_INIT]


def test_plan_force_keeps_windows_line_endings(project, tf):
    target = project / "stacks" / "Pulumi.prod.yaml"
    crlf = FIXTURE.read_bytes().replace(b"\n", b"\r\n")
    target.write_bytes(crlf)
    assert tf(*PLAN, "--write-stack", "prod", "--force", "--json").code == 0
    after = target.read_bytes()
    assert after.count(b"\n") == after.count(b"\r\n")
    assert after.startswith(crlf[: crlf.index(b"  aws:region:")])
    assert after.endswith(crlf[crlf.index(b"  trainfleet:budget:") :])


@pytest.mark.parametrize("name", ["prod", "feature-x_2.dev", "a" * 100])
def test_stack_names_pulumi_allows_map_to_stacks_folder(project, name):
    from infra.stack_file import stack_path

    assert stack_path(name) == project / "stacks" / f"Pulumi.{name}.yaml"


@pytest.mark.parametrize("value", ["", "..", "a" * 101, "prod env", "prod;rm", "../../x", "org/prod", "x/.yaml"])
def test_stack_values_that_are_neither_a_pulumi_name_nor_a_yaml_path_are_refused(project, value):
    from infra.errors import ConfigError
    from infra.stack_file import stack_path

    with pytest.raises(ConfigError, match="stack"):
        stack_path(value)


def test_write_stack_empty_name_is_one_line(project, tf):
    before = tree(project)
    assert_one_line_error(tf(*PLAN, "--write-stack", ""), "stack name ''", "letters, digits")
    assert tree(project) == before


def test_write_stack_path_must_end_in_yaml(project, tf):
    result = tf(*PLAN, "--write-stack", "../../x")
    assert_one_line_error(result, "'../../x'", ".yaml")
    assert not (project.parent.parent / "x").exists()


def test_write_stack_name_with_characters_pulumi_refuses_is_one_line(project, tf):
    assert_one_line_error(tf(*PLAN, "--write-stack", "prod;rm -rf"), "not a Pulumi stack name")


def test_write_stack_to_a_directory_is_one_line(project, tf):
    (project / "stacks" / "Pulumi.out.yaml").mkdir()
    assert_one_line_error(tf(*PLAN, "--write-stack", "out", "--force"), "is a directory")
    assert (project / "stacks" / "Pulumi.out.yaml").is_dir()


@pytest.mark.parametrize(
    "where",
    ["../elsewhere/Pulumi.dev.yaml", "/tmp/trainfleet-not-a-stack.yaml", "out.yaml", "stacks/dev.yaml",
     "stacks/sub/Pulumi.dev.yaml", "stacks/Pulumi.dev.yml"],
)  # fmt: skip
def test_write_stack_writes_only_into_the_projects_stacks_folder(project, tf, where):
    """Issue 27: `--write-stack some/path.yaml` wrote wherever the path pointed. Only stacks/Pulumi.<ENV>.yaml is
    a stack Pulumi reads; anything else is one line, exit 2, and nothing is written anywhere."""
    outside = Path(where) if where.startswith("/") else project / where
    before = tree(project.parent)
    result = tf(*PLAN, "--write-stack", where, "--force")
    assert_one_line_error(result, "is not a stack file of this project", "--write-stack dev")
    assert tree(project.parent) == before and not outside.exists()


def test_write_stack_as_the_projects_own_stack_file_path_is_that_stack(project, tf):
    result = tf(*PLAN, "--write-stack", "stacks/Pulumi.fresh.yaml", "--json")
    assert result.code == 0, result.stderr
    assert read_stack_file(project / "stacks" / "Pulumi.fresh.yaml").config.fleets


# ---- render --out: swap in complete renders, never delete what trainfleet did not write ---------------------


def test_render_refuses_a_folder_trainfleet_did_not_write(project, tf):
    mine = project / "out" / "main"
    mine.mkdir(parents=True)
    (mine / "thesis.tex").write_text("years of work\n")
    result = tf("render", "--stack", "prod", "--out", "out")
    assert_one_line_error(result, "out/main", "SUMMARY.json", "choose another --out")
    assert (mine / "thesis.tex").read_text() == "years of work\n"


def test_render_refuses_a_previous_render_holding_a_users_file(project, tf):
    assert tf("render", "--stack", "prod", "--out", "out", "--json").code == 0
    (project / "out" / "main" / "review-notes.md").write_text("LGTM\n")
    result = tf("render", "--stack", "prod", "--out", "out", "--json")
    assert_one_line_error(result, "review-notes.md")
    assert (project / "out" / "main" / "review-notes.md").read_text() == "LGTM\n"


def test_render_full_disk_keeps_the_previous_render(project, tf, monkeypatch):
    out = project / "out"
    assert tf("render", "--stack", "prod", "--out", "out", "--json").code == 0
    before = tree(out)
    # A different render next time (more nodes), failing part way through writing it.
    target = project / "stacks" / "Pulumi.prod.yaml"
    target.write_text(FIXTURE.read_text().replace("      nodes: 4\n", "      nodes: 6\n"))
    full_disk_after(monkeypatch, allowed_writes=3)
    result = tf("render", "--stack", "prod", "--out", "out", "--json")
    assert_one_line_error(result, "no space left on device")
    assert tree(out) == before
    assert sorted(p.name for p in out.iterdir()) == ["main"]  # no temp folder left behind


def test_render_replaces_its_own_previous_render(project, tf):
    out = project / "out"
    assert tf("render", "--stack", "prod", "--out", "out", "--json").code == 0
    stale = out / "main" / "parts" / "dropped-part.sh"
    stale.write_text("echo stale\n")
    assert tf("render", "--stack", "prod", "--out", "out", "--json").code == 0
    assert not stale.exists() and (out / "main" / "SUMMARY.json").is_file()
    assert sorted(p.name for p in out.iterdir()) == ["main"]


# ---- catalog refresh --overlay ----------------------------------------------------------------------------


def test_refresh_refuses_a_directory_overlay_before_any_network_call(tmp_path, tf, monkeypatch):
    folder = tmp_path / "prices"
    folder.mkdir()
    (folder / "mine.csv").write_text("a,b\n1,2\n")

    def no_network(cloud):
        raise AssertionError("a price API was about to be called")

    monkeypatch.setattr("infra.catalog.refresh.run.source_for", no_network)
    result = tf("catalog", "refresh", "--cloud", "azure", "--regions", "westus", "--overlay", str(folder))
    assert_one_line_error(result, str(folder), "is a directory")
    assert (folder / "mine.csv").read_text() == "a,b\n1,2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["prices"]  # not moved to *.corrupt-<time>


def test_refresh_refuses_a_device_as_overlay(tf, monkeypatch):
    monkeypatch.setattr("infra.catalog.refresh.run.source_for", lambda cloud: pytest.fail("network"))
    result = tf("catalog", "refresh", "--cloud", "azure", "--overlay", "/dev/null")
    assert_one_line_error(result, "/dev/null", "not a regular file")


def test_overlay_write_on_a_full_disk_keeps_the_previous_overlay(tmp_path, monkeypatch):
    from infra.catalog.refresh.overlay import read_overlay, write_overlay
    from infra.catalog.refresh.run import snapshot_offers
    from infra.errors import TrainfleetError

    path = tmp_path / "catalog-overlay.csv"
    write_overlay(path, snapshot_offers()[:2])
    before = path.read_bytes()
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(TrainfleetError, match=r"cannot write the catalog overlay .*: no space left on device; free"):
        write_overlay(path, snapshot_offers()[:5])
    assert path.read_bytes() == before and len(read_overlay(path)) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["catalog-overlay.csv"]


# ---- input files: duplicate keys, absurd nesting ------------------------------------------------------------


def test_duplicate_key_in_a_stack_file_is_one_line_naming_file_line_and_key(project, tf):
    text = FIXTURE.read_text().replace("    grad_accum: 8\n", "    grad_accum: 8\n    micro_batch: 1\n")
    (project / "stacks" / "Pulumi.dup.yaml").write_text(text)
    line = text.splitlines().index("    micro_batch: 1") + 1
    result = tf("render", "--stack", "dup", "--out", "out")
    assert_one_line_error(result, "Pulumi.dup.yaml", f"line {line}", "'micro_batch' appears twice")
    assert not (project / "out").exists()


def test_duplicate_key_in_a_preview_json_is_one_line(tmp_path, tf):
    doc = (PREVIEW / "prod-main.json").read_text()
    dup = tmp_path / "dup.json"
    dup.write_text(doc.replace('{', '{"steps": [], ', 1))
    assert_one_line_error(tf("preview", "--pulumi-json", str(dup)), "dup.json", "'steps' appears twice")


def test_deeply_nested_stack_file_is_one_line(project, tf):
    deep = "config:\n  aws:region: " + "[" * 5000 + "]" * 5000 + "\n"
    (project / "stacks" / "Pulumi.deep.yaml").write_text(deep)
    assert_one_line_error(tf("stacks", "check", "--stack", "deep"), "Pulumi.deep.yaml", "nested more than")


def test_deeply_nested_preview_json_is_one_line(tmp_path, tf):
    deep = tmp_path / "deep.json"
    deep.write_text('{"steps": [' + "[" * 5000 + "]" * 5000 + "]}")
    assert_one_line_error(tf("preview", "--pulumi-json", str(deep)), "deep.json", "nested more than")


@pytest.mark.parametrize(
    ("resource", "path", "value"),
    [
        ("train-asg", ["mixedInstancesPolicy", "instancesDistribution", "onDemandBaseCapacity"], "1" + "0" * 400),
        ("train-lt", ["blockDeviceMappings"], "7"),  # priced with the group that launches it
    ],
)
def test_a_preview_input_of_the_wrong_shape_is_one_line_naming_the_resource(tmp_path, tf, resource, path, value):
    """Found by the fuzz suite: a 401-digit count overflowed float() (OverflowError) and a number where the
    schema has a list raised TypeError."""
    doc = json.loads((REPO / "tests" / "fixtures" / "preview" / "prod-main.json").read_text())
    inputs = next(s for s in doc["steps"] if s["urn"].endswith(resource))["newState"]["inputs"]
    for key in path[:-1]:
        inputs = inputs[key]
    inputs[path[-1]] = "__VALUE__"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc).replace('"__VALUE__"', value))
    assert_one_line_error(tf("preview", "--pulumi-json", str(bad)), "train-asg", "not shaped as the provider")


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_a_preview_document_with_a_number_json_has_not_is_one_line(tmp_path, tf, number):
    """Found by the fuzz suite: `"config": NaN` went through and `diff -f json` printed NaN. Python's json
    reads these; RFC 8259 has no such numbers and Go's encoding/json (pulumi's) never writes them."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"config": ' + number + ', "steps": []}')
    assert_one_line_error(tf("preview", "--pulumi-json", str(bad)), "bad.json", number)
    other = REPO / "tests" / "fixtures" / "preview" / "prod-main.json"
    assert_one_line_error(tf("diff", "--base", str(other), "--head", str(bad), "-f", "json"), number)


# ---- diff: symlinked stack files, --output ----------------------------------------------------------------


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo,
                   check=True, capture_output=True)  # fmt: skip


def symlinked_repo(root: Path, target: str) -> Path:
    (root / "stacks").mkdir(parents=True)
    (root / "envs").mkdir()
    shutil.copy(REPO / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copy(STACKS / "Pulumi.dev.yaml", root / "envs" / "dev.yaml")
    (root / "stacks" / "Pulumi.dev.yaml").symlink_to(target)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "dev stack")
    return root


def test_diff_against_a_git_ref_follows_a_symlinked_stack_file(tmp_path, tf, monkeypatch):
    repo = symlinked_repo(tmp_path / "repo", "../envs/dev.yaml")
    env = repo / "envs" / "dev.yaml"
    # 3 nodes share a cluster placement group, so the PR also names one zone (rule aws-placement-group-one-zone)
    env.write_text(env.read_text().replace("nodes: 1", "nodes: 3").replace("[use1-az1, use1-az2, use1-az4]", "[use1-az2]"))
    monkeypatch.chdir(repo)
    result = tf("diff", "--base", "main", "--stack", "dev", "--format", "json")
    assert result.code == 0, result.stderr
    asg = next(r for r in result.json()["resources"] if r["type"] == "aws:autoscaling/group:Group")
    assert asg["op"] == "update"
    changed = {c["path"]: (c["base"], c["head"]) for c in asg["changed_inputs"]}
    assert changed["maxSize"] == (1, 3) and "desiredCapacity" not in changed  # created empty: start_run sizes it


def test_diff_with_a_stack_symlink_leaving_the_repository_is_one_line(tmp_path, tf, monkeypatch):
    outside = tmp_path / "elsewhere" / "dev.yaml"
    outside.parent.mkdir()
    shutil.copy(STACKS / "Pulumi.dev.yaml", outside)
    repo = symlinked_repo(tmp_path / "repo", str(outside))
    monkeypatch.chdir(repo)
    result = tf("diff", "--base", "main", "--stack", "dev", "--format", "json")
    assert_one_line_error(result, "symlink", "outside the repository", "--base a stack file")


def preview_diff(tf, *output: str) -> Result:
    return tf("diff", "--base", str(PREVIEW / "prod-main.json"), "--head", str(PREVIEW / "prod-pr.json"),
              "--format", "markdown", *output)  # fmt: skip


def test_diff_output_to_a_directory_is_one_line(tmp_path, tf):
    assert_one_line_error(preview_diff(tf, "--output", str(tmp_path)), "--output", "is a directory")


def full_device(tmp_path: Path) -> Path:
    """A /dev/full of the test's own (char 1,7: every write fails with ENOSPC), so a regression in the atomic
    write's device check replaces this node, never the machine's /dev/full. Needs root (mknod); else the
    machine's, guarded: it must still be a character device afterwards."""
    node = tmp_path / "full"
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        return node
    except PermissionError:
        return Path("/dev/full")


def test_diff_output_to_a_full_device_is_one_line(tf, tmp_path):
    device = full_device(tmp_path)
    assert stat.S_ISCHR(device.stat().st_mode)
    assert_one_line_error(preview_diff(tf, "--output", str(device)), str(device), "no space left on device")
    assert stat.S_ISCHR(device.stat().st_mode)  # still the device, not a file renamed over it


def test_diff_output_full_disk_keeps_the_previous_output(tmp_path, tf, monkeypatch):
    out = tmp_path / "comment.md"
    out.write_text("the previous comment\n")
    out.chmod(0o640)
    full_disk_after(monkeypatch)
    assert_one_line_error(preview_diff(tf, "--output", str(out)), "no space left on device")
    assert out.read_text() == "the previous comment\n"
    assert [p.name for p in tmp_path.iterdir()] == ["comment.md"]


def test_diff_output_replaces_the_file_keeping_its_mode(tmp_path, tf):
    out = tmp_path / "comment.md"
    out.write_text("the previous comment\n")
    out.chmod(0o640)
    result = preview_diff(tf, "--output", str(out))
    assert result.code == 0, result.stderr
    assert out.read_text().startswith("<!-- trainfleet-cost-diff")
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


# ---- the helper itself ---------------------------------------------------------------------------------------


def test_atomic_write_follows_a_symlink_and_refuses_a_directory(tmp_path):
    from infra.atomic import write_file
    from infra.errors import TrainfleetError

    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to("real.txt")
    write_file(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    with pytest.raises(TrainfleetError, match="is a directory; name a file"):
        write_file(tmp_path, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]
