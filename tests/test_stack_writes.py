"""What `plan --write-stack` writes, and the atomic write under it, rule by rule (issue 11's mutation survivors).

Expected values come from the plan's own JSON (what the user was shown) and from the stack files written by
hand here, never from the writer's helpers."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from infra.atomic import write_file
from infra.errors import ConfigError, TrainfleetError
from infra.stack_file import edit_stack_file
from tests.conftest import REPO, run_trainfleet

JOB = ("--model", "llama-7b", "--tokens", "200B", "--deadline", "72h", "--clouds", "aws")


@pytest.fixture
def project(tmp_path):
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "stacks").mkdir()
    return tmp_path


def config_of(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())["config"]


def test_a_new_stack_file_holds_what_the_plan_showed(project):
    result = run_trainfleet("plan", *JOB, "--json", "--write-stack", "new", cwd=project)
    assert result.code == 0, result.stderr
    best = result.json()["best"]
    config = config_of(project / "stacks" / "Pulumi.new.yaml")
    fleet = config["trainfleet:fleets"][0]
    assert config["aws:region"] == best["region"]  # the provider's region: `pulumi up` needs it
    assert (fleet["instance_type"], fleet["zones"], fleet["nodes"]) == (
        best["instance_type"],
        best["zones"],
        best["nodes"],
    )
    deepspeed = config["trainfleet:deepspeed"]
    assert (deepspeed["zero_stage"], deepspeed["offload_optimizer"]) == (best["zero_stage"], "none")
    assert best["offload"] == "none"


def test_a_plan_that_fits_only_with_offload_writes_the_offload(project):
    """7B on one 4 x A10G node fits only with model states in host memory (ZeRO-3 alone keeps 18P/4 = 30 GB on each
    24 GB device): the stack file must say so, or the job runs out of GPU memory at its first step. With the node's
    Llama layers counted (issue 30: 13.1 GB of activations at micro batch 1 without recompute) the cheapest plan
    offloads the parameters as well as the optimizer states."""
    job = ("--model", "llama-7b", "--tokens", "1B", "--accelerators", "A10G", "--max-nodes", "1")
    result = run_trainfleet("plan", *job, "--json", "--write-stack", "off", cwd=project)
    assert result.code == 0, result.stderr
    best = result.json()["best"]
    deepspeed = config_of(project / "stacks" / "Pulumi.off.yaml")["trainfleet:deepspeed"]
    assert best["offload"] == "optimizer+params" and deepspeed["offload_optimizer"] == "cpu"
    assert deepspeed["offload_param"] == "cpu" and deepspeed["zero_stage"] == best["zero_stage"] == 3


def test_an_on_demand_plan_keeps_every_zone_of_its_region(project):
    """On-demand is priced per region and one node may run in any of its zones: the fleet keeps them all."""
    plan = ("plan", "--model", "llama-7b", "--tokens", "2B", "--purchase", "on-demand", "--regions", "us-east-1")
    result = run_trainfleet(*plan, "--accelerators", "A100-40GB", "--max-nodes", "1", "--json", "--write-stack", "od", cwd=project)
    assert result.code == 0, result.stderr
    best = result.json()["best"]
    assert best["nodes"] == 1 and len(best["zones"]) > 1
    assert config_of(project / "stacks" / "Pulumi.od.yaml")["trainfleet:fleets"][0]["zones"] == best["zones"]


def test_a_multi_node_aws_plan_names_one_zone_for_its_placement_group(project):
    """Several AWS nodes share a cluster placement group, which lives in one zone (CreateAutoScalingGroup refuses
    several): the plan and the stack it writes name one, and `stacks check` accepts the stack."""
    plan = ("plan", *JOB, "--purchase", "on-demand", "--regions", "us-east-1", "--accelerators", "A100-40GB")
    result = run_trainfleet(*plan, "--json", "--write-stack", "od", cwd=project)
    assert result.code == 0, result.stderr
    best = result.json()["best"]
    assert best["nodes"] > 1 and len(best["zones"]) == 1
    assert config_of(project / "stacks" / "Pulumi.od.yaml")["trainfleet:fleets"][0]["zones"] == best["zones"]
    check = run_trainfleet("stacks", "check", "--stack", "od", cwd=project, timeout=300)
    assert check.code == 0, check.stderr


HAND_WRITTEN = """\
# prod: the team's stack (hand-written)
config:
  aws:region:
    secure: AAABAKx1c2VjcmV0cmVnaW9u
  trainfleet:job:
    name: prod-llama   # names every deployed resource
    model: llama-7b
    params: 7B
    tokens: 200B   # agreed with the data team
    deadline_hours: 24
  trainfleet:fleets:
  - name: train
    cloud: aws
    region: "us-east-1"
    zones: [use1-az1, use1-az2]
    instance_type: p5.48xlarge
    fallback_instance_types: [p4d.24xlarge, p5.48xlarge]
    nodes: 2
    purchase: mixed
    on_demand_base: 1
  trainfleet:budget:
    monthly_limit_usd: 50000
    recipients: [ml-platform@example.com]
