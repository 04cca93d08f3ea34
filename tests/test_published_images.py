"""The images the program pins exist: each is checked against what its cloud publishes, as vendored (with where and
when each name was seen) in tests/fixtures/published_images/. And no stack may pin an image nobody published: the
rule image-placeholder-id (infra/rules/images.py) refuses the offline table's stand-in ids, documentation examples
and placeholders, in `trainfleet stacks check` as in `preview` and the program.

The Gaudi stack names no AMI (none published carries Intel Gaudi software 1.18.0): `stacks check` refuses it with
one line until its user pins theirs. The other tests run it as that user would, with their image pinned
(USER_GAUDI_AMI, `with_user_images`)."""

from __future__ import annotations

import json
import re

import pytest

from infra import node_env
from infra.aws import fleet as aws_fleet
from infra.azure import fleet as azure_fleet
from infra.config import StackConfig
from infra.errors import ConfigError
from infra.gcp import fleet as gcp_fleet
from infra.mock_runtime import DEFAULT_IMAGES, ec2_wildcard, run_program
from infra.program import is_gaudi
from infra.rules.images import PLACEHOLDER_RULE, PLACEHOLDER_TEXT, _placeholder_ami
from infra.stack_file import list_stack_files, read_stack_file
from tests.conftest import REPO, STACKS, assert_one_line_error, run_trainfleet

PUBLISHED = REPO / "tests" / "fixtures" / "published_images"
AWS = json.loads((PUBLISHED / "aws_dlami_names.json").read_text())
GCP = json.loads((PUBLISHED / "gcp_dlvm_families.json").read_text())
AZURE = json.loads((PUBLISHED / "azure_hpc_urns.json").read_text())
# The day the lists were read: a family past its end of availability then is no choice.
READ = "2026-11-28"

# The AMI a Gaudi user builds with Intel's installer and pins (tests/fixtures/aws_amis/images.json, source
# user-image: the mock account's own image, in us-west-2). Not published: the tests that run the Gaudi stack pin it
# as its user pins theirs.
USER_GAUDI_AMI = "ami-07c4f3e9b2a5d8e61"
GAUDI_IMAGE_LINE = "    # image: ami-<your image id>\n"


def with_user_image_text(text: str, image: str = USER_GAUDI_AMI) -> str:
    """stacks/Pulumi.gaudi.yaml's text with its image line filled in (by `image`), as its user edits it."""
    assert GAUDI_IMAGE_LINE in text, "the Gaudi stack's commented image line moved"
    return text.replace(GAUDI_IMAGE_LINE, f"    image: {image}\n")


def _matches(pattern: str, names: list[str]) -> list[str]:
    """DescribeImages `name` filter semantics (`*`, `?`), as the mock runtime applies them."""
    regex = ec2_wildcard(pattern)
    return [n for n in names if regex.fullmatch(n)]


def _aws_names(*, line: str | None = None, verbatim: bool = True) -> list[str]:
    return [
        i["name"]
        for i in AWS["images"]
        if (line is None or i["line"] == line) and not (verbatim and i.get("translated"))
    ]


# ------------------------------------------------------------------------------------------------------ AWS


def test_the_aws_name_filter_finds_published_base_dlamis_and_nothing_else():
    assert aws_fleet.GPU_AMI_NAME == node_env.AWS_GPU_AMI_NAME
    base = _aws_names(line="base-oss-ubuntu-24.04")
    found = _matches(node_env.AWS_GPU_AMI_NAME, _aws_names())
    assert len(found) >= 5 and set(found) == set(base)
    # The ARM64 and Ubuntu 22.04 Base lines, Single CUDA, the PyTorch DLAMIs and Habana's: never picked.
    others = [i["name"] for i in AWS["images"] if i["line"] != "base-oss-ubuntu-24.04"]
    assert others and not _matches(node_env.AWS_GPU_AMI_NAME, others)
    # The newest seen, with a real id where its source gave one.
    newest = max(found, key=lambda n: n.rsplit(" ", 1)[1])
    record = next(i for i in AWS["images"] if i["name"] == newest)
    assert newest.endswith(" 20261002") and record["id"] == "ami-0f56562c7bd805c4f"


def test_the_former_pytorch_filter_matched_nothing_published():
    """The old pin, the PyTorch DLAMI of the pinned torch minor on Ubuntu: no such image was ever seen."""
    old = f"Deep Learning OSS Nvidia Driver AMI GPU PyTorch {node_env.TORCH_MINOR} (Ubuntu *"
    assert _matches(old, _aws_names(verbatim=False)) == []


