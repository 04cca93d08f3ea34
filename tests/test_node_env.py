"""The training environment on every node (infra/node_env.py): pinned PyTorch and DeepSpeed in a venv.

What every stack renders (the pins, the venv, no pip into a system Python, the launcher from the venv), then the
rendered boot script's `build_env` run for real by bash against stand-in images: an "image python" (a venv made
here, its own pip left out) holding a fake `torch` package with a chosen `__version__`, and a local wheelhouse
(`PIP_NO_INDEX`, `PIP_FIND_LINKS`) of tiny wheels built here (`deepspeed==0.19.8` with its launcher script, a
`torch`). This tests the script's logic, no CUDA: which python the venv is built on, what pip puts where, that a
version other than the pin stops the boot with one clear line, and that the image's site-packages stay as they
were. Also: the mocked AMI lookup's `include_deprecated`, and the rule that warns about AMI name filters that
could pick a deprecated image.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from infra import node_env
from infra.aws import fleet as aws_fleet
from infra.azure import fleet as azure_fleet
from infra.config import StackConfig
from infra.gcp import fleet as gcp_fleet
from infra.mock_runtime import (
    DEFAULT_IMAGES,
    AmiLookupError,
    Invocation,
    MockImage,
    ProgramRun,
    _describe_image,
    run_program,
)
from infra.rules import check as check_rules
from infra.rules.images import RULE as IMAGE_RULE
from infra.stack_file import read_stack_file
from infra.userdata import NODE_ETC, NODE_HOME, NODE_STATE, is_gaudi, render_fleets, render_user_data
from tests.conftest import STACKS
from tests.needs import need_module
from tests.test_published_images import USER_GAUDI_AMI
from tests.test_userdata_render import STACK_FLEETS  # every (stack, fleet) in stacks/

# The account's own Gaudi image, built and named as infra/aws/gaudi.py says (tests/fixtures/aws_amis/images.json).
USER_IMAGE = MockImage(
    USER_GAUDI_AMI, "trainfleet-gaudi-1.18.0-20261120", "123456789012", None, "x86_64", "available",
    "2026-11-20T00:00:00.000Z", "/dev/sda1", regions=("us-west-2",),
)  # fmt: skip

REPO = Path(__file__).resolve().parent.parent


_rendered: dict = {}


def rendered(stack: str, fleet: str):
    if stack not in _rendered:
        config = read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config
        _rendered[stack] = (config, render_fleets(stack, config))
    config, fleets = _rendered[stack]
    return next(f for f in config.fleets if f.name == fleet), fleets[fleet]


def env_values(env_text: str, tmp_path: Path) -> dict[str, str]:
    """trainfleet.env as bash reads it (the scripts source it)."""
    f = tmp_path / "read.env"
    f.write_text(env_text)
    out = subprocess.run(
        ["bash", "-c", 'set -a; . "$1"; env -0', "bash", str(f)],
        capture_output=True, env={"PATH": "/usr/bin:/bin"}, timeout=30, check=True,
    ).stdout.decode()  # fmt: skip
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def test_the_stacks_cover_every_cloud_and_gaudi():
    clouds = {rendered(s, f)[0].cloud for s, f in (p.values for p in STACK_FLEETS)}
    assert clouds == {"aws", "gcp", "azure"}
    assert any(is_gaudi(rendered(s, f)[0]) for s, f in (p.values for p in STACK_FLEETS))


# ------------------------------------------------------------------------------ what every stack renders


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_every_node_is_pinned_to_node_envs_versions(stack, fleet, tmp_path):
    f, r = rendered(stack, fleet)
    image = node_env.node_image(f.cloud, is_gaudi(f))
    env = env_values(r.parts["trainfleet.env"], tmp_path)
    assert env["TRAINFLEET_VENV"] == node_env.VENV == "/opt/trainfleet/venv"
    assert env["TRAINFLEET_TORCH_VERSION"] == image.torch_version
    assert env["TRAINFLEET_DEEPSPEED_VERSION"] == image.deepspeed_version
    assert env["TRAINFLEET_DEEPSPEED_SPEC"] == image.deepspeed_spec
    assert env["TRAINFLEET_TORCH_SPEC"] == image.torch_spec
    assert env["TRAINFLEET_IMAGE_PYTHONS"].split() == list(image.pythons)
    if is_gaudi(f):  # Habana's builds, from the Intel Gaudi software release the image carries
        assert (env["TRAINFLEET_TORCH_VERSION"], env["TRAINFLEET_TORCH_SPEC"]) == ("2.4.0a0", "")
        assert env["TRAINFLEET_DEEPSPEED_SPEC"].endswith("HabanaAI/DeepSpeed.git@1.18.0")
    else:  # exact pins, the same on every cloud
        assert env["TRAINFLEET_TORCH_SPEC"] == f"torch=={node_env.TORCH_VERSION}" == "torch==2.13.0"
        assert (
            env["TRAINFLEET_DEEPSPEED_SPEC"]
            == f"deepspeed=={node_env.DEEPSPEED_VERSION}"
            == "deepspeed==0.19.8"
        )
    # Nowhere in what the node receives is there another torch or deepspeed requirement ("latest", a range).
    texts = [r.document, *r.assets.values()]
    for text in texts:
        for spec in re.findall(r"\b(?:torch|deepspeed)\s*(?:[=<>~!]=|[<>])\s*[\w.*+]+", text):
            assert spec in (image.torch_spec, image.deepspeed_spec), spec


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_nothing_pip_installs_into_a_system_python(stack, fleet):
    _, r = rendered(stack, fleet)
    for text in (r.document, *r.assets.values()):
        assert "--break-system-packages" not in text
        assert not re.search(r"\bsudo\s+(?:-\S+\s+)*pip", text)
        assert not re.search(r"(?m)^\s*pip3?\s+install|[;&|]\s*pip3?\s+install", text)
        assert not re.search(r"python3?(?:\.\d+)?\s+-m\s+pip\b", text)
        # Every pip there is, is a venv's own: the training venv's, or the agent's.
        for interpreter in re.findall(r"(\S+)\s+-m\s+pip\b", text):
            assert interpreter in ('"$VPY"', '"$AGENT_PY"'), interpreter
    boot = r.parts["trainfleet-boot.sh"]
    assert 'VPY="$VENV/bin/python"' in boot and 'VENV="$TRAINFLEET_VENV"' in boot
    assert 'AGENT_PY="${TRAINFLEET_AGENT_PYTHON:-$TRAINFLEET_AGENT_VENV/bin/python}"' in boot


def test_the_agents_pins_are_the_versions_its_tests_run():
    """infra/node_env.py AGENT_REQUIREMENTS: every SDK a node installs for the agent is, exactly, the version
    installed here, where the agent's tests run against moto, the GCS emulator and Azurite."""
    from importlib.metadata import version

    for cloud, pins in node_env.AGENT_REQUIREMENTS.items():
        assert pins, cloud
        for pin in pins:
            name, _, pinned = pin.partition("==")
            assert pinned and version(name) == pinned, (cloud, pin, version(name))


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_a_node_installs_only_its_own_clouds_sdks(stack, fleet, tmp_path):
    f, r = rendered(stack, fleet)
    pins = env_values(r.parts["trainfleet.env"], tmp_path)["TRAINFLEET_AGENT_REQUIREMENTS"].split()
    assert pins == list(node_env.AGENT_REQUIREMENTS[f.cloud])
    sdk = {"aws": "boto3==", "gcp": "google-cloud-storage==", "azure": "azure-storage-blob=="}
    assert [c for c, m in sdk.items() if any(p.startswith(m) for p in pins)] == [f.cloud]


