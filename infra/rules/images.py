"""Rules: the images fleets boot. An AWS AMI chosen by a name filter that could pick a deprecated image; an
image a stack pins that no cloud publishes (a stand-in, an example or a placeholder left in fleets[].image).

AWS deprecates public AMIs at most two years after creation (EnableImageDeprecation: "for public AMIs, the
upper limit is 2 years from the creation date"), and DescribeImages leaves deprecated AMIs out unless asked
(IncludeDeprecated). A name filter looked up with include_deprecated may land on an image that gets no more
fixes; one for an image family AWS no longer publishes finds nothing, or only deprecated images, once its
last image ages out. Pinning the id (fleets[].image) is the deliberate way to keep booting an old image.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from infra.rules import Finding, rule, where

GET_AMI = "aws:ec2/getAmi:getAmi"
DEPRECATE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ami-deprecate.html"
RULE = "aws-ami-name-filter-deprecated"

# Image families AWS no longer publishes, by the start of their AMI names (infra/node_env.py HABANA_AMI_NAME
# for Habana's), with where that is said.
DEPRECATED_FAMILIES: dict[str, str] = {
    # The Habana DLAMI line: no release in the DLAMI release notes read 2026-11-24
    # (https://docs.aws.amazon.com/dlami/latest/devguide/appendix-ami-release-notes.html); its images are past
    # the two-year limit (tests/fixtures/aws_amis/images.json, "ami-deprecation").
    "Deep Learning AMI Habana": "the Habana DLAMI line is old: its images are deprecated",
}


def _literal_prefix(pattern: str) -> str:
    """What every name a DescribeImages wildcard (`*`, `?`) matches starts with."""
    return re.split(r"[*?]", pattern, maxsplit=1)[0]


def _deprecated_family(pattern: str) -> str | None:
    """Why the family a name filter keeps to is deprecated, if it is one: every name the filter matches starts
    with that family's name. (A broader filter may find newer families too: it is not flagged.)"""
    prefix = _literal_prefix(pattern)
    return next((why for family, why in DEPRECATED_FAMILIES.items() if prefix.startswith(family)), None)


def _name_filters(args: dict) -> list[str]:
    return [v for f in args.get("filters") or [] if f.get("name") == "name" for v in f.get("values") or []]


@rule(RULE, DEPRECATE)
def ami_name_filter_may_pick_a_deprecated_image(run) -> Iterator[Finding]:
    """A warning per AMI lookup that picks by name and either asks for deprecated images too, or names a family
    AWS has deprecated. A lookup by image id (a pinned AMI) is the user's explicit choice: never flagged."""
    for call in run.invocations:
        if call.token != GET_AMI:
            continue
        names = _name_filters(call.args)
        if not names:
            continue
        where = f"{GET_AMI} name {', '.join(names)} ({call.args.get('region') or 'the provider region'})"
        fix = "pin the AMI by id in fleets[].image (an id is found even once deprecated)"
        if call.args.get("includeDeprecated"):
            yield Finding(
                RULE,
                where,
                "the AMI is picked by name with include_deprecated, so it may be a deprecated image, past its "
                "fixes (DescribeImages shows deprecated AMIs only when asked)",
                fix,
                severity="warning",
            )
            continue
        for name in names:
            if why := _deprecated_family(name):
                yield Finding(
                    RULE,
                    where,
                    f"the name filter {name!r} selects an image family AWS no longer publishes ({why}); "
                    "DescribeImages leaves deprecated AMIs out, so the lookup finds none or an old image",
                    fix,
                    severity="warning",
                )
                break


# ------------------------------------------------------------------------------ a pinned image that does not exist
PLACEHOLDER_RULE = "image-placeholder-id"
# EC2's error codes: InvalidAMIID.Malformed (the id is not of the form ami-xxxxxxxxxxxxxxxxx) and
# InvalidAMIID.NotFound (no such AMI, in that region). `stacks check` cannot ask EC2 whether an id exists (an id it
# does not know may be the user's own private image); it refuses the ids that cannot be one.
AMI_ERRORS = "https://docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html"
INSTANCE_TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
SCALE_SET = "azure-native:compute:VirtualMachineScaleSet"

