"""Planted bugs in the preview's pricing (the registry and shared helpers, and the AWS, GCP and Azure
functions): each one shows a pull request reviewer a monthly cost that is wrong, or $0 where it is unknown.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "preview-pricing"
TESTS = [
    "tests/test_preview_pricing_rules.py",
    "tests/test_preview_pricing.py",
    "tests/test_preview_stacks.py",
    "tests/test_cost_comment_real_previews.py",
]
RATES = "cli/preview/pricing/rates.py"
BASE = "cli/preview/pricing/base.py"
AWS = "cli/preview/pricing/aws.py"
GCP = "cli/preview/pricing/gcp.py"
AZURE = "cli/preview/pricing/azure.py"

MUTANTS = [
    # base.py: the registry and the helpers every cloud uses
    {
        "file": BASE,
        "bug": "a type with no pricing function is shown as free ($0) instead of not priced",
        "original": 'return PricedResource(resource, NOT_PRICED, reason=f"no pricing function',
        "replacement": 'return PricedResource(resource, FREE, reason=f"no pricing function',
    },
    {
        "file": BASE,
        "bug": "a component without a price is summed as priced (counted as $0)",
        "original": "unknown = [c for c in components if c.monthly_cost is None]",
        "replacement": "unknown = []",
    },
    {
        "file": BASE,
        "bug": "spot is priced at the cheapest zone, not the mean over the group's zones",
        "original": "mean = statistics.fmean(p for _, p, _ in known)",
        "replacement": "mean = min(p for _, p, _ in known)",
    },
    {
        "file": BASE,
        "bug": "a fleet's monthly compute counts one node whatever the node count",
        "original": "quantity=nodes * ctx.hours_per_month,",
        "replacement": "quantity=ctx.hours_per_month,",
    },
    {
        "file": BASE,
        "bug": "a fleet's job cost counts one node whatever the node count",
        "original": "job_quantity=nodes * ctx.job_hours,",
        "replacement": "job_quantity=ctx.job_hours,",
    },
    {
        "file": BASE,
        "bug": "the group's zones are ignored: spot priced over every zone of the region",
        "original": 'return ([o for o in offers if o.zone in zones] or offers) if zones else offers',
        "replacement": 'return offers',
    },
    {
        "file": BASE,
        "bug": "always-on charges (NAT gateway, addresses) are billed for fleet hours only",
        "original": "quantity=count * (ctx.hours_per_month if with_nodes else 730.0),",
        "replacement": "quantity=count * ctx.hours_per_month,",
    },
    {
        "file": BASE,
        "bug": "storage for the job is charged a whole month whatever the job's length",
        "original": "job_quantity=quantity * ctx.job_fraction,",
        "replacement": "job_quantity=quantity,",
    },
    {
        "file": BASE,
        "bug": "a month is 720 hours when prorating monthly charges to the job",
        "original": "return self.job_hours / 730.0",
        "replacement": "return self.job_hours / 720.0",
    },
    {
        "file": BASE,
        "bug": "a secret input is read as unset (its default) instead of not estimable",
        "original": 'raise NotEstimable(f"input {path} is a secret")',
        "replacement": "return default",
    },
    {
        "file": BASE,
        "bug": "a malformed document prices the resource as not priced instead of stopping the preview",
        "original": "except (TypeError, ValueError, ArithmeticError, AttributeError, KeyError, IndexError) as exc:",
        "replacement": "except () as exc:",
    },
    # aws.py
    {
        "file": AWS,
        "bug": "a mixed-instances group without a percentage is priced all spot (AWS's default is 100% on-demand)",
        "original": 'pct = int(number(dist, "onDemandPercentageAboveBaseCapacity", 100))',
        "replacement": 'pct = int(number(dist, "onDemandPercentageAboveBaseCapacity", 0))',
    },
    {
        "file": AWS,
        "bug": "the on-demand share of a mixed group is rounded down (AWS rounds up)",
        "original": "base + math.ceil(max(nodes - base, 0) * pct / 100)",
        "replacement": "base + math.floor(max(nodes - base, 0) * pct / 100)",
    },
    {
        "file": AWS,
        "bug": "an autoscaling group is priced at its min size, not its desired capacity",
        "original": 'declared_size(ctx, fleet, int(number(i, "desiredCapacity")), "desiredCapacity")',
        "replacement": 'declared_size(ctx, fleet, int(number(i, "minSize", 0)), "desiredCapacity")',
    },
    {
        "file": AWS,
        "bug": "a group whose launch template asks for spot is priced on-demand",
        "original": 'on_demand = 0 if market == "spot" else nodes',
        "replacement": "on_demand = nodes",
    },
    {
        "file": AWS,
        "bug": "an EC2 fleet with a spot target capacity is priced all spot",
        "original": "on_demand = max(0, total - int(spot))",
        "replacement": "on_demand = 0",
    },
    {
        "file": AWS,
        "bug": "each node's EBS root volume is counted once for the whole group",
        "original": "f\"EBS {kind}{where} {size:g} GB{nodes}\", size * count,",
        "replacement": "f\"EBS {kind}{where} {size:g} GB{nodes}\", size,",
    },
    {
        "file": AWS,
        "bug": "the group's subnets' zones are dropped: spot priced over every zone of the region",
        "original": 'return sorted(set(zones)), ""',
        "replacement": 'return [], ""',
    },
    {
        "file": AWS,
        "bug": "a billing-export bucket is priced with the checkpoint size and egress",
        "original": "if _is_billing_bucket(r, ctx):",
        "replacement": "if False:",
    },
    # gcp.py
    {
        "file": GCP,
        "bug": "preemptible (legacy spot) GCP VMs are priced on-demand",
        "original": "return get(sched, \"provisioningModel\") == \"SPOT\" or get(sched, \"preemptible\") in (True, \"true\")",
        "replacement": "return get(sched, \"provisioningModel\") == \"SPOT\"",
    },
    {
        "file": GCP,
        "bug": "a zonal instance group uses its zone as the region, so nothing in it is priced",
        "original": 'region = zone.rsplit("-", 1)[0] if isinstance(zone, str) and zone else',
        "replacement": "region = zone if isinstance(zone, str) and zone else",
    },
    {
        "file": GCP,
        "bug": "each node's persistent disk is counted once for the whole group",
        "original": "size * nodes,\n                              rate_id, region, with_nodes=True)",
        "replacement": "size,\n                              rate_id, region, with_nodes=True)",
    },
    {
        "file": GCP,
        "bug": "a regional group's distribution zones are ignored",
        "original": "elements(r.inputs, \"distributionPolicyZones\", str)",
        "replacement": "[]",
    },
    # azure.py
    {
        "file": AZURE,
        "bug": "an Azure disk exactly at a tier's size is billed at the next tier",
        "original": "if gb >= size]",
        "replacement": "if gb > size]",
    },
    {
        "file": AZURE,
        "bug": "Low-priority scale sets are priced as regular (on-demand) VMs",
        "original": 'in ("Spot", "Low")',
        "replacement": 'in ("Spot",)',
    },
    {
        "file": AZURE,
        "bug": "a priority mix without a percentage is priced all regular, not all spot",
        "original": 'pct = int(number(mix, "regularPriorityPercentageAboveBase", 0))',
        "replacement": 'pct = int(number(mix, "regularPriorityPercentageAboveBase", 100))',
    },
    {
        "file": AZURE,
        "bug": "an Azure OS disk is billed at the largest tier, not the smallest that fits",
        "original": "tier_gb, usd = fits[0]",
        "replacement": "tier_gb, usd = fits[-1]",
    },
    # issue 33
    {
        "file": BASE,
        "bug": "a fleet is priced at the size a real preview keeps (ignore_changes: 0 after a job), not its nodes",
        "original": "if fleet is None or fleet.nodes == nodes:",
        "replacement": "if True:",
    },
    {
        "file": BASE,
        "bug": "a group's fallback types never raise its range: p5 capacity priced as if it were p4de",
        "original": "c.monthly_range = (min(priced.values()), max(priced.values()))",
        "replacement": "c.monthly_range = (min(priced.values()), min(priced.values()))",
    },
    {
        "file": RATES,
        "bug": "decimal GB are charged at a per-GiB rate (7% too much)",
        "original": "return gb * 1e9 / RATES[rate_id].bytes_per_unit",
        "replacement": "return gb",
    },
]
