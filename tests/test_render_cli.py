"""`trainfleet render`: run as a user would, for every stack in stacks/, and checked against what nobody
here computed: golden files read and reviewed by a person (tests/fixtures/render/, see REVIEWED.md there),
values written by hand from the stack files and the catalog, and the template files copied verbatim.

Regenerate the golden files after an intended change with TRAINFLEET_REGEN_GOLDEN=1, then read the diff
before committing it; under CI that variable is refused."""

from __future__ import annotations

import base64
import difflib
import gzip
import hashlib
import json
import os

import pytest
import yaml

from infra.stack_file import list_stack_files, read_stack_file, stack_name
from tests.conftest import REPO, STACKS, assert_one_line_error, run_trainfleet
from tests.needs import in_ci

STACK_NAMES = [stack_name(p) for p in list_stack_files(STACKS.parent)]
GOLDEN = REPO / "tests" / "fixtures" / "render"
REGENERATE = os.environ.get("TRAINFLEET_REGEN_GOLDEN") == "1"

# The small, reviewable parts whose every line matters in a review; golden files under GOLDEN/<stack>/<fleet>/.
GOLDEN_PARTS = (
    "trainfleet.env",
    "ds_config.json",
    "trainfleet-launch.sh",
    "trainfleet-trainer.service",
    "trainfleet-agent.service",
    "model.json",
)
# Parts that are template files shipped as they are.
COPIED_VERBATIM = {
    "train.py": "templates/train.py",
    "trainfleet_model.py": "templates/trainfleet_model.py",
    "trainfleet_tokens.py": "templates/trainfleet_tokens.py",
}

# stack -> (fleet, cloud), from stacks/Pulumi.<stack>.yaml.
FLEETS = {
    "dev": ("dev", "aws"),
    "prod": ("main", "aws"),
    "gaudi": ("gaudi", "aws"),
    "gcp-dev": ("gdev", "gcp"),
    "azure-dev": ("adev", "azure"),
}

# What `--out` holds for one fleet, per cloud. The agent, the training script, the boot script and the resize
# script do not fit in AWS's 16 KB of user-data nor (with room to grow) in Azure's 64 KB of custom data, so on
# every cloud they are fetched from the bucket at boot (assets.json + trainfleet-fetch.py).
COMMON_FILES = [
    "SUMMARY.json",
    "parts/ds_config.json",
    "parts/model.json",
    "parts/train.py",
    "parts/trainfleet-agent.service",
    "parts/trainfleet-boot.sh",
    "parts/trainfleet-launch.sh",
    "parts/trainfleet-resize.py",
    "parts/trainfleet_model.py",
    "parts/trainfleet_tokens.py",
    "parts/trainfleet-trainer.service",
    "parts/trainfleet.env",
    "parts/trainfleet_agent.pyz",
    "user-data",
    "user-data.encoded",
]
OUT_FILES = {
    "aws": sorted([*COMMON_FILES, "assets.json", "parts/trainfleet-fetch.py"]),
    "gcp": sorted([*COMMON_FILES, "assets.json", "parts/trainfleet-fetch.py"]),
    "azure": sorted([*COMMON_FILES, "assets.json", "parts/trainfleet-fetch.py"]),
}