# An AMI id: "ami-" and 17 hexadecimal digits (8 for the ids of before 2018; EC2 "Resource IDs").
AMI_ID = re.compile(r"ami-(?:[0-9a-f]{8}|[0-9a-f]{17})")
# The stand-in ids of the mock runtime's public AMIs (infra/mock_runtime.py DEFAULT_IMAGES; StandIn in
# tests/fixtures/aws_amis/images.json): no published AMI has them, only the offline lookup knows them.
STAND_IN_AMI = re.compile(r"ami-0dea1a0{7}[0-9a-f]{4}")
# Ids people write for "an AMI id here": AWS's documentation examples (ami-0abcdef1234567890, ami-1234567890abcdef0,
# ami-12345678) and runs of zeros. A real id is 17 random hex digits: one holding any of these by chance is about
# one in a million (abcdef: 12 places x 16^-6).
EXAMPLE_AMI = re.compile(r"abcdef|12345678|0{7}")
# Words that mark an unfilled value in an image name, family path or URN (REPLACE-ME, <image>, your-image, TODO,
# xxxx).
PLACEHOLDER_TEXT = re.compile(
    r"(?i)replace[-_]?me|change[-_]?me|placeholder|\btodo\b|\bfixme\b|<[^>]*>|x{4}|your[-_]"
)


def _placeholder_ami(image_id: str) -> str | None:
    """Why a pinned AMI id cannot be a published (or anyone's) AMI, if it cannot."""
    if not AMI_ID.fullmatch(image_id):
        return "is not an AMI id (ami- and 17 hexadecimal digits): EC2 answers InvalidAMIID.Malformed"
    if STAND_IN_AMI.fullmatch(image_id):
        return (
            "is a stand-in id of trainfleet's offline AMI table (infra/mock_runtime.py DEFAULT_IMAGES), which no "
            "published AMI has: EC2 answers InvalidAMIID.NotFound"
        )
    if EXAMPLE_AMI.search(image_id.removeprefix("ami-")):
        return (
            "is an example or placeholder id, not an AMI anyone published: EC2 answers InvalidAMIID.NotFound"
        )
    return None


def _pinned_ids(args: dict) -> list[str]:
    return [
        v for f in args.get("filters") or [] if f.get("name") == "image-id" for v in f.get("values") or []
    ]


def _gcp_images(resource) -> list[str]:
    return [
        d.get("sourceImage")
        for d in resource.inputs.get("disks") or []
        if isinstance(d.get("sourceImage"), str)
    ]


def _azure_images(resource) -> list[str]:
    ref = ((resource.inputs.get("virtualMachineProfile") or {}).get("storageProfile") or {}).get(
        "imageReference"
    )
    if not isinstance(ref, dict):
        return []
    if isinstance(ref.get("id"), str):
        return [ref["id"]]
    return [":".join(str(ref.get(k, "")) for k in ("publisher", "offer", "sku", "version"))]


@rule(PLACEHOLDER_RULE, AMI_ERRORS)
def pinned_image_is_a_placeholder(run) -> Iterator[Finding]:
    """An error per image a stack pins (fleets[].image) that no cloud can have: on AWS an id that is not an AMI
    id, one of the offline table's stand-ins, or a documentation example; on GCP and Azure an image path or URN
    with a placeholder left in it. `pulumi up` would fail at the lookup (or boot nothing); the stack's author
    meant to put a real image there. An id only the user's account knows passes: nothing offline can tell."""
    fix = (
        "set fleets[].image to an image that exists in the fleet's region (aws ec2 describe-images --image-ids "
        "ID --region REGION shows it), or leave it empty for the cloud's default image (a Gaudi fleet needs your "
        "own: infra/aws/gaudi.py)"
    )
    for call in run.invocations:
        if call.token != GET_AMI:
            continue
        for image_id in _pinned_ids(call.args):
            if why := _placeholder_ami(image_id):
                yield Finding(
                    PLACEHOLDER_RULE,
                    f"{GET_AMI} image-id {image_id} ({call.args.get('region') or 'the provider region'})",
                    f"fleets[].image {image_id} {why}",
                    fix,
                )
    for resource, images in [
        *((r, _gcp_images(r)) for r in run.of_type(INSTANCE_TEMPLATE)),
        *((r, _azure_images(r)) for r in run.of_type(SCALE_SET)),
    ]:
        for image in images:
            if PLACEHOLDER_TEXT.search(image):
                yield Finding(
                    PLACEHOLDER_RULE,
                    where(resource),
                    f"fleets[].image {image!r} has a placeholder in it, not an image the cloud publishes",
                    "set fleets[].image to a published image (a GCP image or family path, an Azure "
                    "publisher:offer:sku:version URN or image id), or leave it empty for the cloud's default",
                )
