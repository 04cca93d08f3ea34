"""`trainfleet stacks check`, run as a user would (a subprocess), against the repo's stacks and broken ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import STACKS, assert_one_line_error, run_trainfleet
from tests.session_results import once_per_session

REQUIRED = {"dev", "prod", "gcp-dev", "azure-dev", "gaudi"}


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "Pulumi.yaml").write_text(
        "name: trainfleet\nruntime: python\nmain: infra/\nstackConfigDir: stacks\n"
    )
    (tmp_path / "stacks").mkdir()
    for name, text in files.items():
        (tmp_path / "stacks" / name).write_text(text)
    return tmp_path


def _check_every_stack(_folder) -> list[dict]:
    result = run_trainfleet("stacks", "check", "--json", timeout=300)
    assert result.code == 0, result.stderr
    return result.json()


@pytest.fixture(scope="session")
def checked(tmp_path_factory):
    """`trainfleet stacks check` over every stack, run once per test session (whichever worker asks first)."""
    return {row["stack"]: row for row in once_per_session(tmp_path_factory, "stacks-check", _check_every_stack)}


def test_every_stack_file_runs_and_reports_its_resource_count(checked):
    assert REQUIRED <= set(checked)
    for stack, row in checked.items():
        assert row["resources"] == sum(row["by_type"].values()) >= 10, stack
        assert row["components"] >= 5 and row["hourly_price_usd"] > 0
    assert checked["prod"]["by_type"]["aws:autoscaling/group:Group"] == 1
    assert checked["prod"]["by_type"]["aws:bcmdata/export:Export"] == 1
    assert "aws:bcmdata/export:Export" not in checked["dev"]["by_type"]
    assert (
        checked["gcp-dev"]["by_type"]["gcp:compute/regionInstanceGroupManager:RegionInstanceGroupManager"]
        == 1
    )
    assert checked["azure-dev"]["by_type"]["azure-native:compute:VirtualMachineScaleSet"] == 1
    # Issue 28: what a fresh account needs by hand before the first `pulumi up` (tests/test_first_deploy.py)
    assert len(checked["azure-dev"]["first_deploy_steps"]) == 5
    assert len(checked["gaudi"]["first_deploy_steps"]) == 1  # its own image: no one publishes one
    assert all(not checked[s]["first_deploy_steps"] for s in ("prod", "dev", "gcp-dev"))


def test_the_table_names_each_first_deploy_step_with_its_command():
    result = run_trainfleet("stacks", "check", "--stack", "azure-dev", env={"COLUMNS": "80"})
    assert result.code == 0, result.stderr
    assert "Before the first `pulumi up` of azure-dev" in result.stdout
    text = " ".join(result.stdout.split())  # wrapped at 80 columns, at spaces only
    assert "az provider register --namespace Microsoft.Compute --wait" in text
    # No line longer than 80 but one whole word too long to wrap (a URL; the table's rule is its own width)
    assert all(len(line.split()) == 1 for line in result.stdout.splitlines() if len(line) > 80)


def test_table_for_one_stack(checked):
    result = run_trainfleet("stacks", "check", "--stack", "gaudi")
    assert result.code == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "gaudi" in line and "aws" in line)
    assert str(checked["gaudi"]["resources"]) in row.split()
    assert "dev" not in result.stdout.replace("stacks/", "")


def test_a_misspelt_key_in_a_stack_file_is_one_line_naming_file_and_key(tmp_path):
    text = (STACKS / "Pulumi.dev.yaml").read_text().replace("instance_type:", "instance_typ:")
    project = _project(tmp_path, {"Pulumi.bad.yaml": text})
    shutil.copy(STACKS / "Pulumi.prod.yaml", project / "stacks" / "Pulumi.prod.yaml")
    result = run_trainfleet("stacks", "check", cwd=project)
    assert_one_line_error(result, "Pulumi.bad.yaml", "instance_typ", "instance_type")
    assert result.stdout == ""


def test_broken_yaml_is_one_line(tmp_path):
    project = _project(tmp_path, {"Pulumi.broken.yaml": "config:\n  trainfleet:job: [unclosed\n"})
    assert_one_line_error(run_trainfleet("stacks", "check", cwd=project), "Pulumi.broken.yaml", "YAML")


def test_a_config_the_program_rejects_is_one_line(tmp_path):
    text = (
        (STACKS / "Pulumi.gcp-dev.yaml")
        .read_text()
        .replace("    purchase: spot\n", "    purchase: mixed\n    on_demand_base: 1\n")
        .replace("    nodes: 1\n", "    nodes: 2\n")
    )
    project = _project(tmp_path, {"Pulumi.gmix.yaml": text})
    result = run_trainfleet("stacks", "check", "--stack", "gmix", cwd=project)
    assert_one_line_error(result, "Pulumi.gmix.yaml", "cannot mix Spot")


def test_unknown_stack_and_empty_folder(tmp_path):
    assert_one_line_error(run_trainfleet("stacks", "check", "--stack", "nope"), "does not exist", "prod")
    assert_one_line_error(run_trainfleet("stacks", "check", cwd=_project(tmp_path, {})), "no stack files")