@pytest.mark.parametrize("stack,fleet", STACK_FLEETS)
def test_the_trainer_runs_from_the_venv(stack, fleet):
    _, r = rendered(stack, fleet)
    unit = r.parts["trainfleet-trainer.service"]
    (path,) = re.findall(r"(?m)^Environment=PATH=(\S+)$", unit)
    assert path.split(":")[0] == f"{node_env.VENV}/bin"
    assert not re.search(r"conda|/opt/pytorch", path), "no image environment on the trainer's PATH"
    assert f"Environment=VIRTUAL_ENV={node_env.VENV}" in unit
    launch = r.parts["trainfleet-launch.sh"]
    assert launch.index('PATH="$TRAINFLEET_VENV/bin:$PATH"') < launch.index("exec deepspeed ")
    boot = r.parts["trainfleet-boot.sh"]
    assert boot.index("if ! build_env; then exit 1; fi") < boot.index(
        'setsid "$TRAINFLEET_HOME/trainfleet-launch.sh"'
    )


def test_the_fleets_boot_the_pinned_images():
    """Published images with the driver and no PyTorch of the pin's (tests/test_published_images.py): the nodes
    install the pinned torch."""
    minor = node_env.TORCH_MINOR
    assert node_env.TORCH_VERSION.startswith(minor + ".")
    assert aws_fleet.GPU_AMI_NAME == node_env.AWS_GPU_AMI_NAME
    assert node_env.AWS_GPU_AMI_NAME == "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 24.04) *"
    assert gcp_fleet.DL_IMAGE.endswith("/family/common-cu129-ubuntu-2404-nvidia-580")
    image = azure_fleet.DEFAULT_IMAGE
    assert (image.publisher, image.offer, image.sku, image.version) == node_env.AZURE_HPC_IMAGE
    assert node_env.node_image("azure").pythons == ("python3",)  # no PyTorch there: the pin gets installed