# The env file's values that say which job this node belongs to, by hand from each stack file (job.name,
# fleets[0], checkpoint) and the catalog's accelerators per node (offers.csv: g5.12xlarge 4 x A10G,
# p4de.24xlarge 8 x A100-80GB, dl1.24xlarge 8 x Gaudi-HL205, a2-highgpu-1g 1 x A100-40GB,
# Standard_NC24ads_A100_v4 1 x A100-80GB). Group names: tf-<stack>-<fleet>.
ENV_VALUES = {
    "dev": dict(STACK="dev", JOB="llama-1b-dev", FLEET="dev", CLOUD="aws", REGION="us-east-1",
                PREFIX="dev/llama-1b-dev/dev", GROUP="tf-dev-dev", NODES="1", SLOTS="4",
                ACCELERATOR="A10G", INTERVAL_MINUTES="20", KEEP_LAST="2"),
    "prod": dict(STACK="prod", JOB="llama-13b", FLEET="main", CLOUD="aws", REGION="us-east-1",
                 PREFIX="prod/llama-13b/main", GROUP="tf-prod-main", NODES="4", SLOTS="8",
                 ACCELERATOR="A100-80GB", INTERVAL_MINUTES="30", KEEP_LAST="3"),
    "gaudi": dict(STACK="gaudi", JOB="llama-7b-gaudi", FLEET="gaudi", CLOUD="aws", REGION="us-west-2",
                  PREFIX="gaudi/llama-7b-gaudi/gaudi", GROUP="tf-gaudi-gaudi", NODES="2", SLOTS="8",
                  ACCELERATOR="Gaudi-HL205", INTERVAL_MINUTES="30", KEEP_LAST="2", DS_ACCELERATOR="hpu"),
    "gcp-dev": dict(STACK="gcp-dev", JOB="llama-1b-gcp", FLEET="gdev", CLOUD="gcp", REGION="us-central1",
                    PREFIX="gcp-dev/llama-1b-gcp/gdev", NODES="1", SLOTS="1", ACCELERATOR="A100-40GB",
                    GROUP="projects/REPLACE-ME-project/regions/us-central1/instanceGroupManagers/tf-gcp-dev-gdev",
                    INTERVAL_MINUTES="20", KEEP_LAST="2"),
    "azure-dev": dict(STACK="azure-dev", JOB="llama-1b-azure", FLEET="adev", CLOUD="azure", REGION="eastus",
                      PREFIX="azure-dev/llama-1b-azure/adev", GROUP="tf-azure-dev-adev", NODES="1",
                      SLOTS="1", ACCELERATOR="A100-80GB", INTERVAL_MINUTES="20", KEEP_LAST="2"),
}  # fmt: skip

# Every node launches its own ranks, no ssh; the script gets the ds_config copied into the run dir.
LAUNCH_COMMAND = """exec deepspeed --hostfile "$hostfile" --no_ssh --node_rank "$node_rank" \\
  --master_addr "$master_addr" --master_port "$TRAINFLEET_MASTER_PORT" \\
  "$TRAINFLEET_SCRIPT" --deepspeed_config "$ds_config" "${script_args[@]}"
"""

# cloud-config write_files: path -> (part, permissions); owner root:root for all.
WRITE_FILES = {
    "/etc/trainfleet/trainfleet.env": ("trainfleet.env", "0644"),
    "/etc/trainfleet/ds_config.json": ("ds_config.json", "0644"),
    "/etc/trainfleet/model.json": ("model.json", "0644"),
    "/opt/trainfleet/trainfleet-launch.sh": ("trainfleet-launch.sh", "0755"),
    "/etc/systemd/system/trainfleet-agent.service": ("trainfleet-agent.service", "0644"),
    "/etc/systemd/system/trainfleet-trainer.service": ("trainfleet-trainer.service", "0644"),
}
FETCHED = {"/opt/trainfleet/trainfleet-fetch.py": ("trainfleet-fetch.py", "0755")}
ENABLE_UNITS = [
    ["systemctl", "daemon-reload"],
    ["systemctl", "enable", "--now", "trainfleet-agent.service"],
    ["systemctl", "enable", "--now", "trainfleet-trainer.service"],
]
# The state folder: linked onto the fast local disk where there is one (AWS DLAMI NVMe, Azure's resource disk
# at /mnt, mounted by cloud-init's mounts module, which runs after bootcmd and before runcmd), then created.
LINK = 'if {} && [ ! -e "$1" ]; then mkdir -p "$2" && ln -sfn "$2" "$1"; fi'
STATE_DIRS = ["mkdir", "-p", "/var/lib/trainfleet/checkpoints", "/var/lib/trainfleet/run"]
RUNCMD = {
    "aws": [
        ["python3", "/opt/trainfleet/trainfleet-fetch.py"],
        ["sh", "-c", LINK.format("[ -d /opt/dlami/nvme ]"), "trainfleet-local-disk", "/var/lib/trainfleet",
         "/opt/dlami/nvme/trainfleet"],
        STATE_DIRS,
        *ENABLE_UNITS,
    ],
    "gcp": [["python3", "/opt/trainfleet/trainfleet-fetch.py"], STATE_DIRS, *ENABLE_UNITS],
    "azure": [
        ["python3", "/opt/trainfleet/trainfleet-fetch.py"],
        ["sh", "-c", LINK.format("mountpoint -q /mnt"), "trainfleet-local-disk", "/var/lib/trainfleet",
         "/mnt/trainfleet"],
        STATE_DIRS,
        *ENABLE_UNITS,
    ],
}  # fmt: skip
# What limits each cloud's user-data, and on which form (AWS: 16 KB payload; GCP: 256 KB metadata value;
# Azure: 64 KB base64 customData).
LIMITS = {"aws": ("payload", 16 * 1024), "gcp": ("raw", 256 * 1024), "azure": ("encoded", 64 * 1024)}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, tuple]:
    """stack -> (out folder, summaries) of one `trainfleet render --json` per stack."""
    out = {}
    for stack in STACK_NAMES:
        folder = tmp_path_factory.mktemp(f"render-{stack}")
        result = run_trainfleet("render", "--stack", stack, "--out", str(folder), "--json")
        assert result.code == 0, result.stderr
        out[stack] = (folder, result.json())
    return out


