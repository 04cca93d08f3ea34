"""User-data for every stack in stacks/: provider limits, exact encodings, cloud-init's own schema check,
shellcheck on the rendered shell, StrictUndefined, and no secrets. Stacks are listed at collection time,
so a stack file added later is checked the same way."""

from __future__ import annotations

import base64
import configparser
import gzip
import json
import py_compile
import re
import subprocess

import jinja2
import pytest
import yaml

from infra.config import StackConfig
from infra.errors import TrainfleetError
from infra.stack_file import list_stack_files, read_stack_file, stack_name
from infra.userdata import (
    AWS_USER_DATA_LIMIT,
    AZURE_CUSTOM_DATA_LIMIT,
    GCP_METADATA_LIMIT,
    _environment,
    render_fleets,
    render_user_data,
)
from tests.conftest import STACKS
from tests.needs import need_tool


def _stack_fleets():
    out = []
    for path in list_stack_files(STACKS.parent):
        config = read_stack_file(path).config
        for fleet in config.fleets:
            out.append(pytest.param(stack_name(path), fleet.name, id=f"{stack_name(path)}-{fleet.name}"))
    return out


STACK_FLEETS = _stack_fleets()


def test_stacks_are_there_to_check():
    assert STACK_FLEETS, "no stack files in stacks/: these tests would check nothing"


_cache: dict = {}