def test_the_pins_are_the_versions_this_repo_tests_with():
    """The planner's ZeRO memory model is DeepSpeed 0.19's; the e2e run (pyproject `e2e`, .ci/run) uses these
    very releases on CPU. A bump of either pin must come with those."""
    import tomllib

    from packaging.specifiers import SpecifierSet

    import cli.planner.memory as memory

    ds_minor = ".".join(node_env.DEEPSPEED_VERSION.split(".")[:2])
    assert f"DeepSpeed {ds_minor}" in (memory.__doc__ or "")
    e2e = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["e2e"]
    assert f"torch=={node_env.TORCH_VERSION}" in e2e
    (ds,) = [spec for spec in e2e if spec.startswith("deepspeed")]
    assert node_env.DEEPSPEED_VERSION in SpecifierSet(ds.removeprefix("deepspeed"))
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    installed = {name: importlib.metadata.version(name) for name in ("torch", "deepspeed")}
    assert installed["deepspeed"] == node_env.DEEPSPEED_VERSION, (
        f"this machine tests deepspeed {installed['deepspeed']}, nodes get {node_env.DEEPSPEED_VERSION}: "
        "align infra/node_env.py with the e2e install"
    )
    assert installed["torch"].split("+")[0] == node_env.TORCH_VERSION


# ------------------------------------------------------------- build_env, run by bash on stand-in images