def test_the_aws_ssm_parameter_is_the_published_one_for_the_pinned_line():
    """AWS's DLAMI guide: /aws/service/deeplearning/ami/<architecture>/<ami_type>/latest/ami-id, ami_type the
    DLAMI name without the words deep, learning and ami."""
    line = node_env.AWS_GPU_AMI_NAME.removesuffix(" *")
    words = [w for w in re.split(r"[\s()]+", line.lower()) if w and w not in ("deep", "learning", "ami")]
    assert node_env.AWS_GPU_AMI_SSM_PARAMETER == (
        f"/aws/service/deeplearning/ami/x86_64/{'-'.join(words)}/latest/ami-id"
    )
    assert node_env.AWS_GPU_AMI_SSM_PARAMETER in {p["name"] for p in AWS["ssm_parameters"]}


def test_every_name_the_offline_ami_table_answers_with_is_published():
    """The mock's DEFAULT_IMAGES: stand-in ids, real names; the program's lookup by name picks the newest Base."""
    published = set(_aws_names())
    assert {i.name for i in DEFAULT_IMAGES} <= published
    picked = _matches(
        node_env.AWS_GPU_AMI_NAME, [i.name for i in DEFAULT_IMAGES if i.architecture == "x86_64"]
    )
    assert picked and all(_placeholder_ami(i.image_id) for i in DEFAULT_IMAGES)


def test_no_published_ami_carries_the_pinned_gaudi_software():
    def version(v: str) -> tuple[int, ...]:
        return tuple(int(part) for part in v.split("."))

    habana = [i for i in AWS["images"] if i["line"] == "habana"]
    assert habana and all(version(i["synapseai"]) < version(node_env.GAUDI_SOFTWARE_VERSION) for i in habana)
    assert not any(node_env.GAUDI_SOFTWARE_VERSION in i["name"] for i in AWS["images"])
    assert _matches(node_env.HABANA_AMI_NAME, [i["name"] for i in habana])  # the filter finds only those


# ------------------------------------------------------------------------------------------------------ GCP


def test_the_gcp_family_is_published_and_available():
    families = {f["family"]: f for f in GCP["families"]}
    family = families[node_env.GCP_DL_IMAGE_FAMILY]
    assert family["end_of_availability"] > READ and family["end_of_patch"] > READ
    assert gcp_fleet.DL_IMAGE == (
        f"projects/deeplearning-platform-release/global/images/family/{node_env.GCP_DL_IMAGE_FAMILY}"
    )
    # Images of the family in use after the list was written, and its driver branch fits torch's CUDA 13 wheel.
    assert any(i["image"].startswith(node_env.GCP_DL_IMAGE_FAMILY + "-v2026") for i in GCP["images_seen"])
    assert int(node_env.GCP_DL_IMAGE_FAMILY.rsplit("-nvidia-", 1)[1]) >= 580


def test_the_former_gcp_family_was_not_published():
    assert "pytorch-2-13-cu130-ubuntu-2204-nvidia-580" not in {f["family"] for f in GCP["families"]}


# ---------------------------------------------------------------------------------------------------- Azure


def test_the_azure_urn_is_published_with_a_driver_for_torchs_cuda():
    urns = {u["urn"]: u for u in AZURE["urns"]}
    urn = urns[":".join(node_env.AZURE_HPC_IMAGE)]
    assert int(urn["nvidia_driver"].split(".")[0]) >= 580 and urn["cuda"] >= "13.0"
    image = azure_fleet.DEFAULT_IMAGE
    assert (image.publisher, image.offer, image.sku, image.version) == node_env.AZURE_HPC_IMAGE


# ------------------------------------------------------------------------------ what the stacks pin, the rule


@pytest.mark.parametrize("path", list_stack_files(STACKS), ids=lambda p: p.name)
def test_no_shipped_stack_pins_a_placeholder(path):
    for fleet in read_stack_file(path).config.fleets:
        if fleet.image is None:
            continue
        assert not PLACEHOLDER_TEXT.search(fleet.image), (path.name, fleet.image)
        if fleet.cloud == "aws":
            assert _placeholder_ami(fleet.image) is None, (path.name, fleet.image)


def test_the_shipped_gaudi_stack_names_no_ami():
    (fleet,) = read_stack_file(STACKS / "Pulumi.gaudi.yaml").config.fleets
    assert is_gaudi(fleet) and fleet.image is None


