"""The PR comment a reviewer reads in ten seconds (issue 17 item 10, deliverable 7): summary first, the cost
split by component, free resources on one line, user data as a line diff, the real status of an unknown
cost, the budget and the guardrail, a size cap that cuts details before assumptions, and a short body when
the stack's cost does not change. Every expected value is worked out by hand from the inputs built here."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json

from cli.preview.diff import diff_estimates
from cli.preview.markdown import GITHUB_COMMENT_LIMIT, NO_CHANGE_TAG, marker, render, summary_lines
from cli.preview.model import (
    FREE,
    NOT_ESTIMABLE,
    NOT_PRICED,
    PRICED,
    CostComponent,
    Estimate,
    FleetExpectation,
    PricedResource,
    Resource,
    UsageValue,
)
from tests.test_diff_comment import _huge_diff

USAGE = {
    "hours_per_month": UsageValue(730, "hours", "default: fleets run all month (730 h)"),
    "job_hours": UsageValue(100, "hours", "stack: job.planned_hours"),
}


def res(type_: str, name: str, **inputs) -> Resource:
    return Resource(type_, name, f"urn:pulumi:s::p::{type_}::{name}", inputs=inputs)


def priced(resource: Resource, *components: CostComponent) -> PricedResource:
    return PricedResource(resource, PRICED, list(components))


def flat(name: str, usd: float) -> CostComponent:
    """A component of exactly `usd` a month (1 unit at `usd`)."""
    return CostComponent(name, "month", 1, usd, "test")


def free(resource: Resource, reason: str) -> PricedResource:
    return PricedResource(resource, FREE, reason=reason)


def est(*resources: PricedResource, **kw) -> Estimate:
    return Estimate("s", "test", list(resources), dict(USAGE), **kw)


def section(body: str, title_start: str) -> str:
    """The text of the <details> section whose summary starts with `title_start`."""
    start = body.index(f"<details><summary>{title_start}")
    return body[start : body.index("</details>", start)]


# ---- 1. the cost split by component ---------------------------------------------------------------------


def test_each_changed_resource_is_split_into_its_components_base_to_head():
    asg = res("aws:autoscaling/group:Group", "asg", desiredCapacity=2)
    asg2 = res("aws:autoscaling/group:Group", "asg", desiredCapacity=4)
    base = est(priced(asg,
        CostComponent("p4d spot (2 nodes)", "node-hour", 1460, 10.0, "catalog"),   # 1460 x $10 = $14,600
        CostComponent("EBS gp3 200 GB x 2 nodes", "GB-month", 400, 0.08, "rate"),  # 400 x $0.08 = $32
        CostComponent("NAT hours", "hour", 730, 0.045, "rate"),                     # 730 x $0.045 = $32.85
    ))  # fmt: skip
    head = est(priced(asg2,
        CostComponent("p4d spot (4 nodes)", "node-hour", 2920, 10.0, "catalog"),   # $29,200
        CostComponent("EBS gp3 200 GB x 4 nodes", "GB-month", 800, 0.08, "rate"),  # $64
        CostComponent("NAT hours", "hour", 730, 0.045, "rate"),                     # $32.85, unchanged
        CostComponent("p4d on-demand (1 node)", "node-hour", 730, 20.0, "catalog"), # $14,600, new
    ))  # fmt: skip
    body = render(diff_estimates(base, head, "main", "pr"))
    split = section(body, "Cost split by component (1 resource)")
    # the resource: 29,200 + 64 + 32.85 + 14,600 - (14,600 + 32 + 32.85) = +29,232.00
    assert "- `asg` (changed, +$29,232.00)\n" in split
    # each line as quantity x unit price = cost, base -> head
    assert (
        "  - p4d spot (2 nodes) → p4d spot (4 nodes): 1,460 node-hour × $10.00 = $14,600.00 → "
        "2,920 node-hour × $10.00 = $29,200.00 (+$14,600.00)\n"
    ) in split
    assert (
        "  - EBS gp3 200 GB x 2 nodes → EBS gp3 200 GB x 4 nodes: 400 GB-month × $0.08 = $32.00 → "
        "800 GB-month × $0.08 = $64.00 (+$32.00)\n"
    ) in split
    assert "  - NAT hours: 730 hour × $0.045 = $32.85 (unchanged)\n" in split
    assert "  - p4d on-demand (1 node): 730 node-hour × $20.00 = $14,600.00 (new)\n" in split
    # the main table keeps one row for the resource
    assert sum(1 for line in body.splitlines() if line.startswith("| `asg`")) == 1


def test_usage_based_lines_are_apart_from_fixed_ones_and_usage_nobody_set_shows_its_unit_price():
    """Infracost's convention: a line whose quantity is a usage assumption is usage-based, and one whose usage
    is 0 reads "depends on usage: $X per unit", never $0.00."""
    nat = res("aws:ec2/natGateway:NatGateway", "nat")
    bucket = res("aws:s3/bucketV2:BucketV2", "ckpt")

    def stack(checkpoint_gib: float, hours: float) -> Estimate:
        return est(
            priced(nat, CostComponent("NAT gateway hours", "hour", hours, 0.045, "rate"),  # fixed
                   CostComponent("NAT data processed", "GB", 0, 0.045, "rate", usage_keys=("nat_gb_per_month",))),
            priced(bucket, CostComponent("S3 Standard storage, current checkpoints", "GiB-month", checkpoint_gib,
                                         0.023, "rate", usage_keys=("checkpoint_gb",))),
        )  # fmt: skip

    # fixed 730 x 0.045 = 32.85 both sides; usage-based 1,000 x 0.023 = 23.00 -> 2,000 x 0.023 = 46.00
    body = render(diff_estimates(stack(1000, 730), stack(2000, 730), "main", "pr"))
    assert (
        "- Fixed $32.85 → $32.85 ($0.00) · usage-based $23.00 → $46.00 (+$23.00), resting on checkpoint_gb"
    ) in body
    assert (
        "- Depends on usage, not in the totals (usage 0 by default): NAT data processed $0.045 per GB "
        "(nat_gb_per_month)"
    ) in body
    assert "Cost split by component" not in body  # only the bucket's one line changed: nothing to split
    data = diff_estimates(stack(1000, 730), stack(2000, 730), "main", "pr").summary()
    assert data["usage_based_monthly"] == {"base": 23.0, "head": 46.0, "delta": 23.0}
    assert data["fixed_monthly"] == {"base": 32.85, "head": 32.85, "delta": 0.0}
    assert data["depends_on_usage"] == [
        {"name": "NAT data processed", "unit": "GB", "unit_price": 0.045, "usage_keys": ["nat_gb_per_month"]}
    ]
    # a NAT gateway whose hours change shows its zero-usage line with its unit price, not $0.00
    body = render(diff_estimates(stack(1000, 730), stack(1000, 365), "main", "pr"))
    split = section(body, "Cost split by component (1 resource)")
    assert (
        "  - NAT data processed: depends on usage: $0.045 per GB (nat_gb_per_month = 0; a usage file sets it)"
        " (unchanged)"
    ) in split
    assert "$0.00 (unchanged)" not in split


def test_the_same_stacks_give_the_same_bytes_whatever_order_the_engine_registered_them_in():
    """Resources created in apply callbacks may register in another order on another run: the comment must
    not change (a bot would edit its comment on every re-run)."""
    a, b, c = (res("aws:ec2/instance:Instance", n) for n in ("a", "b", "c"))
    gone = res("aws:ec2/eip:Eip", "gone")

    def side(*resources: Resource, usd: float) -> list[PricedResource]:
        return [priced(r, flat("c", usd)) for r in resources]

    base = side(a, b, c, gone, usd=1.0)
    head = side(a, b, c, usd=2.0)
    one = diff_estimates(est(*base), est(*head), "m", "p")
    other = diff_estimates(est(*reversed(base)), est(*reversed(head)), "m", "p")
    assert render(one) == render(other)
    assert json.dumps(one.to_json()) == json.dumps(other.to_json())  # `diff --format json` too


def test_the_footer_names_the_price_snapshot_and_the_oldest_price_used():
    asg = res("aws:autoscaling/group:Group", "asg")
    nat = res("aws:ec2/natGateway:NatGateway", "nat")

    def stack(spot_as_of: str, nodes: int) -> Estimate:
        return est(
            priced(asg, CostComponent("p4d spot (n nodes)", "node-hour", 730 * nodes, 8.0, "catalog:skypilot-aws",
                                      as_of=spot_as_of)),
            priced(nat, CostComponent("NAT gateway hours", "hour", 730, 0.045, "rate:aws-nat-gateway-hour",
                                      as_of="2025")),
        )  # fmt: skip

    # the embedded snapshot's rows carry no date: said, with the snapshot's commit, never a made-up date
    footer = render(diff_estimates(stack("", 1), stack("", 2), "a", "b")).splitlines()[-1]
    assert "skypilot-aws (catalogs/v8/aws/vms.csv @ 00148f2a, undated)" in footer
    assert "list prices recorded by hand, as of 2025" in footer
    assert "oldest price used: undated (2 prices of 4 carry no date" in footer
    # refreshed (dated) prices: the oldest of every line on both sides
    footer = render(diff_estimates(stack("2026-10-02T08:00:00Z", 1), stack("2026-11-20T08:00:00Z", 2), "a", "b"))
    assert "oldest price used: 2025;" in footer.splitlines()[-1]  # the hand-recorded rate table is older
    only_catalog = render(diff_estimates(
        est(priced(asg, CostComponent("x", "node-hour", 730, 8.0, "catalog:skypilot-aws", as_of="2026-10-02"))),
        est(priced(asg, CostComponent("x", "node-hour", 1460, 8.0, "catalog:skypilot-aws", as_of="2026-11-20"))),
        "a", "b",
    ))  # fmt: skip
    assert "oldest price used: 2026-10-02;" in only_catalog.splitlines()[-1]


def test_a_removed_component_and_a_single_component_resource():
    vol = res("aws:ebs/volume:Volume", "vol")
    base = est(priced(vol, flat("EBS io2 100 GB", 12.5), flat("EBS io2 IOPS (1,000)", 65.0)))
    head = est(
        priced(vol, flat("EBS io2 100 GB", 12.5)), priced(res("aws:ec2/eip:Eip", "ip"), flat("IPv4", 3.65))
    )
    body = render(diff_estimates(base, head, "main", "pr", ops={vol.urn: "update"}))
    split = section(body, "Cost split by component (1 resource)")
    assert "  - EBS io2 IOPS (1,000): removed (was 1 month × $65.00 = $65.00)" in split and "`ip`" not in split  # one line only


# ---- 2. free resources: one line ------------------------------------------------------------------------


def test_free_resources_are_one_line_not_rows():
    iam = [free(res("aws:iam/role:Role", f"role-{i}"), "IAM carries no charge") for i in range(3)]
    net = [free(res("aws:ec2/subnet:Subnet", f"subnet-{i}"),
                "networking configuration with no hourly or data charge") for i in range(2)]  # fmt: skip
    lt = res("aws:ec2/launchTemplate:LaunchTemplate", "lt", imageId="ami-1")
    lt2 = res("aws:ec2/launchTemplate:LaunchTemplate", "lt", imageId="ami-2")
    why = "a launch template costs nothing; the instances it launches are priced on their group"
    ip = priced(res("aws:ec2/eip:Eip", "ip"), flat("public IPv4 address", 3.65))
    body = render(diff_estimates(est(free(lt, why)), est(*iam, *net, free(lt2, why), ip), "main", "pr"))
    # 3 + 2 + 1 free resources changed; most first, then by name
    assert (
        "- 6 free resources changed (no charge of their own, not in the table): 3 IAM, 2 networking, 1 template\n"
        in body
    )
    table = section(body, "Cost by resource (1 changed)")
    assert "| `ip` |" in table and "free" not in table and "role-0" not in table and "`lt`" not in table
    # a free resource's changed inputs are still listed
    assert "- `lt` `imageId`: `ami-1` → `ami-2`" in section(body, "Changed inputs (1)")


def test_a_free_reason_without_a_group_is_named_by_its_package_or_module():
    odd = free(res("acme:index/widget:Widget", "w"), "widgets are on the house")
    cfg = free(res("acme:dns/zoneSetting:ZoneSetting", "z"), "settings are on the house")
    body = render(diff_estimates(est(), est(odd, cfg), "main", "pr"))
    assert "- 2 free resources changed (no charge of their own, not in the table): 1 acme, 1 dns\n" in body


# ---- 3. user data --------------------------------------------------------------------------------------


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def lt_diff(path_inputs_base: dict, path_inputs_head: dict):
    why = "a launch template costs nothing; the instances it launches are priced on their group"
    base = est(free(res("aws:ec2/launchTemplate:LaunchTemplate", "lt", **path_inputs_base), why))
    head = est(free(res("aws:ec2/launchTemplate:LaunchTemplate", "lt", **path_inputs_head), why))
    return diff_estimates(base, head, "main", "pr")


def test_base64_user_data_is_a_decoded_line_diff_never_the_blob():
    old = "#!/bin/bash\nset -e\nexport NODES=2\nexport ZONE=a\nrun-train\n"  # 5 lines
    new = "#!/bin/bash\nset -e\nexport NODES=4\nexport ZONE=a\nexport EXTRA=1\nrun-train\n"  # 6 lines
    body = render(lt_diff({"userData": b64(old)}, {"userData": b64(new)}))
    # line 3 replaced (-1 +1), EXTRA inserted (+1): +2 -1; the first change is line 3
    assert (
        "- `lt` `userData` (base64 script, 5 → 6 lines): +2 −1 lines; first change (line 3): "
        "`- export NODES=2` `+ export NODES=4`"
    ) in body
    assert b64(old)[:16] not in body and b64(new)[:16] not in body


def test_gzipped_cloud_config_plain_gcp_metadata_and_binary_user_data():
    old = "#cloud-config\nruncmd:\n  - a\n"
    new = "#cloud-config\nruncmd:\n  - b\n"
    gz = lambda text: b64(gzip.compress(text.encode(), mtime=0))  # noqa: E731
    blob_a, blob_b = bytes(range(256)), bytes(range(255, -1, -1)) + b"\x00"
    body = render(lt_diff(
        {"osProfile": {"customData": gz(old)}, "metadata": {"startup-script": "echo a\necho b"},
         "userData": b64(blob_a)},
        {"osProfile": {"customData": gz(new)}, "metadata": {"startup-script": "echo a\necho c"},
         "userData": b64(blob_b)},
    ))  # fmt: skip
    assert ("`osProfile.customData` (gzip+base64 cloud-config, 3 → 3 lines): +1 −1 lines; "
            "first change (line 3): `- - a` `+ - b`") in body  # fmt: skip
    assert ("`metadata.startup-script` (text, 2 → 2 lines): +1 −1 lines; first change (line 2): "
            "`- echo b` `+ echo c`") in body  # fmt: skip
    sha_a, sha_b = hashlib.sha256(blob_a).hexdigest()[:12], hashlib.sha256(blob_b).hexdigest()[:12]
    assert f"`userData` (base64 binary): 256 → 257 bytes, sha256 {sha_a} → {sha_b}" in body
    assert b64(blob_a)[:16] not in body


# ---- 4. not priced vs not estimable ---------------------------------------------------------------------


def test_an_unknown_cost_says_its_real_status_and_the_summary_counts_them_by_type():
    svc = res("aws:ecs/service:Service", "svc")
    inst = res("aws:ec2/instance:Instance", "inst")
    base = est(priced(svc, flat("tasks", 10.0)))
    head = est(
        PricedResource(svc, NOT_PRICED, reason="no pricing function for aws:ecs/service:Service"),
        PricedResource(inst, NOT_ESTIMABLE, reason="instanceType unknown until apply"),
    )
    body = render(diff_estimates(base, head, "main", "pr", ops={svc.urn: "update"}))
    row = next(line for line in body.splitlines() if line.startswith("| `svc`"))
    assert row.endswith(
        "| $10.00 | not priced | not priced: no pricing function for aws:ecs/service:Service |"
    )
    assert "not estimable" not in row
    row = next(line for line in body.splitlines() if line.startswith("| `inst`"))
    assert row.endswith("| — | not estimable | not estimable: instanceType unknown until apply |")
    assert (
        "- ⚠️ Cost unknown, left out of the totals: head 1 not priced (aws:ecs/service:Service), "
        # unknown changes in URN order (the same bytes on every run)
        "1 not estimable (aws:ec2/instance:Instance); changed: `inst` (not estimable), `svc` (not priced)\n"
    ) in body


# ---- 5. budget and guardrail ------------------------------------------------------------------------------


def test_a_budget_breach_and_the_guardrail_before_and_after():
    r = res("aws:ec2/instance:Instance", "box")
    base = est(priced(r, flat("compute", 8000.0)), budget_usd=10000.0, guardrail_usd=11000.0)
    head = est(priced(r, flat("compute", 12000.0)), budget_usd=10000.0, guardrail_usd=11000.0)
    body = render(diff_estimates(base, head, "main", "pr"))
    # 10,000 - 8,000 = 2,000 to spare; 12,000 - 10,000 = 2,000 over; 12,000 - 11,000 = 1,000 over the guardrail
    assert "- Budget $10,000.00/month: within ($2,000.00 to spare) → 🛑 **over by $2,000.00**\n" in body
    assert "- Guardrail, fail above $11,000.00/month: pass → 🛑 **fails** (over by $1,000.00)\n" in body


def test_an_unchanged_budget_status_is_said_once_and_a_new_limit_both_ways():
    r = res("aws:ec2/instance:Instance", "box")
    base = est(priced(r, flat("compute", 8000.0)), budget_usd=10000.0, guardrail_usd=20000.0)
    head = est(priced(r, flat("compute", 9000.0)), budget_usd=9500.0, guardrail_usd=20000.0)
    body = render(diff_estimates(base, head, "main", "pr"))
    assert (
        "- Budget: $10,000.00/month, within ($2,000.00 to spare) → $9,500.00/month, within ($500.00 to spare)\n"
        in body
    )
    assert "- Guardrail, fail above $20,000.00/month: pass\n" in body


def test_no_budget_no_guardrail_says_nothing_of_them():
    r = res("aws:ec2/instance:Instance", "box")
    body = render(diff_estimates(est(priced(r, flat("c", 1.0))), est(priced(r, flat("c", 2.0))), "a", "b"))
    assert "Budget" not in body and "Guardrail" not in body and "exceeds" not in body


# ---- 6. the summary first ---------------------------------------------------------------------------------


def fleet(usd_per_hour: float, wall: float, interruptions: float, *assumptions: str) -> FleetExpectation:
    return FleetExpectation("train", usd_per_hour, 100.0, wall, interruptions, True, tuple(assumptions))


def test_the_summary_comes_first_in_order():
    r = res("aws:autoscaling/group:Group", "asg")
    svc = res("aws:ecs/service:Service", "svc")
    base = est(priced(r, flat("c", 8000.0)), budget_usd=10000.0, expected=[fleet(50.0, 110.0, 2.0)])
    head = est(
        priced(r, flat("c", 12000.0)),
        PricedResource(svc, NOT_PRICED, reason="no pricing function"),
        budget_usd=10000.0,
        guardrail_usd=15000.0,
        absent=12,
        expected=[fleet(100.0, 110.0, 2.5, "spot interruptions: bucket 5-10% in use1-az1")],
    )
    body = render(diff_estimates(base, head, "main", "pr"))
    lines = body.splitlines()
    assert lines[0] == marker("s")
    # 8,000 -> 12,000: +4,000, +50.0%
    assert lines[1] == "### `s` · **Monthly run-rate: $8,000.00 → $12,000.00 (+$4,000.00, +50.0%)**"
    # expected: base 50 $/h x 110 h = 5,500; head 100 x 110 = 11,000 (+5,500); the head's same work with
    # nothing lost is 100 x 100 h = 10,000, so interruptions add 1,000 / 10,000 = +10.0%
    expected = (
        "- Expected job with interruptions, fleet `train`: **$5,500.00 → $11,000.00 (+$5,500.00)**; "
        "110.0 h → 110.0 h wall clock, ~2.0 → ~2.5 interruptions and failures; at head the same work with "
        "nothing lost is $10,000.00 (100.0 h), interruptions add +10.0%; 80% range $9,460.00 to $20,570.00 (the "
        "planner's error on published whole runs)"
    )  # the range: 11,000 x 0.86 and x 1.87 (cli/planner/uncertainty.py)
    order = [
        "**Monthly run-rate:",
        expected,
        "- Budget $10,000.00/month: within ($2,000.00 to spare) → 🛑 **over by $2,000.00**",
        "- Guardrail, fail above $15,000.00/month: not checked: the document leaves out 12 unchanged resources",
        "- ⚠️ Cost unknown, left out of the totals: head 1 not priced (aws:ecs/service:Service)",
        "- ℹ️ the head document leaves out 12 unchanged resources (written without --show-sames): the totals "
        "cover only what they list",
        "- Infra: **1 added, 0 changed, 0 replaced, 0 removed** (1 unchanged)",  # asg: same inputs
        "<details>",
    ]
    at = [body.index(piece) for piece in order]
    assert at == sorted(at), order
    assert "\n".join(summary_lines(diff_estimates(base, head, "main", "pr"))) in body
    # the model's assumptions are with the usage assumptions
    assumptions = section(body, "Usage assumptions")
    assert "- `job_hours` = 100 hours (stack: job.planned_hours)" in assumptions
    assert "  - spot interruptions: bucket 5-10% in use1-az1" in assumptions


def test_both_documents_leaving_resources_out_is_said_once():
    r = res("aws:ec2/instance:Instance", "box")
    diff = diff_estimates(
        est(priced(r, flat("c", 1.0)), absent=1), est(priced(r, flat("c", 2.0)), absent=1), "a", "b"
    )
    assert (
        "- ℹ️ the preview documents leave out 1 unchanged resource (written without --show-sames): the totals "
        "cover only what they list\n"
    ) in render(diff)


def test_an_expected_note_is_one_line_and_nothing_without_one():
    r = res("aws:ec2/instance:Instance", "box")
    with_note = est(
        priced(r, flat("c", 2.0)), expected_note="train: no bf16 peak for x1.small's accelerators"
    )
    body = render(diff_estimates(est(priced(r, flat("c", 1.0))), with_note, "a", "b"))
    assert (
        "- No expected job cost with interruptions: train: no bf16 peak for x1.small's accelerators\n" in body
    )
    body = render(diff_estimates(est(priced(r, flat("c", 1.0))), est(priced(r, flat("c", 2.0))), "a", "b"))
    assert "xpected" not in body


# ---- 7. the size cap cuts details before assumptions ------------------------------------------------------


def test_a_huge_diff_keeps_the_summary_and_the_assumptions_under_the_limit():
    diff = _huge_diff(3000)
    diff.head.expected = [fleet(100.0, 110.0, 2.5, "restarts wait 10 min for capacity")]
    body = render(diff)
    assert len(body) <= GITHUB_COMMENT_LIMIT
    assert body.startswith("\n".join(summary_lines(diff)) + "\n")
    assumptions = section(body, "Usage assumptions")
    for key, value in diff.head.usage.items():  # every usage line, whole
        assert f"- `{key}` = {value.value:g} {value.unit} (" in assumptions
    assert "  - restarts wait 10 min for capacity" in assumptions
    # the details were cut, and each kept a share: table rows and input changes both shown
    assert "cut to stay under GitHub's 65,536-character comment limit" in body
    assert sum(line.startswith("| `fleet-") for line in body.splitlines()) > 50
    assert sum(line.startswith("- `fleet-") for line in body.splitlines()) > 50
    assert body.count("<details>") == body.count("</details>")


def test_when_even_the_assumptions_do_not_fit_they_are_cut_last():
    diff = _huge_diff(50)
    summary = "\n".join(summary_lines(diff))
    limit = len(summary) + 900  # room for the footer, the cut note and a few assumption lines, no details
    body = render(diff, limit=limit)
    assert len(body) <= limit and body.startswith(summary + "\n")
    assert "Usage assumptions" in body and "Cost by resource" not in body and "Changed inputs" not in body
    assert "assumption lines" in body  # said as cut


# ---- 8. no change: a short body that replaces the old comment ----------------------------------------------


def test_a_diff_without_changes_is_a_short_no_change_body():
    r = res("aws:ec2/instance:Instance", "box", instanceType="m5.large")
    same = est(priced(r, flat("compute", 70.08)), budget_usd=100.0)
    body = render(diff_estimates(same, same, "main:Pulumi.dev.yaml", "working tree Pulumi.dev.yaml"))
    lines = body.splitlines()
    assert lines[:3] == [marker("s"), NO_CHANGE_TAG, "### `s` · no cost change"]
    assert (
        "No cost change for this stack at `working tree Pulumi.dev.yaml`: **Monthly run-rate: $70.08** (unchanged)"
    ) in body
    assert "- Budget $100.00/month: within ($29.92 to spare)" in body  # 100 - 70.08
    assert "<details>" not in body and len(body) < 800


def test_a_cost_that_moves_without_an_op_is_a_change():
    r = res("aws:ec2/instance:Instance", "box")
    body = render(diff_estimates(est(priced(r, flat("c", 1.0))), est(priced(r, flat("c", 2.0))), "a", "b",
                                 ops={r.urn: "same"}))  # fmt: skip
    assert NO_CHANGE_TAG not in body and "**Monthly run-rate: $1.00 → $2.00 (+$1.00, +100.0%)**" in body