def make_wheel(wheelhouse: Path, name: str, version: str, files: dict[str, str], scripts=None) -> Path:
    """A minimal pure-Python wheel (PEP 427): the files, METADATA, WHEEL and a RECORD with their sha256."""
    dist = f"{name}-{version}.dist-info"
    entries = dict(files)
    for script, text in (scripts or {}).items():
        entries[f"{name}-{version}.data/scripts/{script}"] = text
    entries[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    entries[f"{dist}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: trainfleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = []
    for path, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    entries[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    whl = wheelhouse / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for path, text in entries.items():
            z.writestr(path, text)
    return whl


# DeepSpeed's launcher as its bin/deepspeed script has it; the fake runner records who ran it, and how.
DS_SCRIPT = "#!python\nfrom deepspeed.launcher.runner import main\n\nif __name__ == '__main__':\n    main()\n"
DS_RUNNER = (
    "import json, os, sys\n\n\ndef main():\n"
    "    with open(os.environ['FAKE_DS_OUT'], 'w') as fh:\n"
    "        json.dump({'python': sys.executable, 'prefix': sys.prefix, 'argv': sys.argv[1:]}, fh)\n"
)


def fake_deepspeed(version: str) -> dict[str, str]:
    return {
        "deepspeed/__init__.py": f"__version__ = {version!r}\n",
        "deepspeed/launcher/__init__.py": "",
        "deepspeed/launcher/runner.py": DS_RUNNER,
    }


def fake_torch(version: str) -> dict[str, str]:
    return {"torch/__init__.py": f"__version__ = {version!r}\n"}


@pytest.fixture
def wheelhouse(tmp_path) -> Path:
    """What the node's pip can reach: the pinned DeepSpeed and torch (and a DeepSpeed it must not take)."""
    wh = tmp_path / "wheelhouse"
    make_wheel(wh, "deepspeed", "0.19.8", fake_deepspeed("0.19.8"), {"deepspeed": DS_SCRIPT})
    make_wheel(wh, "torch", "2.13.0", fake_torch("2.13.0"))
    make_wheel(wh, "setuptools", "80.0.0", {"setuptools/__init__.py": ""})  # a venv on Python 3.12+ has none
    return wh


def make_image(root: Path, torch: str | None, deepspeed: str | None = None, pip: bool = False) -> Path:
    """An image's PyTorch python: a venv (as a DLAMI's /opt/pytorch is), with or without pip, holding a fake
    torch (and DeepSpeed)."""
    subprocess.run(
        [sys.executable, "-m", "venv", *([] if pip else ["--without-pip"]), str(root)],
        check=True,
        timeout=120,
    )
    (site,) = root.glob("lib/python*/site-packages")
    for name, version, files in (("torch", torch, fake_torch), ("deepspeed", deepspeed, fake_deepspeed)):
        if not version:
            continue
        for path, text in files(version).items():
            (site / path).parent.mkdir(parents=True, exist_ok=True)
            (site / path).write_text(text)
        info = site / f"{name}-{version}.dist-info"  # as pip (or conda's pip build) leaves it
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return root / "bin" / "python3"


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root, with its size and mtime; Python's own bytecode caches (written on import) aside."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


class Node:
    """One node's rendered files under `root`, its trainfleet.env pointing at stand-in image pythons."""

    def __init__(self, root: Path, r, pythons: list[Path | str], wheelhouse: Path):
        self.root, self.venv = root, root / "opt" / "venv"
        for d in ("opt", "etc", "state/run", "bin", "home"):
            (root / d).mkdir(parents=True, exist_ok=True)

        def moved(text: str) -> str:
            return (
                text.replace(NODE_HOME, str(root / "opt"))
                .replace(NODE_ETC, str(root / "etc"))
                .replace(NODE_STATE, str(root / "state"))
            )

        env = moved(r.parts["trainfleet.env"])
        env, n = re.subn(
            r"(?m)^TRAINFLEET_IMAGE_PYTHONS=.*$",
            lambda _: "TRAINFLEET_IMAGE_PYTHONS=" + shlex.quote(" ".join(map(str, pythons))),
            env,
        )
        assert n == 1 and f"TRAINFLEET_VENV={self.venv}\n" in env
        self.env_file = root / "etc" / "trainfleet.env"
        self.env_file.write_text(env)
        (root / "etc" / "ds_config.json").write_text(r.parts["ds_config.json"])
        for part in ("trainfleet-boot.sh", "trainfleet-launch.sh"):
            (root / "opt" / part).write_text(moved(r.parts[part]))
            (root / "opt" / part).chmod(0o755)
        # apt-get must never run here (make_venv's fallback): a stand-in that records and refuses.
        apt = root / "bin" / "apt-get"
        apt.write_text(f'#!/bin/sh\necho "$@" >>{root / "apt-get.calls"}\nexit 1\n')
        apt.chmod(0o755)
        self.env = {
            "PATH": f"{root / 'bin'}:/usr/bin:/bin",
            "HOME": str(root / "home"),
            "LANG": "C.UTF-8",
            "TRAINFLEET_ENV_FILE": str(self.env_file),
            "PIP_CONFIG_FILE": os.devnull,  # none of this machine's pip settings
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": str(wheelhouse),
        }

    def build_env(self, **extra: str) -> subprocess.CompletedProcess:
        """The rendered boot script, sourced by bash (so main does not run), then its build_env step."""
        boot = self.root / "opt" / "trainfleet-boot.sh"
        return subprocess.run(
            ["bash", "-c", 'set -euo pipefail; . "$1"; build_env', "bash", str(boot)],
            capture_output=True, text=True, timeout=300, env={**self.env, **extra},
        )  # fmt: skip

    def venv_python(self, code: str) -> str:
        result = subprocess.run(
            [str(self.venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def venv_site(self) -> Path:
        (site,) = self.venv.glob("lib/python*/site-packages")
        return site


def nvidia_fleet():
    return rendered("dev", "dev")[1]


def gaudi_fleet():
    config = StackConfig.from_sections(
        {
            "job": {"name": "gj", "params": "1B", "tokens": "1B"},
            "fleets": [{"name": "gg", "cloud": "aws", "region": "us-west-2", "instance_type": "dl1.24xlarge", "nodes": 2}],
        }
    )  # fmt: skip
    return render_user_data("g", config, config.fleets[0], bucket="b", group="g")


WHERE = "import os, torch, deepspeed; print(os.path.dirname(torch.__file__)); print(os.path.dirname(deepspeed.__file__))"


def test_a_node_builds_its_venv_on_the_images_pinned_torch(tmp_path, wheelhouse):
    image = tmp_path / "image"
    image_python = make_image(image, torch="2.13.0+cu130", pip=True)  # a DLAMI's /opt/pytorch has pip
    before = snapshot(image)
    node = Node(
        tmp_path / "node", nvidia_fleet(), [tmp_path / "no-such-python", image_python, "python3"], wheelhouse
    )
    result = node.build_env()
    assert result.returncode == 0, result.stderr
    log = result.stderr
    assert f"building {node.venv} on the image's PyTorch: {image_python}, torch 2.13.0+cu130" in log
    assert re.search(rf"training environment {re.escape(str(node.venv))}: python [\d.]+, torch 2\.13\.0\+cu130 "
                     rf"\({re.escape(str(image))}/lib/python[\d.]+/site-packages/torch\), deepspeed 0\.19\.8", log)  # fmt: skip
    # torch is the image's; DeepSpeed went into the venv, nowhere else; the image is as it was.
    torch_dir, ds_dir = node.venv_python(WHERE).splitlines()
    assert Path(torch_dir).is_relative_to(image) and Path(ds_dir).is_relative_to(node.venv_site())
    assert node.venv_python("import deepspeed; print(deepspeed.__version__)") == "0.19.8"
    assert (node.venv / "pyvenv.cfg").read_text().count("include-system-site-packages = true") == 1
    # pip was the image's, run by the venv's python: the venv has none of its own, and pip wrote only there.
    assert not list(node.venv_site().glob("pip*")) and list(
        node.venv_site().glob("deepspeed-0.19.8.dist-info")
    )
    assert snapshot(image) == before, "the image's python environment was changed"
    assert not (tmp_path / "node" / "apt-get.calls").exists()
    assert (node.venv / ".trainfleet-env").read_text() == "torch 2.13.0 deepspeed 0.19.8\n"

    # A restart finds the venv built and only checks it: no pip (nothing reachable now), same versions.
    again = node.build_env(PIP_FIND_LINKS=str(tmp_path / "empty"))
    assert again.returncode == 0, again.stderr
    assert "building" not in again.stderr and "deepspeed 0.19.8" in again.stderr

    # The launch script runs the venv's deepspeed launcher, with the venv's python, before anything on PATH.
    decoy = tmp_path / "node" / "bin" / "deepspeed"
    decoy.write_text("#!/bin/sh\necho 'not the venv deepspeed' >&2\nexit 3\n")
    decoy.chmod(0o755)
    out = tmp_path / "ds.json"
    hostfile = tmp_path / "node" / "state" / "run" / "hostfile"
    launched = subprocess.run(
        [str(tmp_path / "node" / "opt" / "trainfleet-launch.sh"), str(hostfile), "0", "127.0.0.1"],
        capture_output=True, text=True, timeout=60, env={**node.env, "FAKE_DS_OUT": str(out)},
    )  # fmt: skip
    assert launched.returncode == 0, launched.stderr
    ran = json.loads(out.read_text())
    assert Path(ran["prefix"]) == node.venv and Path(ran["python"]).parent == node.venv / "bin"
    assert ran["argv"][:2] == ["--hostfile", str(hostfile)] and "--no_ssh" in ran["argv"]
    assert f"trainfleet-launch: {node.venv}/bin/deepspeed" in launched.stderr


def test_an_image_without_the_pinned_torch_gets_it_installed_into_the_venv(tmp_path, wheelhouse):
    image = tmp_path / "image"
    image_python = make_image(image, torch="2.12.0+cu128")
    before = snapshot(image)
    node = Node(tmp_path / "node", nvidia_fleet(), [image_python], wheelhouse)
    result = node.build_env()
    assert result.returncode == 0, result.stderr
    assert (
        f"no python here has torch 2.13.0 ({image_python} has torch 2.12.0+cu128): installing torch==2.13.0"
        in result.stderr
    )
    torch_dir, ds_dir = node.venv_python(WHERE).splitlines()
    assert Path(torch_dir).is_relative_to(node.venv_site()) and Path(ds_dir).is_relative_to(node.venv_site())
    assert node.venv_python("import torch; print(torch.__version__)") == "2.13.0"
    assert (
        "include-system-site-packages = false" in (node.venv / "pyvenv.cfg").read_text()
    )  # nothing of 2.12.0
    assert snapshot(image) == before


def test_two_nodes_end_up_with_the_same_versions(tmp_path, wheelhouse):
    """A replacement node booting mid-run on a different image build still matches its peers."""
    first = make_image(tmp_path / "image-a", torch="2.13.0+cu130")
    other = make_image(tmp_path / "image-b", torch="2.12.0+cu128")
    found = []
    for name, image_python in (("a", first), ("b", other)):
        node = Node(tmp_path / name, nvidia_fleet(), [image_python], wheelhouse)
        assert node.build_env().returncode == 0
        found.append(
            node.venv_python(
                "import torch, deepspeed; print(torch.__version__.split('+')[0], deepspeed.__version__)"
            )
        )
    assert found == ["2.13.0 0.19.8", "2.13.0 0.19.8"]


def test_the_launcher_is_written_when_the_image_already_has_the_pinned_deepspeed(tmp_path, wheelhouse):
    image_python = make_image(tmp_path / "image", torch="2.13.0", deepspeed="0.19.8")
    node = Node(tmp_path / "node", nvidia_fleet(), [image_python], wheelhouse)
    result = node.build_env()
    assert result.returncode == 0, result.stderr
    launcher = node.venv / "bin" / "deepspeed"
    assert launcher.read_text().startswith(f"#!{node.venv}/bin/python\n")
    out = tmp_path / "ds.json"
    subprocess.run(
        [str(launcher), "--x"], env={"FAKE_DS_OUT": str(out), "PATH": "/usr/bin:/bin"}, check=True, timeout=60
    )
    assert Path(json.loads(out.read_text())["prefix"]) == node.venv


def test_a_torch_that_is_not_the_pin_stops_the_boot_with_one_clear_line(tmp_path):
    # The only torch pip can get here claims to be 2.13.0 but reports 2.12.0 when imported.
    wh = tmp_path / "wheelhouse"
    make_wheel(wh, "torch", "2.13.0", fake_torch("2.12.0"))
    make_wheel(wh, "deepspeed", "0.19.8", fake_deepspeed("0.19.8"), {"deepspeed": DS_SCRIPT})
    make_wheel(wh, "setuptools", "80.0.0", {"setuptools/__init__.py": ""})
    image_python = make_image(tmp_path / "image", torch=None)
    node = Node(tmp_path / "node", nvidia_fleet(), [image_python], wh)
    result = node.build_env()
    assert result.returncode != 0
    fatal = [line for line in result.stderr.splitlines() if "FATAL" in line]
    assert fatal == [
        f"trainfleet-boot: FATAL: {node.venv} is not the pinned training environment: it has torch 2.12.0, but "
        "this fleet is pinned to torch 2.13.0; this node would not train like its peers (pins: trainfleet.env, "
        "from infra/node_env.py)"
    ]
    assert not (node.venv / ".trainfleet-env").exists()  # the next start rebuilds it


def test_a_deepspeed_pip_cannot_get_at_the_pin_stops_the_boot(tmp_path):
    wh = tmp_path / "wheelhouse"
    make_wheel(wh, "deepspeed", "0.19.7", fake_deepspeed("0.19.7"), {"deepspeed": DS_SCRIPT})  # not the pin
    make_wheel(wh, "setuptools", "80.0.0", {"setuptools/__init__.py": ""})
    image_python = make_image(tmp_path / "image", torch="2.13.0+cu130")
    node = Node(tmp_path / "node", nvidia_fleet(), [image_python], wh)
    result = node.build_env()
    assert result.returncode != 0
    assert f"trainfleet-boot: FATAL: cannot install deepspeed==0.19.8 into {node.venv}" in result.stderr
    assert not (node.venv_site() / "deepspeed").exists()


def test_gaudi_never_pip_installs_a_torch_over_habanas(tmp_path, wheelhouse):
    """Habana's PyTorch comes only with Intel's software on the image: another torch stops the boot."""
    image_python = make_image(tmp_path / "image", torch="2.13.0+cu130")
    node = Node(tmp_path / "node", gaudi_fleet(), [image_python], wheelhouse)
    result = node.build_env()
    assert result.returncode != 0
    (fatal,) = [line for line in result.stderr.splitlines() if "FATAL" in line]
    assert f"no python here has torch 2.4.0a0 ({image_python} has torch 2.13.0+cu130)" in fatal
    assert "comes only with its image: boot an image that has it (fleets[].image)" in fatal
    assert not node.venv.exists()


def test_gaudi_builds_on_habanas_torch(tmp_path):
    """Habana's torch (2.4.0a0+git<sha>) is the pin; its DeepSpeed fork is installed from the wheelhouse here."""
    wh = tmp_path / "wheelhouse"
    make_wheel(
        wh, "deepspeed", "0.14.4+hpu.synapse.v1.18.0", fake_deepspeed("0.14.4"), {"deepspeed": DS_SCRIPT}
    )
    make_wheel(wh, "setuptools", "80.0.0", {"setuptools/__init__.py": ""})
    image_python = make_image(tmp_path / "image", torch="2.4.0a0+git74cd574")
    node = Node(tmp_path / "node", gaudi_fleet(), [image_python], wh)
    # The fork comes from git on a real node; here pip finds it by name in the wheelhouse.
    node.env_file.write_text(
        re.sub(r"(?m)^TRAINFLEET_DEEPSPEED_SPEC=.*$", "TRAINFLEET_DEEPSPEED_SPEC=deepspeed==0.14.4+hpu.synapse.v1.18.0",
               node.env_file.read_text())
    )  # fmt: skip
    result = node.build_env()
    assert result.returncode == 0, result.stderr
    assert (
        "torch 2.4.0a0+git74cd574" in result.stderr
        and "deepspeed 0.14.4+hpu.synapse.v1.18.0" in result.stderr
    )


# ----------------------------------------------------------------------------- AMIs and the image rule


# A public Habana DLAMI, deprecated (tests/fixtures/aws_amis/images.json): no stack boots one any more (none carries
# the Gaudi software the nodes need), but the lookup rules are the same for any deprecated public AMI.
HABANA = next(
    MockImage.from_api(record)
    for record in json.loads((REPO / "tests" / "fixtures" / "aws_amis" / "images.json").read_text())["images"]
    if "Habana" in record["Name"]
)


def _lookup(images, name: str, include_deprecated: bool | None = None) -> dict:
    args = {
        "mostRecent": True,
        "owners": ["amazon"],
        "region": "us-west-2",
        "filters": [{"name": "name", "values": [name]}],
    }
    if include_deprecated is not None:
        args["includeDeprecated"] = include_deprecated
    return _describe_image(images, args)


def test_a_deprecated_ami_is_found_only_with_include_deprecated():
    assert HABANA.deprecation_time == "2024-01-27T00:00:00.000Z"  # two years after its 2022-01-27 creation
    for flag in (None, False):
        with pytest.raises(AmiLookupError, match="Your query returned no results"):
            _lookup((*DEFAULT_IMAGES, HABANA), node_env.HABANA_AMI_NAME, flag)
    assert _lookup((*DEFAULT_IMAGES, HABANA), node_env.HABANA_AMI_NAME, True)["id"] == HABANA.image_id
    # Deprecation in the future: not deprecated yet, found either way.
    later = MockImage(
        **{**HABANA.__dict__, "image_id": "ami-0later", "deprecation_time": "2999-01-01T00:00:00.000Z"}
    )
    assert _lookup((later,), node_env.HABANA_AMI_NAME)["id"] == "ami-0later"
    # Its owner sees a deprecated AMI regardless (the mock's account owns this one).
    own = MockImage(
        **{**HABANA.__dict__, "image_id": "ami-0own", "owner_id": "123456789012", "owner_alias": None}
    )
    assert (
        _describe_image((own,), {"filters": [{"name": "image-id", "values": ["ami-0own"]}]})["id"]
        == "ami-0own"
    )


def test_the_program_asks_for_deprecated_amis_only_for_a_pinned_id():
    dev = run_program("dev", read_stack_file(STACKS / "Pulumi.dev.yaml").config)
    (ami,) = [i for i in dev.invocations if i.token == "aws:ec2/getAmi:getAmi"]
    assert ami.args["includeDeprecated"] is False
    assert {"name": "name", "values": [node_env.AWS_GPU_AMI_NAME]} in ami.args["filters"]
    # The newest Base DLAMI on Ubuntu 24.04: not an older one, not the (newer) PyTorch Amazon Linux build.
    assert dev.one("aws:ec2/launchTemplate:LaunchTemplate").inputs["imageId"] == "ami-0dea1a0000000a004"
    gaudi = run_program("gaudi", read_stack_file(STACKS / "Pulumi.gaudi.yaml").config, images=(USER_IMAGE,))
    (ami,) = [i for i in gaudi.invocations if i.token == "aws:ec2/getAmi:getAmi"]
    # No published AMI carries Gaudi software 1.18.0: the newest of the account's own named for it.
    assert ami.args["owners"] == ["self"] and ami.args["includeDeprecated"] is False
    assert {"name": "name", "values": [node_env.GAUDI_AMI_NAME]} in ami.args["filters"]
    assert gaudi.one("aws:ec2/launchTemplate:LaunchTemplate").inputs["imageId"] == USER_GAUDI_AMI
    assert not [w for w in [*dev.warnings, *gaudi.warnings] if w.rule == IMAGE_RULE]


def test_a_gaudi_fleet_can_pin_its_image_by_id_instead():
    sections = read_stack_file(STACKS / "Pulumi.gaudi.yaml").config.to_sections()
    sections["fleets"][0]["image"] = USER_GAUDI_AMI
    gaudi = run_program("gaudi", StackConfig.from_sections(sections), images=(USER_IMAGE,))
    (ami,) = [i for i in gaudi.invocations if i.token == "aws:ec2/getAmi:getAmi"]
    assert ami.args["includeDeprecated"] is True  # a pinned image is found even once deprecated
    assert ami.args["filters"] == [{"name": "image-id", "values": [USER_GAUDI_AMI]}]
    assert gaudi.one("aws:ec2/launchTemplate:LaunchTemplate").inputs["imageId"] == USER_GAUDI_AMI


def _run_with(*calls: dict) -> ProgramRun:
    return ProgramRun("s", [], {}, [Invocation("aws:ec2/getAmi:getAmi", args) for args in calls])


def _name(value: str, **more) -> dict:
    return {
        "region": "us-east-1",
        "mostRecent": True,
        "filters": [{"name": "name", "values": [value]}],
        **more,
    }


@pytest.mark.parametrize(
    "args, warned",
    [
        (_name(node_env.AWS_GPU_AMI_NAME, includeDeprecated=False), None),
        (_name(node_env.AWS_GPU_AMI_NAME), None),
        (_name(node_env.AWS_GPU_AMI_NAME, includeDeprecated=True), "picked by name with include_deprecated"),
        (
            _name(node_env.HABANA_AMI_NAME, includeDeprecated=False),
            "selects an image family AWS no longer publishes",
        ),
        (_name("Deep Learning AMI Habana*"), "selects an image family AWS no longer publishes"),
        (_name("Deep Learning *"), None),  # may find newer families as well
        # A pinned id is the user's deliberate choice, deprecated or not.
        (
            {
                "includeDeprecated": True,
                "filters": [{"name": "image-id", "values": ["ami-0dea1a0000000b001"]}],
            },
            None,
        ),
    ],
)
def test_the_image_rule_warns_about_name_filters_that_can_pick_deprecated_amis(args, warned):
    findings = check_rules(_run_with(args), only=[IMAGE_RULE])
    if warned is None:
        assert findings == []
        return
    (finding,) = findings
    assert finding.severity == "warning" and warned in finding.problem
    assert "pin the AMI by id in fleets[].image" in finding.fix
    assert finding.resource.startswith("aws:ec2/getAmi:getAmi name ")


def test_the_mock_runtime_reports_the_image_rules_warning():
    """run_program enforces every rule: a program looking an AMI up by name with include_deprecated gets the
    warning in ProgramRun.warnings (the lookup itself succeeds, on the deprecated Habana image)."""
    import pulumi_aws as aws

    def declare(stack, config):
        ami = aws.ec2.get_ami_output(
            most_recent=True,
            owners=["amazon"],
            include_deprecated=True,
            filters=[aws.ec2.GetAmiFilterArgs(name="name", values=[node_env.HABANA_AMI_NAME])],
            region="us-west-2",
        )
        return {"ami": ami.id}

    run = run_program(
        "s", read_stack_file(STACKS / "Pulumi.dev.yaml").config, declare=declare, images=(*DEFAULT_IMAGES, HABANA)
    )
    assert run.exports["ami"] == HABANA.image_id
    assert [w.rule for w in run.warnings] == [IMAGE_RULE]