"""


def write_plan_into(project: Path, *plan_args: str) -> tuple[dict, dict]:
    target = project / "stacks" / "Pulumi.prod.yaml"
    target.write_text(HAND_WRITTEN)
    result = run_trainfleet("plan", *plan_args, "--json", "--write-stack", "prod", "--force", cwd=project)
    assert result.code == 0, result.stderr
    return result.json()["best"], config_of(target)


def test_force_keeps_the_users_keys_and_drops_what_the_plan_made_stale(project):
    best, config = write_plan_into(project, "--model", "llama-7b", "--tokens", "200B", "--regions", "us-east-1",
                                   "--purchase", "spot", "--accelerators", "A100-40GB")  # fmt: skip
    job, fleet = config["trainfleet:job"], config["trainfleet:fleets"][0]
    assert config["aws:region"] == {"secure": "AAABAKx1c2VjcmV0cmVnaW9u"}  # a secret region is the user's
    assert job["name"] == "prod-llama"  # renaming the job would replace every deployed resource
    assert "deadline_hours" not in job  # this plan has no deadline: the old one must not linger
    assert config["trainfleet:budget"] == {
        "monthly_limit_usd": 50000,
        "recipients": ["ml-platform@example.com"],
    }
    assert fleet["purchase"] == "spot" and "on_demand_base" not in fleet  # mixed-only keys go with mixed
    assert best["instance_type"] == "p4d.24xlarge"  # the only A100-40GB type there: it was a fallback
    assert fleet["fallback_instance_types"] == ["p5.48xlarge"]  # never its own fallback
    assert fleet["zones"] == best["zones"]


def test_an_unchanged_key_keeps_its_spelling_and_comment(project):
    target = project / "stacks" / "Pulumi.prod.yaml"
    write_plan_into(project, *JOB, "--regions", "us-east-1")
    text = target.read_text()
    assert "    name: prod-llama   # names every deployed resource\n" in text
    assert "    tokens: 200B   # agreed with the data team\n" in text  # a planner key the plan leaves as is
    assert '    region: "us-east-1"\n' in text
    assert (
        "  trainfleet:budget:\n    monthly_limit_usd: 50000\n    recipients: [ml-platform@example.com]\n"
        in (target.read_text())
    )


def set_nodes(config, n: int) -> list[str]:
    config["trainfleet:fleets"][0]["nodes"] = n
    return []


def test_two_edits_in_one_second_keep_two_backups(project):
    target = project / "stacks" / "Pulumi.prod.yaml"
    target.write_text(HAND_WRITTEN)
    first = edit_stack_file(target, lambda c: set_nodes(c, 3), check_catalog=False)
    second = edit_stack_file(target, lambda c: set_nodes(c, 4), check_catalog=False)
    assert first.backup != second.backup
    assert first.backup.read_text() == HAND_WRITTEN and "nodes: 3" in second.backup.read_text()


def test_an_edit_that_does_not_validate_writes_nothing(project):
    target = project / "stacks" / "Pulumi.prod.yaml"
    target.write_text(HAND_WRITTEN)
    with pytest.raises(ConfigError, match="nothing was written"):
        edit_stack_file(target, lambda c: set_nodes(c, 0), check_catalog=False)
    assert target.read_text() == HAND_WRITTEN and list(target.parent.iterdir()) == [target]


# ---- the atomic write ------------------------------------------------------------------------------------


def test_a_read_only_file_is_refused_even_for_root(tmp_path, monkeypatch):
    """As root os.access says yes to everything; ask as a user would be answered (the check is os.access)."""
    target = tmp_path / "Pulumi.prod.yaml"
    target.write_text("mine\n")
    target.chmod(0o444)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, m, **kw: False if m == os.W_OK else real_access(p, m, **kw))
    with pytest.raises(TrainfleetError):
        write_file(target, b"new\n", what="stack file")
    assert target.read_text() == "mine\n" and stat.S_IMODE(target.stat().st_mode) == 0o444


def test_short_writes_are_retried_until_every_byte_is_written(tmp_path, monkeypatch):
    """os.write may write fewer bytes than asked (a signal, a pipe, a full quota): nothing may be lost."""
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:7])))
    payload = b"".join(b"line %05d of a large stack file\n" % i for i in range(3000))
    write_file(tmp_path / "big.yaml", payload, what="stack file")
    monkeypatch.undo()
    assert (tmp_path / "big.yaml").read_bytes() == payload


def test_the_temp_file_is_made_beside_the_target(tmp_path, monkeypatch):
    """A rename is atomic only within one file system: the temp file must live in the target's folder."""
    folders = []
    real_mkstemp = tempfile.mkstemp

    def spy(*args, **kwargs):
        folders.append(kwargs.get("dir"))
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", spy)
    (tmp_path / "stacks").mkdir()
    write_file(tmp_path / "stacks" / "Pulumi.x.yaml", b"config: {}\n", what="stack file")
    assert folders and all(Path(f) == tmp_path / "stacks" for f in folders)


# ---- the splice's safety net -------------------------------------------------------------------------------
# A faulty splice is planted on purpose (monkeypatched): the guard must fall back to the full round-trip dump.


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        (lambda text: text.replace("nodes: 3", "nodes: 30"), "a value changed"),
        (lambda text: text.replace("   # agreed with the data team", ""), "a comment lost"),
    ],
)
def test_a_splice_that_changed_a_value_or_lost_a_comment_is_never_written(project, monkeypatch, fault, why):
    import infra.stack_file as stack_file

    target = project / "stacks" / "Pulumi.prod.yaml"
    target.write_text(HAND_WRITTEN)
    real_splice = stack_file._splice
    monkeypatch.setattr(stack_file, "_splice", lambda *args: fault(real_splice(*args)))
    edit_stack_file(target, lambda c: set_nodes(c, 3), check_catalog=False)
    written = config_of(target)
    assert written["trainfleet:fleets"][0]["nodes"] == 3, why
    assert "# agreed with the data team" in target.read_text(), why
