"""`trainfleet catalog refresh --cloud aws` against moto's server (EC2 zones and spot price history) and the
fake Price List API, over real HTTP on loopback."""

from __future__ import annotations

import pytest

from infra.catalog.loader import DATA_DIR, read_offers
from infra.catalog.refresh.overlay import read_overlay
from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import PRICE_FACTOR, FakePriceApis, Faults, isolated_env
from tests.moto_server import MotoServer

SNAPSHOT = read_offers(DATA_DIR / "offers.csv")


@pytest.fixture(scope="module")
def moto():
    server = MotoServer()
    yield server
    server.stop()


@pytest.fixture
def fake():
    server = FakePriceApis(Faults(aws_throttled_regions={"us-east-2"})).start()
    yield server
    server.stop()


@pytest.fixture
def env(tmp_path, moto, fake):
    return {**isolated_env(tmp_path), **fake.env(), **moto.env()}


def snapshot_on_demand(region: str, instance_type: str) -> float:
    return next(
        o.on_demand_usd_per_hour
        for o in SNAPSHOT
        if o.cloud == "aws" and o.region == region and o.instance_type == instance_type
    )


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
    # Spot from moto's spot price history (moto answers 0.00001 everywhere), keyed by AZ *id*.
    assert all(o.spot_usd_per_hour == pytest.approx(0.00001) for o in p4d)
    assert {o.zone for o in p4d} <= {"use1-az1", "use1-az2", "use1-az3", "use1-az4", "use1-az5", "use1-az6"}
    assert all(o.zone.startswith("use1-") for o in rows if o.region == "us-east-1")  # ids, never us-east-1a
    # Hardware facts come from the catalog, not the price API.
    assert {(o.accelerator, o.accelerators_per_node) for o in p4d} == {("A100-40GB", 8)}
    # The Price List was paged: every product query asked again with the NextToken.
    asked = [d for api, d in fake.requests if api == "aws-pricing"]
    assert any(d.endswith("page-2") for d in asked) and any(not d.endswith("page-2") for d in asked)


def test_catalog_commands_use_the_overlay(env):
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
