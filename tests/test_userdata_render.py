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
from infra.node_env import AGENT_VENV
from infra.stack_file import list_stack_files, read_stack_file, stack_name
from infra.userdata import (
    AWS_USER_DATA_LIMIT,
    AZURE_CUSTOM_DATA_LIMIT,
    FETCHED_PARTS,
    GCP_METADATA_LIMIT,
    NODE_HOME,
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
    print(f"\n{stack}/{fleet} ({r.cloud}): {r.sizes()}")


# The limit each cloud puts on the user-data a fleet renders, and on which form (see infra/userdata.py).
LIMIT_OF = {"aws": ("payload", AWS_USER_DATA_LIMIT), "gcp": ("raw", GCP_METADATA_LIMIT),
            "azure": ("encoded", AZURE_CUSTOM_DATA_LIMIT)}  # fmt: skip


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_the_agent_is_fetched_so_user_data_keeps_room_to_grow(stack, fleet):
    """The agent zipapp and the example trainer are fetched on every cloud, never embedded: what is left is the
    small parts, well under each limit (three quarters of it at most), however much the agent grows."""
    r = rendered(stack, fleet)
    assert {"trainfleet_agent.pyz", "train.py"} <= {k.rsplit("/", 1)[-1] for k in r.assets}
    assert r.parts["trainfleet_agent.pyz"] not in r.document
    measure, limit = LIMIT_OF[r.cloud]
    size = r.sizes()[measure]
    print(f"\n{stack}/{fleet} ({r.cloud}): {measure} {size} of {limit} bytes ({100 * size / limit:.0f}%)")
    assert size <= limit * 3 // 4, r.sizes()


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_every_part_lands_on_the_node_unchanged(stack, fleet):
    r = rendered(stack, fleet)
    doc = yaml.safe_load(r.document)
    written = {e["path"]: e for e in doc["write_files"]}
    for f in r.files:
        if f.part in FETCHED_PARTS:  # on every cloud
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
    assert commands[0].endswith("trainfleet-fetch.py"), "the fetched files must be in place before the units start"


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_cloud_config_passes_cloud_inits_schema(stack, fleet, tmp_path):
    tool = need_tool("cloud-init")
    f = tmp_path / "user-data"
    f.write_text(rendered(stack, fleet).document)
    result = subprocess.run([tool, "schema", "--config-file", str(f)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Valid cloud-config" in result.stdout


def _cloud_init_stages() -> list[list[str]]:
    """cloud-init's own module order, from the cloud.cfg it installs: the init stage's modules, then the config
    stage's, then the final stage's, each run in the order listed (https://docs.cloud-init.io/en/latest/explanation/boot.html)."""
    from pathlib import Path

    need_tool("cloud-init")
    cfg = yaml.safe_load(Path("/etc/cloud/cloud.cfg").read_text())

    def name(entry) -> str:
        entry = entry[0] if isinstance(entry, list) else entry
        return str(entry).replace("-", "_")

    return [[name(e) for e in cfg[key]] for key in ("cloud_init_modules", "cloud_config_modules", "cloud_final_modules")]


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_the_state_folder_goes_on_the_local_disk_after_cloud_init_mounted_it(stack, fleet):
    """Azure's resource disk is formatted and mounted at /mnt by cloud-init's disk_setup and mounts modules. bootcmd
    runs before them, in the same stage, so a link made there never finds /mnt mounted; runcmd's script runs in a
    later stage (scripts_user), after every mount, and before the units start there."""
    stages = _cloud_init_stages()
    where = {m: (i, stage.index(m)) for i, stage in enumerate(stages) for m in stage}
    assert where["bootcmd"] < where["disk_setup"] < where["mounts"], "bootcmd comes before the mounts"
    assert where["mounts"][0] < where["runcmd"][0] and where["mounts"][0] < where["scripts_user"][0]
    r = rendered(stack, fleet)
    doc = yaml.safe_load(r.document)
    assert not any("trainfleet-local-disk" in c for c in doc.get("bootcmd", [])), "before /mnt is mounted"
    commands = [" ".join(c) for c in doc["runcmd"]]
    enable = next(i for i, c in enumerate(commands) if c.startswith("systemctl enable"))
    state = next(i for i, c in enumerate(commands) if c.startswith("mkdir -p /var/lib/trainfleet/checkpoints"))
    assert state < enable, "the state folder exists before the units start"
    link = [i for i, c in enumerate(commands) if "trainfleet-local-disk" in c]
    if r.cloud == "gcp":
        assert link == []
    else:
        mount = {"aws": "[ -d /opt/dlami/nvme ]", "azure": "mountpoint -q /mnt"}[r.cloud]
        assert len(link) == 1 and mount in commands[link[0]]
        assert link[0] < state, "linked before mkdir creates the folder on the root disk"


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
        # the boot script, or the agent venv's python running the agent zipapp
        assert exec_start[0] in paths or (exec_start[0] == f"{AGENT_VENV}/bin/python" and exec_start[1] in paths)
        # before each start, every cloud: the fetched files are checked (and fetched if missing); the agent's
        # venv is built if it is not there yet. Each step is one of the node's own files.
        pre = [line.split("=", 1)[1].split() for line in r.parts[unit].splitlines() if line.startswith("ExecStartPre=")]
        assert any(argv[:3] == ["/usr/bin/env", "python3", f"{NODE_HOME}/trainfleet-fetch.py"] for argv in pre), pre
        assert all(set(argv[1:3]) & paths for argv in pre), pre
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


@pytest.mark.parametrize("stack", ["dev", "gcp-dev", "azure-dev"])
def test_assets_do_not_depend_on_the_bucket_name(stack):
    """The Pulumi program uploads them before the bucket's final name is known, on every cloud."""
    config = read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config
    fleet = config.fleets[0]
    one = render_user_data(stack, config, fleet, bucket="bucket-one", group="g").assets
    two = render_user_data(stack, config, fleet, bucket="acct/bucket-two", group="g", assets_bucket="a/files").assets
    assert one and one == two


@pytest.mark.parametrize("stack", ["dev", "gcp-dev", "azure-dev"])
def test_the_fetch_script_reads_the_assets_bucket(stack):
    """Azure's node files live in an account of their own (infra/azure/node_files.py); elsewhere in the
    checkpoint bucket. The fetch script's BUCKET is where the node fetches from; the env file keeps the
    checkpoint bucket."""
    config = read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config
    fleet = config.fleets[0]
    same = render_user_data(stack, config, fleet, bucket="ck/pt", group="g")
    other = render_user_data(stack, config, fleet, bucket="ck/pt", group="g", assets_bucket="nf/node-files")
    assert re.search(r'^BUCKET = "ck/pt"$', same.parts["trainfleet-fetch.py"], re.M)
    assert re.search(r'^BUCKET = "nf/node-files"$', other.parts["trainfleet-fetch.py"], re.M)
    assert "TRAINFLEET_BUCKET=ck/pt" in other.parts["trainfleet.env"]


def test_rendering_is_deterministic():
    config = read_stack_file(STACKS / "Pulumi.dev.yaml").config
    fleet = config.fleets[0]
    a = render_user_data("dev", config, fleet, bucket="b", group="g")
    b = render_user_data("dev", config, fleet, bucket="b", group="g")
    assert a.encoded() == b.encoded(), "same config, same bytes: launch templates must not churn"
    assert json.dumps(a.parts) == json.dumps(b.parts)


def _env_values(text: str) -> dict[str, str]:
    """The env file as bash reads it: source it, print the two elastic variables."""
    script = '. /dev/stdin; printf \'%s\\n%s\\n\' "$TRAINFLEET_ELASTIC_MIN_NODES" "$TRAINFLEET_ELASTIC_WAIT_SECONDS"'
    out = subprocess.run(["bash", "-c", script], input=text, capture_output=True, text=True, check=True).stdout
    least, wait = out.splitlines()
    return {"min_nodes": least, "wait": wait}


def _int(env: str, key: str) -> int:
    match = re.search(rf"^{key}=(\d+)$", env, re.M)
    assert match, key
    return int(match.group(1))


def test_the_env_file_carries_elastic_recovery_or_zeros():
    """checkpoint.elastic reaches the node as two env lines (through shq, read the same by bash and systemd):
    min_nodes and the wait in whole seconds; 0 and 0 when the stack does not set it."""
    config = read_stack_file(STACKS / "Pulumi.prod.yaml").config  # 4 nodes, grad_accum 8: shrinks to 2
    fleet = config.fleets[0]
    plain = render_user_data("prod", config, fleet, bucket="b", group="g").parts["trainfleet.env"]
    assert re.search(r"^TRAINFLEET_ELASTIC_MIN_NODES=0$", plain, re.M)
    assert re.search(r"^TRAINFLEET_ELASTIC_WAIT_SECONDS=0$", plain, re.M)
    assert _env_values(plain) == {"min_nodes": "0", "wait": "0"}
    sections = config.to_sections()
    sections["checkpoint"]["elastic"] = {"min_nodes": 2, "wait_for_replacement_s": 599.6}
    elastic = StackConfig.from_sections(sections)
    env = render_user_data("prod", elastic, elastic.fleets[0], bucket="b", group="g").parts["trainfleet.env"]
    assert re.search(r"^TRAINFLEET_ELASTIC_MIN_NODES=2$", env, re.M)
    assert re.search(r"^TRAINFLEET_ELASTIC_WAIT_SECONDS=600$", env, re.M)  # rounded to a whole second
    assert _env_values(env) == {"min_nodes": "2", "wait": "600"}
    def others(text):
        # the disk need grows with elastic recovery (the whole checkpoint a resize restores, and its conversion:
        # infra/disk_need.py), the stop grace and the commit wait with the larger part of a shrunk job
        own = ("TRAINFLEET_ELASTIC_", "TRAINFLEET_DISK_NEEDED_BYTES=", "TRAINFLEET_STOP_GRACE_SECONDS=",
               "TRAINFLEET_COMMIT_WAIT_SECONDS=")  # fmt: skip
        return [line for line in text.splitlines() if not line.startswith(own)]

    assert others(env) == others(plain)  # nothing else changes
    assert _int(env, "TRAINFLEET_DISK_NEEDED_BYTES") > _int(plain, "TRAINFLEET_DISK_NEEDED_BYTES")