def rendered(stack: str, fleet: str):
    if stack not in _cache:
        config = read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config
        _cache[stack] = render_fleets(stack, config)
    return _cache[stack][fleet]


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_user_data_fits_its_cloud_and_encodes_exactly(stack, fleet):
    r = rendered(stack, fleet)
    assert r.document.startswith("#cloud-config\n")
    encoded = r.encoded()
    if r.cloud == "aws":
        payload = base64.b64decode(encoded, validate=True)
        assert len(payload) <= AWS_USER_DATA_LIMIT
        if len(r.raw) > AWS_USER_DATA_LIMIT:
            assert payload[:2] == b"\x1f\x8b", "over 16 KB raw must be sent gzipped"
            assert gzip.decompress(payload).decode() == r.document
        else:
            assert payload.decode() == r.document
    elif r.cloud == "gcp":
        assert encoded == r.document, "GCP metadata takes the plain text"
        assert len(encoded.encode()) <= GCP_METADATA_LIMIT
    else:
        assert len(encoded) <= AZURE_CUSTOM_DATA_LIMIT
        payload = base64.b64decode(encoded, validate=True)
        text = gzip.decompress(payload) if payload[:2] == b"\x1f\x8b" else payload
        assert text.decode() == r.document


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_every_part_lands_on_the_node_unchanged(stack, fleet):
    r = rendered(stack, fleet)
    doc = yaml.safe_load(r.document)
    written = {e["path"]: e for e in doc["write_files"]}
    for f in r.files:
        if f.part in ("trainfleet_agent.pyz", "train.py") and r.cloud == "aws":
            assert f.path not in written  # fetched from the bucket, pinned by sha256 in the fetch script
            assert any(k.endswith("/" + f.part) and t == r.parts[f.part] for k, t in r.assets.items())
            continue
        assert written[f.path]["content"] == r.parts[f.part]
        assert written[f.path]["permissions"] == f.permissions
        # the agent zipapp is base64 text that cloud-init writes decoded
        assert written[f.path].get("encoding") == ("b64" if f.part == "trainfleet_agent.pyz" else None)
    commands = [" ".join(c) for c in doc["runcmd"]]
    assert any("enable --now trainfleet-agent.service" in c for c in commands)
    assert any("enable --now trainfleet-trainer.service" in c for c in commands)
    if r.cloud == "aws":
        assert commands[0].endswith("trainfleet-fetch.py"), (
            "the fetched files must be in place before the units start"
        )


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_cloud_config_passes_cloud_inits_schema(stack, fleet, tmp_path):
    tool = need_tool("cloud-init")
    f = tmp_path / "user-data"
    f.write_text(rendered(stack, fleet).document)
    result = subprocess.run([tool, "schema", "--config-file", str(f)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Valid cloud-config" in result.stdout


def test_cloud_init_schema_check_does_reject_a_bad_document(tmp_path):
    tool = need_tool("cloud-init")
    f = tmp_path / "user-data"
    f.write_text(
        "#cloud-config\nwrite_files:\n  - path: /x\n    permissions: 644\n    content: 5\nruncmd: 7\n"
    )
    result = subprocess.run([tool, "schema", "--config-file", str(f)], capture_output=True, text=True)
    assert result.returncode != 0


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_rendered_shell_passes_shellcheck(stack, fleet, tmp_path):
    tool = need_tool("shellcheck")
    r = rendered(stack, fleet)
    for name, shell in (
        ("trainfleet-boot.sh", "bash"),
        ("trainfleet-launch.sh", "bash"),
        ("trainfleet.env", "sh"),
    ):
        f = tmp_path / name
        f.write_text(r.parts[name])
        result = subprocess.run([tool, "-s", shell, str(f)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}:\n{result.stdout}"


def test_shellcheck_does_flag_a_bad_script(tmp_path):
    tool = need_tool("shellcheck")
    f = tmp_path / "bad.sh"
    f.write_text("#!/usr/bin/env bash\nrm -rf $1/*\n")
    assert subprocess.run([tool, str(f)], capture_output=True).returncode != 0


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_python_parts_compile_and_units_are_well_formed(stack, fleet, tmp_path):
    r = rendered(stack, fleet)
    for name in ("train.py", "trainfleet-fetch.py"):
        if name in r.parts:
            f = tmp_path / name
            f.write_text(r.parts[name])
            py_compile.compile(str(f), doraise=True)
    paths = {f.path for f in r.files}
    for unit in ("trainfleet-agent.service", "trainfleet-trainer.service"):
        ini = configparser.ConfigParser(strict=False, interpolation=None)
        ini.read_string(r.parts[unit])
        assert set(ini.sections()) == {"Unit", "Service", "Install"}
        assert ini["Service"]["EnvironmentFile"] in paths
        exec_start = ini["Service"]["ExecStart"].split()
        assert exec_start[0] in paths or exec_start[2] in paths  # the script, or python3 <agent>
        if r.cloud == "aws":  # the fetched files are checked (and fetched if missing) before each start
            assert ini["Service"]["ExecStartPre"].split()[2] in {f.path for f in r.files}
        else:
            assert "ExecStartPre" not in ini["Service"]
        for var in re.findall(r"\$\{(\w+)\}", ini["Service"]["ExecStart"]):
            assert re.search(rf"^{var}=", r.parts["trainfleet.env"], re.M), var


SECRET_PATTERNS = [
    r"AKIA[0-9A-Z]{16}",
    r"ASIA[0-9A-Z]{16}",
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----",
    r"AccountKey=",
    r"SharedAccessSignature|[?&]sig=",
    r"\"private_key\"",
    r"(?i)^[A-Z_]*(SECRET|PASSWORD|ACCESS_KEY)[A-Z_]*=",
    r"(?i)(secret_access_key|secretaccesskey|client_secret)[\"']?\s*[=:]\s*[\"']?[A-Za-z0-9/+]{20,}",
]


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_no_secrets_in_user_data(stack, fleet):
    r = rendered(stack, fleet)
    for text in [r.document, *r.assets.values()]:
        for pattern in SECRET_PATTERNS:
            assert not re.search(pattern, text, re.M), pattern


def test_the_secret_scan_would_catch_a_key():
    leaked = [
        "AWS_SECRET_ACCESS_KEY=abc",
        "# AKIAABCDEFGHIJKLMNOP",
        'secret_access_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"',
        "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=Zm9v",
    ]
    for text in leaked:
        assert any(re.search(p, text, re.M) for p in SECRET_PATTERNS), text


def test_templates_are_strict_about_undefined_variables():
    env = _environment()
    assert env.undefined is jinja2.StrictUndefined
    for name in env.list_templates():
        if name.endswith(".j2"):
            with pytest.raises(jinja2.UndefinedError):
                env.get_template(name).render()


def test_an_oversized_user_data_fails_naming_the_fleet():
    config = StackConfig.from_sections(
        {
            "job": {"name": "big", "params": "1B", "tokens": "1B"},
            "fleets": [
                {
                    "name": "huge",
                    "cloud": "gcp",
                    "region": "us-central1",
                    "instance_type": "a2-highgpu-1g",
                    "nodes": 1,
                }
            ],
            # Each argument is bounded (4096 characters), their sum is not: 70 x 4000 > 256 KB.
            "launch": {"args": ["--note", *["x" * 4000] * 70]},
        }
    )
    with pytest.raises(TrainfleetError, match="fleet 'huge'.*GCP.*limit"):
        render_user_data("big", config, config.fleets[0], bucket="b", group="g")


def test_aws_assets_do_not_depend_on_the_bucket_name():
    """The Pulumi program uploads them before the bucket's final name is known."""
    config = read_stack_file(STACKS / "Pulumi.dev.yaml").config
    aws = next(f for f in config.fleets if f.cloud == "aws")
    one = render_user_data("dev", config, aws, bucket="bucket-one", group="g").assets
    two = render_user_data("dev", config, aws, bucket="bucket-two", group="g").assets
    assert one and one == two


def test_rendering_is_deterministic():
    config = read_stack_file(STACKS / "Pulumi.dev.yaml").config
    fleet = config.fleets[0]
    a = render_user_data("dev", config, fleet, bucket="b", group="g")
    b = render_user_data("dev", config, fleet, bucket="b", group="g")
    assert a.encoded() == b.encoded(), "same config, same bytes: launch templates must not churn"
    assert json.dumps(a.parts) == json.dumps(b.parts)
