"""Planted bugs in how old a price is (infra/catalog/price_age.py), the catalog's check rules
(infra/catalog/checks.py, neighbours.py), the refreshed Spot Advisor buckets (infra/catalog/advisor.py,
refresh/advisor.py), the network figures the build writes (infra/catalog/build.py) and the start-wait rule of
plan feasibility (cli/planner/reliability.py): each one shows a user a price, a flag or a plan the evidence does
not support.

A table for benchmarks/mutation.py: each mutant replaces one exact snippet (which must occur once)."""

MODULE = "catalog-freshness"
TESTS = [
    "tests/test_price_age.py",
    "tests/test_catalog_check.py",
    "tests/test_catalog_network.py",
    "tests/test_spot_advisor_refresh.py",
    "tests/test_planner_reliability.py",
]
AGE = "infra/catalog/price_age.py"
CHECKS = "infra/catalog/checks.py"

MUTANTS = [
    {
        "file": AGE,
        "bug": "a price exactly at the age limit is called too old",
        "original": "return self.days is None or self.days > max_days",
        "replacement": "return self.days is None or self.days >= max_days",
    },
    {
        "file": AGE,
        "bug": "an undated price among dated ones is skipped, so a plan on the snapshot looks freshly priced",
        "original": "        if when is None:\n            return PriceAge(offer.source, None, now)\n",
        "replacement": "        if when is None:\n            continue\n",
    },
    {
        "file": AGE,
        "bug": "the refresh command forgets the plan's region, so the user refreshes every region",
        "original": 'f" --regions {\',\'.join(regions)}" if regions else ""',
        "replacement": '""',
    },
    {
        "file": AGE,
        "bug": "a date a source names (the advisor snapshot's 2025-06-28) is ignored, so its data never looks old",
        "original": "return parse_time(text) if text[:4].isdigit() else None",
        "replacement": "return None",
    },
    {
        "file": CHECKS,
        "bug": "a spot price equal to on-demand is not flagged",
        "original": "if spot is not None and on_demand is not None and spot >= on_demand:",
        "replacement": "if spot is not None and on_demand is not None and spot > on_demand:",
    },
    {
        "file": CHECKS,
        "bug": "a row with no price is also counted as undated",
        "original": '        yield "price-missing", "no price"\n        return\n',
        "replacement": '        yield "price-missing", "no price"\n',
    },
    {
        "file": CHECKS,
        "bug": "advisor buckets of any age pass the interruption age rule",
        "original": "if published.observed is not None and published.too_old(max_age_days):",
        "replacement": "if published.observed is not None and published.too_old(max_age_days * 10):",
    },
    {
        "file": "infra/catalog/neighbours.py",
        "bug": "a zone is compared with itself, so a cheap outlier drags its own median down",
        "original": "and o.zone != offer.zone and o.spot_usd_per_hour]",
        "replacement": "and o.spot_usd_per_hour]",
    },
    {
        "file": "infra/catalog/advisor.py",
        "bug": "refreshed advisor buckets are looked up by (type, region), so none is ever applied",
        "original": "bucket = refresh.buckets.get((o.region, o.instance_type)) if o.cloud == \"aws\" else None",
        "replacement": "bucket = refresh.buckets.get((o.instance_type, o.region)) if o.cloud == \"aws\" else None",
    },
    {
        "file": "infra/catalog/refresh/advisor.py",
        "bug": "a feed whose ranges changed meaning is written as if its buckets were the catalog's",
        "original": "    if labels != list(INTERRUPTION_BUCKETS.values()):\n",
        "replacement": "    if not labels:\n",
    },
    {
        "file": "infra/catalog/build.py",
        "bug": "an 'Up to 10 Gigabit' type is given its burst figure instead of its 2.5 Gbit/s baseline",
        "original": '"g5.xlarge": (2.5, ""),',
        "replacement": '"g5.xlarge": (10, ""),',
    },
    {
        "file": "cli/planner/reliability.py",
        "bug": "the wait for the first nodes counts as running time, refusing fast setups a slower one passes",
        "original": "if useful_s < MIN_EFFICIENCY * (wall - capacity_wait_s):",
        "replacement": "if useful_s < MIN_EFFICIENCY * wall:",
    },
]