def _fleet_folder(rendered, stack: str):
    out, _ = rendered[stack]
    return out / FLEETS[stack][0]


def _env(text: str) -> dict[str, str]:
    """KEY=value lines; a value in POSIX single quotes is unquoted (it holds no quote itself here)."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value[1:-1] if value.startswith("'") else value
    return values


def test_every_stack_has_its_expectations():
    assert sorted(STACK_NAMES) == sorted(FLEETS) == sorted(ENV_VALUES)


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_out_holds_exactly_the_files_of_each_fleet(rendered, stack):
    out, summaries = rendered[stack]
    fleet, cloud = FLEETS[stack]
    assert sorted(p.name for p in out.iterdir()) == [fleet]
    files = sorted(p.relative_to(out / fleet).as_posix() for p in (out / fleet).rglob("*") if p.is_file())
    assert files == OUT_FILES[cloud]
    assert [(s["stack"], s["fleet"], s["cloud"]) for s in summaries] == [(stack, fleet, cloud)]


@pytest.mark.parametrize("part", GOLDEN_PARTS)
@pytest.mark.parametrize("stack", STACK_NAMES)
def test_parts_match_the_reviewed_golden_files(rendered, stack, part):
    actual = (_fleet_folder(rendered, stack) / "parts" / part).read_text()
    golden = GOLDEN / stack / FLEETS[stack][0] / part
    if REGENERATE:
        if in_ci():
            pytest.fail("TRAINFLEET_REGEN_GOLDEN=1 is never on in CI: golden files change only by review")
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(actual)
        pytest.skip(f"regenerated {golden.relative_to(REPO)}: read its diff before committing")
    expected = golden.read_text()
    if actual != expected:
        diff = difflib.unified_diff(
            expected.splitlines(keepends=True),
            actual.splitlines(keepends=True),
            fromfile=f"golden {golden.relative_to(REPO)}",
            tofile=f"rendered {stack}/{part}",
        )
        pytest.fail(
            "rendered part differs from its golden file (after an intended change: "
            "TRAINFLEET_REGEN_GOLDEN=1, then review the diff):\n" + "".join(diff),
            pytrace=False,
        )


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_env_file_holds_this_stacks_values(rendered, stack):
    env = _env((_fleet_folder(rendered, stack) / "parts" / "trainfleet.env").read_text())
    expected = {
        ("" if key.startswith("DS_") else "TRAINFLEET_") + key: v for key, v in ENV_VALUES[stack].items()
    }
    assert {k: env.get(k) for k in expected} == expected
    assert env["TRAINFLEET_BUCKET"].startswith("REPLACE-ME-")  # the real name exists only after `pulumi up`


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_launch_script_runs_deepspeed_for_this_node_only(rendered, stack):
    text = (_fleet_folder(rendered, stack) / "parts" / "trainfleet-launch.sh").read_text()
    fleet, _ = FLEETS[stack]
    accelerator, slots = ENV_VALUES[stack]["ACCELERATOR"], ENV_VALUES[stack]["SLOTS"]
    assert text.splitlines()[:2] == [
        "#!/usr/bin/env bash",
        f"# trainfleet DeepSpeed launch for stack {stack}, fleet {fleet} ({accelerator}, {slots} per node).",
    ]
    assert text.endswith(LAUNCH_COMMAND)


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_cloud_config_writes_the_parts_and_starts_the_units(rendered, stack):
    folder = _fleet_folder(rendered, stack)
    _, cloud = FLEETS[stack]
    document = (folder / "user-data").read_text()
    assert document.startswith("#cloud-config\n")
    config = yaml.safe_load(document)
    expected_files = {**WRITE_FILES, **FETCHED}  # the agent and train.py: fetched, on every cloud
    written = {f["path"]: f for f in config["write_files"]}
    assert sorted(written) == sorted(expected_files)
    for path, (part, permissions) in expected_files.items():
        entry = written[path]
        assert (entry["owner"], entry["permissions"]) == ("root:root", permissions), path
        assert entry["content"] == (folder / "parts" / part).read_text(), path
    assert config["runcmd"] == RUNCMD[cloud]
    for part, template in COPIED_VERBATIM.items():
        assert (folder / "parts" / part).read_text() == (REPO / template).read_text(), part


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_encoded_user_data_decodes_to_the_document_within_the_limit(rendered, stack):
    folder = _fleet_folder(rendered, stack)
    _, cloud = FLEETS[stack]
    document = (folder / "user-data").read_bytes()
    encoded = (folder / "user-data.encoded").read_bytes()
    payload = encoded if cloud == "gcp" else base64.b64decode(encoded, validate=True)  # GCP metadata: plain
    gzipped = payload[:2] == b"\x1f\x8b"
    assert (gzip.decompress(payload) if gzipped else payload) == document
    measure, limit = LIMITS[cloud]
    measured = {"raw": len(document), "payload": len(payload), "encoded": len(encoded)}[measure]
    assert measured <= limit
    summary = json.loads((folder / "SUMMARY.json").read_text())
    assert (summary["raw_bytes"], summary["encoded_bytes"], summary["gzipped"]) == (
        len(document),
        len(encoded),
        gzipped,
    )
    assert (summary["limit_bytes"], summary["headroom_bytes"]) == (limit, limit - measured)
    assert summary["parts"] == sorted(p.name for p in (folder / "parts").iterdir())


@pytest.mark.parametrize("stack", STACK_NAMES)
def test_assets_are_the_parts_fetched_at_boot_pinned_by_sha256(rendered, stack):
    folder = _fleet_folder(rendered, stack)
    assets = json.loads((folder / "assets.json").read_text())
    fetch = (folder / "parts" / "trainfleet-fetch.py").read_text()
    prefix = ENV_VALUES[stack]["PREFIX"] + "/_node/"
    fetched = ["train.py", "trainfleet-boot.sh", "trainfleet-resize.py", "trainfleet_agent.pyz", "trainfleet_model.py",
               "trainfleet_tokens.py"]  # fmt: skip
    assert sorted(a["key"].rsplit("/", 1)[-1] for a in assets) == fetched
    for a in assets:
        text = (folder / "parts" / a["key"].rsplit("/", 1)[-1]).read_bytes()
        digest = hashlib.sha256(text).hexdigest()
        assert (a["sha256"], a["bytes"]) == (digest, len(text))
        assert a["key"] == f"{prefix}{digest[:16]}/{a['key'].rsplit('/', 1)[-1]}"
        assert digest in fetch


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
