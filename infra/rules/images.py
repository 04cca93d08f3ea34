"""Rules: the images fleets boot. An AWS AMI chosen by a name filter that could pick a deprecated image.

AWS deprecates public AMIs at most two years after creation (EnableImageDeprecation: "for public AMIs, the
upper limit is 2 years from the creation date"), and DescribeImages leaves deprecated AMIs out unless asked
(IncludeDeprecated). A name filter looked up with include_deprecated may land on an image that gets no more
fixes; one for an image family AWS no longer publishes finds nothing, or only deprecated images, once its
last image ages out. Pinning the id (fleets[].image) is the deliberate way to keep booting an old image.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from infra.rules import Finding, rule

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
