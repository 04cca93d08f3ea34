"""The cost comment on `pulumi preview --json` documents shaped as the real engine writes them for our own
stacks (tests/preview_documents.py): fleets whose size is declared with ignore_changes, a deployed stack
whose job has ended (its group scaled to 0 by the agent), the stack config in each document (issue 33).

Hand-worked unit prices, from the offers.csv rows quoted (cloud,region,zone,type ... on_demand, spot):
  aws,us-east-1,use1-az6,p4de.24xlarge ... 27.44705,8.650500 ... skypilot-aws
  aws,us-east-1,use1-az6,p5.48xlarge ... 55.04,17.628900 ... skypilot-aws
  gcp,us-central1,us-central1-a,a2-highgpu-1g ... 3.67339,1.80385   (us-central1-b: the same)
  azure,eastus,,Standard_NC24ads_A100_v4 ... 3.673,0.444433
EBS gp3 $0.08/GB-month (https://aws.amazon.com/ebs/pricing/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli.preview.diff import diff_preview_files
from cli.preview.markdown import render
from cli.preview.usage import resolve_usage
from tests.preview_documents import GROUP_SIZE, declared, deployed_after_run, preview, stack_text

HOURS = 730
P4DE_SPOT_AZ6, P4DE_ON_DEMAND, EBS_GP3 = 8.6505, 27.44705, 0.08
P5_SPOT_AZ6, P5_ON_DEMAND = 17.6289, 55.04
A2_1G_SPOT = 1.80385  # us-central1-a and -b alike, so their mean
NC24ADS_SPOT = 0.444433
ROOT = Path(__file__).resolve().parent.parent

# stack, nodes before -> after, the group's name, (spot nodes before, after), spot $/node-hour
CASES = {
    "aws": ("prod", 4, 6, "main-asg", (3, 5), P4DE_SPOT_AZ6),  # one on-demand node, the rest spot
    "gcp": ("gcp-dev", 1, 3, "gdev-mig", (1, 3), A2_1G_SPOT),
    "azure": ("azure-dev", 1, 3, "adev-vmss", (1, 3), NC24ADS_SPOT),
}


def documents(tmp_path: Path, stack: str, nodes: int, **head_changes) -> tuple[Path, Path]:
    """(base, head) documents of a pull request that sets the first fleet's nodes (and what else is given),
    both previewed against the deployed stack after its last run ended."""
    base_resources, base_config = declared(stack, stack_text(stack))
    head_resources, head_config = declared(stack, stack_text(stack, nodes=nodes, **head_changes))
    deployed = deployed_after_run(base_resources)
    out = []
    for side, resources, config in (("base", base_resources, base_config), ("head", head_resources, head_config)):
        path = tmp_path / f"{stack}-{side}.json"
        path.write_text(json.dumps(preview(deployed, resources, config)))
        out.append(path)
    return out[0], out[1]


def _row(diff, name):
    return next(r for r in diff.rows if r.name == name)


def _spot(side):
    return next(c for c in side.components if " spot " in c.name)


@pytest.mark.parametrize("cloud", list(CASES))
def test_the_fleet_is_priced_at_the_size_it_will_run_not_the_ignored_capacity(tmp_path, cloud):
    stack, before, after, group, (spot_before, spot_after), spot_price = CASES[cloud]
    base, head = documents(tmp_path, stack, after)
    # what a real preview shows: the group's size is the deployed 0 on both sides, whatever `nodes` says
    head_doc = json.loads(head.read_text())
    step = next(s for s in head_doc["steps"] if s["urn"].endswith(f"::{group}"))
    size_key = GROUP_SIZE[step["newState"]["type"]]
    size = step["newState"]["inputs"]
    for part in size_key.split("."):
        size = size[part]
    assert size == 0

    diff = diff_preview_files(base, head, resolve_usage(None))
    row = _row(diff, group)
    assert _spot(row.base).quantity == spot_before * HOURS and _spot(row.head).quantity == spot_after * HOURS
    assert _spot(row.head).unit_price == pytest.approx(spot_price)
    assert "never sizes a group" in _spot(row.head).note and f"nodes {after}" not in _spot(row.head).note
    assert f"{after} nodes as the stack declares" in _spot(row.head).note
    body = render(diff)
    assert (
        f"- Fleet size: `{group}` at {after} nodes as the stack declares (fleets[{row.head.resource.name.split('-')[0]}]"
        f".nodes, what 'start_run' launches), not the group's {size_key} 0: pulumi up never sizes a group (created empty, sized by start_run)"
    ) in body
    assert f"spot ({spot_before} node{'s' if spot_before > 1 else ''}) →" in body
    assert f"spot ({spot_after} nodes)" in body


def test_two_more_prod_nodes_by_hand_and_the_expected_job_goes_the_other_way(tmp_path):
    """The issue's case: +2 p4de nodes on prod raise the monthly run-rate and shorten the job, so its
    expected cost falls; the comment and the JSON must both say so, base -> head."""
    base, head = documents(tmp_path, "prod", 6)
    diff = diff_preview_files(base, head, resolve_usage(None))
    # 2 more spot nodes and their 500 GB gp3 root volumes, a month: 12,629.73 + 80.00
    assert _row(diff, "main-asg").delta == pytest.approx(2 * HOURS * P4DE_SPOT_AZ6 + 2 * 500 * EBS_GP3)
    expected = diff.summary()["expected_job_usd"]
    (main,) = expected["fleets"]
    assert main["fleet"] == "main" and main["base"] and main["head"]
    assert main["delta_usd"] == round(main["head"]["expected_job_usd"] - main["base"]["expected_job_usd"], 2)
    assert main["delta_usd"] < 0 < diff.summary()["monthly_delta"]
    assert main["head"]["wall_hours"] < main["base"]["wall_hours"]
    assert expected["delta"] == main["delta_usd"]
    body = render(diff)
    b, h = main["base"]["expected_job_usd"], main["head"]["expected_job_usd"]
    assert f"**${b:,.2f} → ${h:,.2f} (-${b - h:,.2f})**" in body
    # prod sets no job.planned_hours: job_hours is the default month, so its list price is the monthly
    # run-rate under another name, and the comment does not show it twice
    assert "Planned job" not in body and "List price of every resource" not in body


def test_a_step_that_proves_the_resource_existed_is_never_an_addition(tmp_path):
    """A base document that lists only what changes, with no changeSummary to say what it left out (a
    filtered document, or one another tool wrote): the head's update step proves the group was deployed."""
    base, head = documents(tmp_path, "prod", 6)
    full_base = json.loads(base.read_text())
    partial = dict(full_base, steps=[s for s in full_base["steps"] if s["op"] != "same"])
    del partial["changeSummary"]
    assert not partial["steps"]  # the base program changes nothing against what is deployed
    bare = tmp_path / "base-changes-only.json"
    bare.write_text(json.dumps(partial))
    complete = diff_preview_files(base, head, resolve_usage(None))
    d = diff_preview_files(bare, head, resolve_usage(None))
    assert _row(d, "main-asg").op == "update" and d.count("create") == 0
    assert d.base.monthly_total == pytest.approx(complete.base.monthly_total)