@pytest.mark.parametrize(
    "image_id, why",
    [
        ("ami-0dea1a0000000b001", "stand-in id of trainfleet's offline AMI table"),  # the old Gaudi pin
        ("ami-0dea1a0000000a004", "stand-in id"),  # what the offline lookup answers for dev
        ("ami-0abcdef1234567890", "example or placeholder"),  # AWS's documentation examples
        ("ami-1234567890abcdef0", "example or placeholder"),
        ("ami-12345678", "example or placeholder"),
        ("ami-00000000000000000", "example or placeholder"),
        ("ami-REPLACE-ME", "not an AMI id"),
        ("ami-<your image id>", "not an AMI id"),
        ("ami-0F56562C7BD805C4F", "not an AMI id"),  # EC2 ids are lower case
        ("ami-0f56562c7bd805c4", "not an AMI id"),  # 16 digits
    ],
)
def test_the_rule_knows_an_id_that_cannot_be_an_ami(image_id, why):
    assert why in (_placeholder_ami(image_id) or "")


@pytest.mark.parametrize(
    "image_id",
    [
        "ami-0f56562c7bd805c4f",
        "ami-0a1a95d8da5818fdb",
        "ami-dca37ea5",
        "ami-092e7d01d03078ccf",
        USER_GAUDI_AMI,
    ],
)
def test_real_ids_and_a_users_own_pass(image_id):
    assert _placeholder_ami(image_id) is None


def test_stacks_check_names_building_the_gaudi_image_as_a_first_deploy_step(tmp_path):
    """The shipped Gaudi stack names no AMI: `stacks check` passes and names building the user's own, with the
    name the program looks for; a stack that pins one by id needs no such step."""
    result = run_trainfleet("stacks", "check", "--stack", "gaudi", "--json")
    assert result.code == 0, result.stderr
    (step,) = result.json()[0]["first_deploy_steps"]
    assert step.startswith("aws: build the Gaudi image in us-west-2 (AWS publishes none; the program boots the newest")
    assert "habanalabs-installer.sh 1.18.0" in step and "--name trainfleet-gaudi-1.18.0-$(date +%Y%m%d)" in step
    pinned = tmp_path / "Pulumi.gaudi.yaml"
    pinned.write_text(with_user_image_text((STACKS / "Pulumi.gaudi.yaml").read_text()))
    result = run_trainfleet("stacks", "check", "--stack", str(pinned), "--json")
    assert result.code == 0, result.stderr
    (row,) = result.json()
    assert row["stack"] == "gaudi" and row["first_deploy_steps"] == []


def test_stacks_check_refuses_the_old_stand_in_gaudi_ami_in_one_line(tmp_path):
    """The id stacks/Pulumi.gaudi.yaml used to ship, which only the offline table knew: planted back, refused."""
    planted = tmp_path / "Pulumi.gaudi.yaml"
    planted.write_text(
        with_user_image_text((STACKS / "Pulumi.gaudi.yaml").read_text(), "ami-0dea1a0000000b001")
    )
    result = run_trainfleet("stacks", "check", "--stack", str(planted))
    assert_one_line_error(
        result, "Pulumi.gaudi.yaml", f"rule {PLACEHOLDER_RULE}", "fleets[].image ami-0dea1a0000000b001",
        "stand-in id", "InvalidAMIID.NotFound", "set fleets[].image to an image that exists",
    )  # fmt: skip
    assert result.stdout == ""


def _with_image(stack: str, image: str) -> StackConfig:
    sections = read_stack_file(STACKS / f"Pulumi.{stack}.yaml").config.to_sections()
    sections["fleets"] = [{**sections["fleets"][0], "image": image}]
    return StackConfig.from_sections(sections)


@pytest.mark.parametrize(
    "stack, image, resource",
    [
        ("dev", "ami-0abcdef1234567890", "aws:ec2/getAmi:getAmi image-id ami-0abcdef1234567890 (us-east-1)"),
        ("dev", "ami-0dea1a0000000a004", "aws:ec2/getAmi:getAmi image-id ami-0dea1a0000000a004 (us-east-1)"),
        (
            "gcp-dev",
            "projects/REPLACE-ME/global/images/family/my-image",
            "gcp:compute/instanceTemplate:InstanceTemplate",
        ),
        (
            "azure-dev",
            "microsoft-dsvm:ubuntu-hpc:<sku>:latest",
            "azure-native:compute:VirtualMachineScaleSet",
        ),
    ],
)
def test_the_program_refuses_a_placeholder_image_on_every_cloud(stack, image, resource):
    with pytest.raises(ConfigError) as err:
        run_program(stack, _with_image(stack, image))
    line = str(err.value)
    assert (
        "\n" not in line
        and f"rule {PLACEHOLDER_RULE}" in line
        and resource in line
        and "fleets[].image" in line
    )


def test_a_real_pinned_image_passes_the_rule():
    run = run_program("dev", _with_image("dev", "ami-0f56562c7bd805c4f"))  # the user's region would hold it
    assert run.one("aws:ec2/launchTemplate:LaunchTemplate").inputs["imageId"] == "ami-0f56562c7bd805c4f"
