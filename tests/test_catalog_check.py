"""`trainfleet catalog check`: rows whose prices or hardware facts a plan should not take at face value."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from infra.catalog.checks import RULE_KEYS, check, counts
from infra.catalog.loader import DATA_DIR, read_offers
from infra.catalog.refresh.overlay import write_overlay
from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import isolated_env

SNAPSHOT = read_offers(DATA_DIR / "offers.csv")
NOW = datetime(2026, 11, 29, tzinfo=UTC)


def naive_spot_not_below_on_demand() -> list[tuple[str, str, str]]:
    """Straight from the CSV text, apart from the loader and the rules: rows whose spot >= on-demand."""
    with (DATA_DIR / "offers.csv").open(newline="") as fh:
        return [(r["cloud"], r["zone"] or r["region"], r["instance_type"]) for r in csv.DictReader(fh)
                if r["spot_usd_per_hour"] and r["on_demand_usd_per_hour"]
                and float(r["spot_usd_per_hour"]) >= float(r["on_demand_usd_per_hour"])]  # fmt: skip


def test_spot_at_or_above_on_demand_is_flagged_on_every_such_row_and_noted_on_the_row():
    expected = naive_spot_not_below_on_demand()
    assert len(expected) == 57  # the count issue 32 reported from the same snapshot
    found = [f for f in check(SNAPSHOT, {}, 90, NOW) if f.rule == "spot-not-below-on-demand"]
    assert sorted((f.offer.cloud, f.offer.zone or f.offer.region, f.offer.instance_type) for f in found) == sorted(
        expected
    )
    for f in found:  # kept, and visibly: `catalog show` prints the note
        assert "spot at or above on-demand" in f.offer.note or "spot equals pay-as-you-go" in f.offer.note
    shown = run_trainfleet("catalog", "show", "p5.48xlarge", "--region", "us-east-1", "--json").json()
    noted = {o["zone"]: o["note"] for o in shown["offers"] if o["spot_usd_per_hour"] == 55.04}
    assert set(noted) == {"use1-az1", "use1-az4"}  # the two rows the issue names
    assert all("spot at or above on-demand in the source" in n for n in noted.values())


def test_a_zone_under_half_its_neighbours_median_is_flagged_worked_by_hand():
    base = next(o for o in SNAPSHOT if o.cloud == "aws" and o.spot_usd_per_hour)
    zones = {"z-a": 1.0, "z-b": 1.2, "z-c": 0.4, "z-d": 0.6}
    offers = [replace(base, zone=z, spot_usd_per_hour=p, on_demand_usd_per_hour=10.0) for z, p in zones.items()]
    found = {f.offer.zone: f.detail for f in check(offers, {}, 90, NOW) if f.rule == "spot-far-below-neighbours"}
    # z-c: others 1.0, 1.2, 0.6 -> median 1.0, 2.5x its 0.4; z-d: others 1.0, 1.2, 0.4 -> median 1.0, 1.7x: not flagged
    assert found == {"z-c": "spot $0.4000/h, 2.5x under the median $1.0000/h of 3 other zones"}


def test_an_old_refreshed_price_is_too_old_past_the_limit_and_an_undated_one_is_undated():
    row = next(o for o in SNAPSHOT if o.instance_type == "Standard_ND96asr_v4" and o.region == "eastus")
    old = replace(row, source="azure-retail-prices", as_of="2026-07-01T00:00:00Z")  # 151 days before NOW
    assert [(f.rule, f.detail) for f in check([old], {}, 90, NOW) if f.rule.startswith("price")] == [
        ("price-too-old", "observed 2026-07-01, 151 days old")
    ]
    assert not [f for f in check([old], {}, 200, NOW) if f.rule.startswith("price")]
    assert [f.rule for f in check([row], {}, 90, NOW) if f.rule.startswith("price")] == ["price-undated"]


def test_cli_counts_every_rule_and_lists_one_rules_rows(tmp_path):
    env = isolated_env(tmp_path)
    row = next(o for o in SNAPSHOT if o.instance_type == "Standard_ND96asr_v4" and o.region == "eastus")
    as_of = (datetime.now(UTC) - timedelta(days=120)).strftime("%Y-%m-%dT%H:%M:%SZ")
    write_overlay(tmp_path / "catalog-overlay.csv", [replace(row, source="azure-retail-prices", as_of=as_of)])
    got = run_trainfleet("catalog", "check", "--cloud", "azure", "--json", env=env).json()
    rows = {r["rule"]: r["rows"] for r in got["rules"]}
    assert list(rows) == list(RULE_KEYS) and got["offers"] == sum(o.cloud == "azure" for o in SNAPSHOT)
    assert rows["price-too-old"] == 1 and rows["price-undated"] == got["offers"] - 1 - rows["price-missing"]
    assert sum(rows.values()) == len(got["findings"])
    listed = run_trainfleet("catalog", "check", "--cloud", "azure", "--rule", "price-too-old", "--json", env=env)
    assert [(f["instance_type"], f["region"]) for f in listed.json()["findings"]] == [("Standard_ND96asr_v4", "eastus")]
    later = run_trainfleet("catalog", "check", "--cloud", "azure", "--json", "--max-price-age", "365", env=env).json()
    assert {r["rule"]: r["rows"] for r in later["rules"]}["price-too-old"] == 0
    text = run_trainfleet("catalog", "check", env=env)
    assert text.code == 0 and "spot-not-below-on-demand" in text.stdout and "57" in text.stdout


def test_counts_list_every_rule_even_when_none_fire():
    assert counts([]) == dict.fromkeys(RULE_KEYS, 0)


def test_a_bad_rule_or_cloud_is_one_line():
    assert_one_line_error(run_trainfleet("catalog", "check", "--rule", "spot-cheap"), "--rule", "price-undated")
    assert_one_line_error(run_trainfleet("catalog", "check", "--cloud", "ibm"), "--cloud")


def test_interruption_rules_count_assumed_unknown_and_old_buckets_and_a_refresh_clears_old(tmp_path):
    with (DATA_DIR / "offers.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assumed = sum(r["interruption_source"] == "assumed-interruption" for r in rows)
    unknown = sum(r["interruption_bucket"] == "" for r in rows)
    advisor = sum(r["interruption_source"] == "aws-spot-advisor" for r in rows)  # published 2025-06-28
    got = counts(check(SNAPSHOT, {"aws-spot-advisor": {"as_of": "2025-06-28"}}, 90, NOW))
    assert (got["interruption-assumed"], got["interruption-unknown"], got["interruption-too-old"]) == (
        assumed, unknown, advisor)  # fmt: skip
    assert counts(check(SNAPSHOT, {"aws-spot-advisor": {"as_of": "2025-06-28"}}, 600, NOW))["interruption-too-old"] == 0
    # a refresh an hour ago dates the buckets it covers
    p5 = sum(r["instance_type"] == "p5.48xlarge" and r["region"] == "us-east-1" and r["interruption_bucket"] != ""
             for r in rows)  # fmt: skip
    fetched = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    (tmp_path / "spot-advisor.json").write_text(json.dumps(
        {"format": 1, "fetched_at": fetched, "source": "test", "buckets": [["us-east-1", "p5.48xlarge", 4]]}))
    cli = run_trainfleet("catalog", "check", "--cloud", "aws", "--json", env=isolated_env(tmp_path)).json()
    assert {r["rule"]: r["rows"] for r in cli["rules"]}["interruption-too-old"] == advisor - p5 > 0
