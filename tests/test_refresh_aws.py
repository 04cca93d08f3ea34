"""`trainfleet catalog refresh --cloud aws` over real HTTP on loopback: on-demand prices from the fake Price
List API, AWS zones from moto's server, spot price history from tests/fake_ec2_spot.py (seeded with distinct
prices per zone and per time, since moto answers 0.00001 everywhere and cannot be seeded)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from infra.catalog.loader import DATA_DIR, read_offers
from infra.catalog.refresh.overlay import read_overlay
from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_ec2_spot import LINUX, LINUX_VPC, FakeEc2Spot, SpotPrice
from tests.fake_price_apis import PRICE_FACTOR, FakePriceApis, Faults, isolated_env

SNAPSHOT = read_offers(DATA_DIR / "offers.csv")
NOW = datetime.now(UTC).replace(microsecond=0)  # seeds are whole seconds, as the API's timestamps are
# moto's account maps us-east-1 AZ names to ids like this (moto/ec2/models/availability_zones_and_regions.py);
# test_moto_zone_ids_are_as_written checks it, so a moto upgrade that changes it fails loudly there.
USE1_ZONE_IDS = {
    "us-east-1a": "use1-az6",
    "us-east-1b": "use1-az1",
    "us-east-1c": "use1-az2",
    "us-east-1d": "use1-az4",
    "us-east-1e": "use1-az3",
    "us-east-1f": "use1-az5",
}


def hours_ago(hours: float) -> datetime:
    return NOW - timedelta(hours=hours)


@pytest.fixture
def fake():
    server = FakePriceApis(Faults(aws_throttled_regions={"us-east-2"})).start()
    yield server
    server.stop()


@pytest.fixture
def spot(moto):
    server = FakeEc2Spot(moto.url).start()
    yield server
    server.stop()


@pytest.fixture
def env(tmp_path, moto, fake, spot):
    return {**isolated_env(tmp_path), **fake.env(), **moto.env(), **spot.env()}


def snapshot_on_demand(region: str, instance_type: str) -> float:
    return next(
        o.on_demand_usd_per_hour
        for o in SNAPSHOT
        if o.cloud == "aws" and o.region == region and o.instance_type == instance_type
    )


def snapshot_row(zone: str, instance_type: str):
    (row,) = [o for o in SNAPSHOT if o.cloud == "aws" and o.zone == zone and o.instance_type == instance_type]
    return row


def refresh_us_east_1(env, tmp_path) -> dict[tuple[str, str], object]:
    """Run the refresh for us-east-1 and return its overlay rows by (zone id, instance type)."""
    result = run_trainfleet("catalog", "refresh", "--cloud", "aws", "--regions", "us-east-1", env=env)
    assert result.code == 0, result.stdout + result.stderr
    return {(o.zone, o.instance_type): o for o in read_overlay(tmp_path / "catalog-overlay.csv")}


def test_refresh_writes_today_prices_per_zone(env, tmp_path, fake):
    result = run_trainfleet(
        "catalog", "refresh", "--cloud", "aws", "--regions", "us-east-1,us-west-2", env=env
    )
    assert result.code == 0, result.stderr
    assert "2 of 2 regions refreshed" in result.stdout
    rows = read_overlay(tmp_path / "catalog-overlay.csv")
    assert {o.region for o in rows} == {"us-east-1", "us-west-2"}
    assert {o.source for o in rows} == {"aws-price-list+spot-history"} and all(
        o.as_of.endswith("Z") for o in rows
    )
    p4d = [o for o in rows if o.instance_type == "p4d.24xlarge" and o.region == "us-east-1"]
    # On-demand from the Price List (fixture = snapshot x PRICE_FACTOR), one price for every zone.
    expected = round(snapshot_on_demand("us-east-1", "p4d.24xlarge") * PRICE_FACTOR, 5)
    assert p4d and all(o.on_demand_usd_per_hour == pytest.approx(expected) for o in p4d)
    # Zones are keyed by AZ *id* (what the spot tests below check is which spot price each zone gets).
    assert {o.zone for o in p4d} <= {"use1-az1", "use1-az2", "use1-az3", "use1-az4", "use1-az5", "use1-az6"}
    assert all(o.zone.startswith("use1-") for o in rows if o.region == "us-east-1")  # ids, never us-east-1a
    # Hardware facts come from the catalog, not the price API.
    assert {(o.accelerator, o.accelerators_per_node) for o in p4d} == {("A100-40GB", 8)}
    # The Price List was paged: every product query asked again with the NextToken.
    asked = [d for api, d in fake.requests if api == "aws-pricing"]
    assert any(d.endswith("page-2") for d in asked) and any(not d.endswith("page-2") for d in asked)


def test_catalog_commands_use_the_overlay(env, spot):
    # p5e.48xlarge has no on-demand price in the Price List (none in offers.csv either): only a spot price
    # refreshes its us-west-2 row (usw2-az3 is moto's us-west-2c).
    assert spot.zone_id("us-west-2", "us-west-2c") == "usw2-az3"
    spot.seed("us-west-2", [SpotPrice("us-west-2c", "p5e.48xlarge", "18.5000", hours_ago(1))])
    assert run_trainfleet("catalog", "refresh", "--cloud", "aws", "--regions", "us-west-2", env=env).code == 0
    shown = run_trainfleet(
        "catalog", "show", "p4d.24xlarge", "--region", "us-west-2", "--json", env=env
    ).json()
    assert {o["source"] for o in shown["offers"]} == {"aws-price-list+spot-history"}
    expected = round(snapshot_on_demand("us-west-2", "p4d.24xlarge") * PRICE_FACTOR, 5)
    assert all(o["on_demand_usd_per_hour"] == pytest.approx(expected) for o in shown["offers"])
    status = run_trainfleet("catalog", "status", "--cloud", "aws", "--json", env=env).json()
    groups = {(g["region"], g["kind"]) for g in status["groups"]}
    assert ("us-west-2", "refresh") in groups and ("us-east-1", "snapshot") in groups
    assert ("us-west-2", "snapshot") not in groups  # every us-west-2 row was refreshed
    p5e = run_trainfleet("catalog", "show", "p5e.48xlarge", "--region", "us-west-2", "--json", env=env).json()
    assert [(o["zone"], o["spot_usd_per_hour"]) for o in p5e["offers"]] == [("usw2-az3", 18.5)]
    assert status["from_refresh"] > 0 and status["from_snapshot"] > 0
    west = next(g for g in status["groups"] if g["region"] == "us-west-2")
    assert west["age_hours"] is not None and 0 <= west["age_hours"] < 1


def test_throttled_region_is_reported_and_others_still_written(env, tmp_path):
    result = run_trainfleet(
        "catalog", "refresh", "--cloud", "aws", "--regions", "us-east-2,us-west-2", "--json", env=env
    )
    assert result.code == 1  # some regions failed
    report = result.json()
    by_region = {r["region"]: r for r in report["regions"]}
    assert by_region["us-west-2"]["ok"] and by_region["us-west-2"]["offers"] > 0
    assert not by_region["us-east-2"]["ok"] and "ThrottlingException" in by_region["us-east-2"]["error"]
    rows = read_overlay(tmp_path / "catalog-overlay.csv")
    assert {o.region for o in rows} == {"us-west-2"}  # the throttled region keeps its snapshot prices


def test_table_output_names_the_failed_region(env):
    result = run_trainfleet("catalog", "refresh", "--cloud", "aws", "--regions", "us-east-2", env=env)
    assert result.code == 1
    assert "us-east-2" in result.stdout and "failed" in result.stdout and "Rate exceeded" in result.stdout
    assert "0 of 1 regions refreshed" in result.stdout


def test_without_credentials_one_line(tmp_path):
    env = {
        **isolated_env(tmp_path),
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_SESSION_TOKEN": "",
    }
    result = run_trainfleet("catalog", "refresh", "--cloud", "aws", "--regions", "us-east-1", env=env)
    assert_one_line_error(result, "no AWS credentials", "aws configure")
    assert not (tmp_path / "catalog-overlay.csv").exists()


def test_unknown_region_and_cloud_are_one_line_errors(env):
    assert_one_line_error(
        run_trainfleet("catalog", "refresh", "--cloud", "aws", "--regions", "us-east-9", env=env),
        "us-east-9", "did you mean",
    )  # fmt: skip
    assert_one_line_error(run_trainfleet("catalog", "refresh", "--cloud", "awz", env=env), "awz", "aws")


# -- spot prices: the latest Linux price per zone ------------------------------------------------------
def test_moto_zone_ids_are_as_written(spot):
    assert {name: spot.zone_id("us-east-1", name) for name in USE1_ZONE_IDS} == USE1_ZONE_IDS


# p4d.24xlarge in us-east-1, worked by hand. The refresh asks for the last 6 hours; the API also returns each
# series' last change before that (its price at the window's start).
P4D = "p4d.24xlarge"
P4D_HISTORY = [
    # us-east-1a: the latest (4.25) is neither the oldest returned (2.00, effective at the start) nor the max.
    SpotPrice("us-east-1a", P4D, "2.0000", hours_ago(30)),
    SpotPrice("us-east-1a", P4D, "3.0000", hours_ago(5)),
    SpotPrice("us-east-1a", P4D, "9.0000", hours_ago(3)),
    SpotPrice("us-east-1a", P4D, "4.2500", hours_ago(1)),
    # ... and newer prices for other operating systems, which a Linux fleet never pays.
    SpotPrice("us-east-1a", P4D, "0.0100", hours_ago(0.2), product="Windows"),
    SpotPrice("us-east-1a", P4D, "0.0200", hours_ago(0.2), product="SUSE Linux"),
    SpotPrice("us-east-1a", P4D, "99.000", hours_ago(0.2), product="Red Hat Enterprise Linux (Amazon VPC)"),
    # us-east-1b: the latest change is listed under the VPC flavour of Linux/UNIX, which is Linux too.
    SpotPrice("us-east-1b", P4D, "1.1000", hours_ago(4), product=LINUX),
    SpotPrice("us-east-1b", P4D, "5.5000", hours_ago(2), product=LINUX_VPC),
    # us-east-1c: no change for two days: the price then is the price now.
    SpotPrice("us-east-1c", P4D, "1.2345", hours_ago(72)),
    SpotPrice("us-east-1c", P4D, "6.7500", hours_ago(48)),
    # us-east-1e (use1-az3): a zone the snapshot has no p4d row for.
    SpotPrice("us-east-1e", P4D, "7.7700", hours_ago(2)),
    # us-east-1d (use1-az4): nothing at all.
]
P4D_EXPECTED_SPOT = {"use1-az6": 4.25, "use1-az1": 5.50, "use1-az2": 6.75, "use1-az3": 7.77}


@pytest.mark.parametrize("newest_first", [True, False], ids=["newest-first", "oldest-first"])
def test_latest_linux_spot_price_per_zone_wins(env, tmp_path, spot, newest_first):
    spot.newest_first = newest_first  # the docs disagree on the order; the answer must not depend on it
    spot.seed("us-east-1", P4D_HISTORY)
    rows = refresh_us_east_1(env, tmp_path)
    got = {zone: rows[zone, P4D].spot_usd_per_hour for zone in P4D_EXPECTED_SPOT}
    assert got == pytest.approx(P4D_EXPECTED_SPOT)
    # The new zone gets the catalog's hardware facts and today's on-demand price.
    new_zone = rows["use1-az3", P4D]
    assert (new_zone.accelerator, new_zone.accelerators_per_node) == ("A100-40GB", 8)
    assert new_zone.on_demand_usd_per_hour == pytest.approx(round(21.957642 * PRICE_FACTOR, 5))  # offers.csv
    # A zone with no spot history keeps the snapshot's spot price (offers.csv: use1-az4 p4d 8.120300), and
    # the row says where that price came from.
    assert snapshot_row("use1-az4", P4D).spot_usd_per_hour == 8.1203
    assert rows["use1-az4", P4D].spot_usd_per_hour == 8.1203
    assert "spot from skypilot-aws" in rows["use1-az4", P4D].note


def bulk_history(rng: random.Random) -> list[SpotPrice]:
    """Every us-east-1 type of the snapshot in every zone: four changes in the window and one before it
    (45 types x 6 zones x 5 = 1350 records, more than one 1000-item page). p4d in us-east-1c has a single
    change two days ago, so newest first it is the very last record: on the last page."""
    types = sorted({o.instance_type for o in SNAPSHOT if o.cloud == "aws" and o.region == "us-east-1"})
    history = []
    for instance_type in types:
        for zone in USE1_ZONE_IDS:
            if (zone, instance_type) == ("us-east-1c", P4D):
                history.append(SpotPrice(zone, P4D, "6.7500", hours_ago(48)))
                continue
            before_window = hours_ago(rng.uniform(7, 20))
            in_window = [NOW - timedelta(minutes=m) for m in rng.sample(range(10, 350), 4)]
            for when in (before_window, *in_window):
                history.append(SpotPrice(zone, instance_type, f"{rng.uniform(0.1, 60):.4f}", when))
    return history


def latest_linux_price(history: list[SpotPrice]) -> dict[tuple[str, str], float]:
    """The naive reference: per (zone id, type), the Linux price with the newest timestamp."""
    newest: dict[tuple[str, str], SpotPrice] = {}
    for p in history:
        key = (USE1_ZONE_IDS[p.zone], p.instance_type)
        if p.product in (LINUX, LINUX_VPC) and (key not in newest or p.timestamp > newest[key].timestamp):
            newest[key] = p
    return {key: float(p.price) for key, p in newest.items()}


def test_every_page_of_spot_history_is_read(env, tmp_path, spot):
    history = bulk_history(random.Random(11))
    spot.seed("us-east-1", history)
    rows = refresh_us_east_1(env, tmp_path)
    expected = latest_linux_price(history)
    assert {key: rows[key].spot_usd_per_hour for key in expected} == pytest.approx(expected)
    assert rows["use1-az2", P4D].spot_usd_per_hour == 6.75  # the record on the last page
    assert any("NextToken" in params for params in spot.requests), "the second page was never asked for"