def test_the_comment_is_byte_identical_under_other_hash_seeds(tmp_path):
    base, head = documents(tmp_path, "prod", 6, instance_type="p5.48xlarge")
    bodies = set()
    for seed in ("1", "4242"):
        proc = subprocess.run(
            [sys.executable, "-m", "cli", "diff", "--base", str(base), "--head", str(head), "--format", "markdown"],
            cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        bodies.add(proc.stdout)
    assert len(bodies) == 1


def test_fallback_types_are_priced_as_a_range_from_the_cheapest_to_the_dearest(tmp_path):
    """prod's group may launch p5.48xlarge where p4de.24xlarge is short (price-capacity-optimized spot picks
    by capacity, the on-demand base by priority): each line is priced at p4de with the range over both."""
    base, head = documents(tmp_path, "prod", 6)
    diff = diff_preview_files(base, head, resolve_usage(None))
    asg = _row(diff, "main-asg").head
    on_demand = next(c for c in asg.components if " on-demand " in c.name)
    assert on_demand.monthly_range == pytest.approx((HOURS * P4DE_ON_DEMAND, HOURS * P5_ON_DEMAND))
    assert _spot(asg).monthly_range == pytest.approx((5 * HOURS * P4DE_SPOT_AZ6, 5 * HOURS * P5_SPOT_AZ6))
    assert _spot(asg).range_types == ("p4de.24xlarge", "p5.48xlarge")
    low, high = diff.head.monthly_range
    assert low == pytest.approx(diff.head.monthly_total)  # p4de is the cheaper, and the one priced
    assert high - low == pytest.approx(HOURS * (P5_ON_DEMAND - P4DE_ON_DEMAND + 5 * (P5_SPOT_AZ6 - P4DE_SPOT_AZ6)))
    body = render(diff)
    assert f"the head's monthly run-rate is ${low:,.2f} to ${high:,.2f}" in body
    assert f"may launch p4de.24xlarge or p5.48xlarge: ${5 * HOURS * P4DE_SPOT_AZ6:,.2f} to ${5 * HOURS * P5_SPOT_AZ6:,.2f}" in body
