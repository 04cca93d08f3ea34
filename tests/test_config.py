"""The stack-config schema: valid stacks load and round-trip; every kind of bad value is one clear line."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.config import StackConfig
from infra.errors import ConfigError
from infra.stack_file import list_stack_files, read_stack_file, render_stack_text, write_stack_file
from tests.conftest import STACKS

VALID = {
    "job": {"params": "7B", "tokens": "200B"},
    "fleets": [
        {
            "name": "main",
            "cloud": "aws",
            "region": "us-east-1",
            "instance_type": "p4de.24xlarge",
            "nodes": 4,
            "purchase": "mixed",
            "on_demand_base": 1,
            "on_demand_percentage_above_base": 50,
        }
    ],
    "budget": {"monthly_limit_usd": 50000, "recipients": ["a@example.com"]},
}


DELETE = object()


def with_change(path: str, value):
    """VALID with the value at a dotted path (list indexes as numbers) replaced; DELETE removes it."""
    data = copy.deepcopy(VALID)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = data
    for p in parents:
        node = node[p]
    if value is DELETE:
        node.pop(last)
    else:
        node[last] = value
    return data


def test_valid_config_loads_with_defaults():
    config = StackConfig.from_sections(VALID)
    assert config.job.params == 7_000_000_000
    assert config.job.tokens == 200_000_000_000
    assert config.deepspeed.zero_stage == 2
    fleet = config.fleets[0]
    assert (fleet.on_demand_nodes, fleet.spot_nodes) == (3, 1)  # 1 base + ceil(3 * 50%) = 3 on demand


@pytest.mark.parametrize("path", list_stack_files(STACKS.parent), ids=lambda p: p.name)
def test_every_stack_file_loads_and_round_trips(path: Path, tmp_path: Path):
    stack = read_stack_file(path)
    out = write_stack_file(tmp_path / path.name, stack.config, stack.other_config, stack.other_top)
    again = read_stack_file(out)
    assert again.config == stack.config
    assert again.other_config == stack.other_config  # provider keys (aws:region, ...) survive
    assert render_stack_text(again.config, again.other_config) == out.read_text()


def test_write_keeps_sizes_readable(tmp_path: Path):
    out = write_stack_file(tmp_path / "Pulumi.x.yaml", StackConfig.from_sections(VALID))
    job = yaml.safe_load(out.read_text())["config"]["trainfleet:job"]
    assert job["params"] == "7B" and job["tokens"] == "200B"


@pytest.mark.parametrize(
    "path,value,needles",
    [
        ("fleets.0.purchase", "spott", ["trainfleet:fleets[0].purchase", "'spott'", "'spot'", "'mixed'"]),
        ("fleets.0.cloud", "aws2", ["trainfleet:fleets[0].cloud", "'aws2'", "'gcp'"]),
        ("fleets.0.nodes", 0, ["trainfleet:fleets[0].nodes", "0", "greater than or equal to 1"]),
        ("fleets.0.nodes", "many", ["trainfleet:fleets[0].nodes", "'many'"]),
        (
            "fleets.0.instnce_type",
            "x",
            ["fleets[0].instnce_type is not a known key", "did you mean instance_type"],
        ),
        ("job.tokens", "lots", ["trainfleet:job.tokens", "not a count"]),
        ("job.params", DELETE, ["trainfleet:job.params is required"]),
        ("job.precision", "bf17", ["trainfleet:job.precision", "'bf16'"]),
        ("fleets", [], ["trainfleet:fleets", "at least 1"]),
        ("budget.recipients", ["not-an-email"], ["trainfleet:budget.recipients[0]", "'not-an-email'"]),
        ("budget.monthly_limit_usd", -5, ["trainfleet:budget.monthly_limit_usd", "-5"]),
        ("fleets.0.on_demand_base", 9, ["on_demand_base 9 exceeds nodes 4"]),
        ("fleets.0.ssh_cidrs", ["0.0.0.0/0"], ["trainfleet:fleets[0].ssh_cidrs", "whole internet"]),
        ("fleets.0.instance_type", "p4de.24xlarg", ["not a aws instance type", "did you mean p4de.24xlarge"]),
        ("fleets.0.region", "eu-west-9", ["trainfleet:fleets[0].region", "not offered in 'eu-west-9'"]),
        ("fleets.0.zones", ["use1-az99"], ["trainfleet:fleets[0].zones", "'use1-az99'", "use1-az4"]),
    ],
)
def test_bad_value_is_one_clear_line(path, value, needles):
    with pytest.raises(ConfigError) as err:
        StackConfig.from_sections(with_change(path, value))
    message = str(err.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)


def test_offload_needs_the_right_zero_stage():
    data = {**VALID, "deepspeed": {"zero_stage": 2, "offload_param": "cpu"}}
    with pytest.raises(ConfigError, match=r"trainfleet:deepspeed: .*offload_param needs zero_stage 3, not 2"):
        StackConfig.from_sections(data)


def test_duplicate_fleet_names_rejected():
    data = {**VALID, "fleets": VALID["fleets"] * 2}
    with pytest.raises(ConfigError, match="fleet names must be unique"):
        StackConfig.from_sections(data)


def test_stack_file_problems_name_the_file(tmp_path: Path):
    bad_yaml = tmp_path / "Pulumi.bad.yaml"
    bad_yaml.write_text("config:\n  trainfleet:job: {params: 7B\n")
    with pytest.raises(ConfigError, match=r"Pulumi.bad.yaml line \d+: .*fix the YAML syntax"):
        read_stack_file(bad_yaml)
    unknown = tmp_path / "Pulumi.unknown.yaml"
    unknown.write_text("config:\n  trainfleet:fleet: []\n")
    with pytest.raises(ConfigError, match="trainfleet:fleet is not a known key.*did you mean fleets"):
        read_stack_file(unknown)
    with pytest.raises(ConfigError, match="does not exist; stacks here: bad, unknown"):
        read_stack_file(tmp_path / "Pulumi.nope.yaml")


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch):
    target = write_stack_file(tmp_path / "Pulumi.dev.yaml", StackConfig.from_sections(VALID))
    before = target.read_text()

    def boom(*_):
        raise OSError("disk full")

    monkeypatch.setattr("os.replace", boom)
    with pytest.raises(OSError):
        write_stack_file(target, StackConfig.from_sections(with_change("fleets.0.nodes", 8)))
    assert target.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["Pulumi.dev.yaml"]  # no temp file left behind


# Anything YAML can hold, placed anywhere in an otherwise valid config.
yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
paths = st.sampled_from(
    ["job", "job.params", "job.tokens", "job.seq_len", "job.name", "fleets", "fleets.0", "fleets.0.zones",
     "fleets.0.nodes", "fleets.0.max_price", "fleets.0.ssh_cidrs", "fleets.0.network", "budget",
     "budget.recipients", "budget.alert_thresholds_percent", "deepspeed", "tags", "checkpoint"]
)  # fmt: skip


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(path=paths, value=yaml_values)
def test_fuzzed_configs_fail_only_with_config_error(path, value):
    try:
        StackConfig.from_sections(with_change(path, value))
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("trainfleet")


@settings(max_examples=100, deadline=None)
@given(st.one_of(yaml_values, st.dictionaries(st.text(max_size=10), yaml_values, max_size=4)))
def test_fuzzed_whole_documents_fail_only_with_config_error(document):
    try:
        StackConfig.from_sections(document)
    except ConfigError as exc:
        assert "\n" not in str(exc)
