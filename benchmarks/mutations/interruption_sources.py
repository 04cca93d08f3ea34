"""Planted bugs in what each cloud publishes about spot interruptions and capacity, and how the planner reads it:
rates with their period (infra/catalog/interruption.py), Azure's eviction rates (infra/catalog/azure_eviction.py,
refresh/azure_eviction.py), GCP's preemption history (infra/catalog/gcp_preemption.py, refresh/gcp_preemption.py)
and Azure's placement levels (infra/catalog/capacity.py, refresh/azure_placement.py, cli/planner/capacity.py).
Each one shows a user an interruption rate or a capacity the evidence does not support, or asks a cloud in a way
it refuses.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "interruption-sources"
TESTS = [
    "tests/test_planner_reliability.py",
    "tests/test_capacity_refresh_azure.py",
    "tests/test_capacity_refresh_gcp.py",
    "tests/test_capacity_refresh_azure_placement.py",
]
RATE = "infra/catalog/interruption.py"
AZ_FETCH = "infra/catalog/refresh/azure_eviction.py"
GCP_FETCH = "infra/catalog/refresh/gcp_preemption.py"

MUTANTS = [
    {
        "file": RATE,
        "bug": "an hourly rate is read per month: Azure's 0-5%/hour looks 730 times safer than it is",
        "original": "return -math.log1p(-min(self.taken, 0.999)) / self.period_hours",
        "replacement": "return -math.log1p(-min(self.taken, 0.999)) / HOURS_PER_MONTH",
    },
    {
        "file": RATE,
        "bug": "a range is taken at its floor: '<5%' becomes no interruptions at all",
        "original": "return (self.low + self.high) / 2 if self.high is not None",
        "replacement": "return self.low if self.high is not None",
    },
    {
        "file": RATE,
        "bug": "an open top range ('>20%') is taken at its floor",
        "original": "else self.low * OPEN_TOP_FACTOR",
        "replacement": "else self.low",
    },
    {
        "file": AZ_FETCH,
        "bug": "the query leaves `id` out of its projection, so Resource Graph cannot page and truncates",
        "original": '"| project id, skuName = tostring(sku.name)',
        "replacement": '"| project skuName = tostring(sku.name)',
    },
    {
        "file": AZ_FETCH,
        "bug": "only the first page of eviction rates is kept",
        "original": 'skip = page.get("$skipToken")',
        "replacement": "skip = None",
    },
    {
        "file": AZ_FETCH,
        "bug": "asks for more rows a page than Resource Graph allows ($top at most 1000)",
        "original": "PAGE_SIZE = 1000",
        "replacement": "PAGE_SIZE = 5000",
    },
    {
        "file": GCP_FETCH,
        "bug": "a fresh project's refusal is learnt from 650 requests in parallel instead of the first one",
        "original": "    if pairs:\n        take(*one(pairs[0]))\n    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:\n"
        "        for pair, got in pool.map(one, pairs[1:]):\n",
        "replacement": "    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:\n"
        "        for pair, got in pool.map(one, pairs):\n",
    },
    {
        "file": GCP_FETCH,
        "bug": "asks the history of standard VMs, which capacityHistory refuses (it must be SPOT)",
        "original": '"machineType": machine_type, "scheduling": {"provisioningModel": "SPOT"}',
        "replacement": '"machineType": machine_type, "scheduling": {"provisioningModel": "STANDARD"}',
    },
    {
        "file": "infra/catalog/gcp_preemption.py",
        "bug": "the worst interval's preemption share is shown as the share over the window",
        "original": "sum(r for _, _, r in rows) / len(rows)",
        "replacement": "max(r for _, _, r in rows)",
    },
    {
        "file": "infra/catalog/capacity.py",
        "bug": "Azure's Low is read as having no number, so plans go where Azure says deployments will likely fail",
        "original": '"Low": SCORE_MIN,',
        "replacement": '"Low": None,',
    },
    {
        "file": "cli/planner/capacity.py",
        "bug": "Azure's Medium (no number) is taken as a measured score, which reads as capacity always there",
        "original": "if found is not None and found.score is not None:",
        "replacement": "if found is not None:",
    },
    {
        "file": "infra/catalog/refresh/azure_placement.py",
        "bug": "six sizes a request, one more than Azure takes",
        "original": "MAX_LOCATIONS, MAX_SIZES = 8, 5",
        "replacement": "MAX_LOCATIONS, MAX_SIZES = 8, 6",
    },
]
