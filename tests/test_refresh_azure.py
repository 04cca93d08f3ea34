"""`trainfleet catalog refresh --cloud azure` against a local Retail Prices API (paged OData JSON) with
throttling and a malformed page."""

from __future__ import annotations

import pytest

from infra.catalog.loader import DATA_DIR, read_offers
from infra.catalog.refresh.overlay import read_overlay
from tests.conftest import run_trainfleet
from tests.fake_price_apis import PRICE_FACTOR, FakePriceApis, Faults, isolated_env

SNAPSHOT = [o for o in read_offers(DATA_DIR / "offers.csv") if o.cloud == "azure"]


@pytest.fixture
def fake():
    server = FakePriceApis(
        Faults(
            azure_throttled_regions={"eastus2"},
            azure_throttled_once={"eastus"},
            azure_malformed_regions={"westus2"},
        )
    ).start()
    yield server
    server.stop()


@pytest.fixture
def env(tmp_path, fake):
    return {**isolated_env(tmp_path), **fake.env()}


def test_linux_payg_and_spot_prices_per_region(env, tmp_path, fake):
    result = run_trainfleet(
        "catalog", "refresh", "--cloud", "azure", "--regions", "eastus,westus3", "--json", env=env
    )
    assert result.code == 0, result.stdout + result.stderr
    report = result.json()
    assert [r["region"] for r in report["regions"]] == ["eastus", "westus3"] and all(
        r["ok"] for r in report["regions"]
    )
    rows = {(o.region, o.instance_type): o for o in read_overlay(tmp_path / "catalog-overlay.csv")}
    priced = [o for o in SNAPSHOT if o.on_demand_usd_per_hour is not None or o.spot_usd_per_hour is not None]
    unpriced = [o for o in SNAPSHOT if o not in priced and o.region in ("eastus", "westus3")]
    assert unpriced and all(
        (o.region, o.instance_type) not in rows for o in unpriced
    )  # API has no meter: kept
    for snap in (o for o in priced if o.region in ("eastus", "westus3")):
        got = rows[(snap.region, snap.instance_type)]
        # Linux pay-as-you-go and Linux spot meters; not Windows, Low Priority, reservations or future prices.
        if snap.on_demand_usd_per_hour is not None:
            assert got.on_demand_usd_per_hour == pytest.approx(
                round(snap.on_demand_usd_per_hour * PRICE_FACTOR, 5)
            )
        if snap.spot_usd_per_hour is not None:
            assert got.spot_usd_per_hour == pytest.approx(round(snap.spot_usd_per_hour * PRICE_FACTOR, 5))
        assert got.zone == "" and got.source == "azure-retail-prices" and got.accelerator == snap.accelerator
    pages = [d for api, d in fake.requests if api == "azure-prices" and d.startswith("westus3")]
    assert len(pages) > 1  # followed NextPageLink
    # eastus answered 429 once; the retry (Retry-After honoured) succeeded.
    assert [d for api, d in fake.requests if api == "azure-prices" and d == "eastus page 1"] == [
        "eastus page 1"
    ] * 2


def test_throttled_and_malformed_regions_fail_alone_and_keep_previous_prices(env, tmp_path):
    first = run_trainfleet("catalog", "refresh", "--cloud", "azure", "--regions", "westus3", env=env)
    assert first.code == 0
    before = (tmp_path / "catalog-overlay.csv").read_text()
    result = run_trainfleet("catalog", "refresh", "--cloud", "azure", "--json", env=env)
    assert result.code == 1
    report = {r["region"]: r for r in result.json()["regions"]}
    assert "429" in report["eastus2"]["error"] and not report["eastus2"]["ok"]
    assert "malformed" in report["westus2"]["error"] and "page 2" in report["westus2"]["error"]
    assert {r for r, v in report.items() if v["ok"]} == {
        "centralus", "eastus", "northcentralus", "southcentralus", "westus", "westus3",
    }  # fmt: skip
    rows = read_overlay(tmp_path / "catalog-overlay.csv")
    assert not [o for o in rows if o.region in ("eastus2", "westus2")]  # nothing half-read was written
    previous_westus3 = {line for line in before.splitlines()[1:] if ",westus3," in line}
    assert previous_westus3  # the earlier refresh's rows were there ...
    westus3 = [o for o in rows if o.region == "westus3"]
    assert len(westus3) == len(previous_westus3)  # ... and are replaced one for one, not duplicated
    # The catalog still loads, and the failed regions fall back to the snapshot.
    shown = run_trainfleet("catalog", "status", "--cloud", "azure", "--json", env=env).json()
    kinds = {(g["region"], g["kind"]) for g in shown["groups"]}
    assert (
        ("eastus", "refresh") in kinds
        and ("eastus2", "snapshot") in kinds
        and ("westus2", "snapshot") in kinds
    )
    assert ("eastus2", "refresh") not in kinds and ("westus2", "refresh") not in kinds


def test_no_credentials_needed(env):
    env = {**env, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}
    assert (
        run_trainfleet("catalog", "refresh", "--cloud", "azure", "--regions", "centralus", env=env).code == 0
    )


def test_api_down_fails_every_region_without_touching_the_overlay(tmp_path):
    env = {**isolated_env(tmp_path), "TRAINFLEET_AZURE_PRICES_URL": "http://127.0.0.1:9/api/retail/prices"}
    result = run_trainfleet("catalog", "refresh", "--cloud", "azure", "--regions", "eastus,westus", env=env)
    assert result.code == 1
    assert "cannot reach" in result.stdout and "0 of 2 regions refreshed" in result.stdout
    assert not (tmp_path / "catalog-overlay.csv").exists()


@pytest.mark.parametrize("answer", [float("inf"), float("nan"), 0.0, -0.5])
def test_a_price_the_api_should_never_answer_is_refused_before_writing(env, tmp_path, fake, answer):
    """Issue 27: refresh wrote whatever number the API answered. A spot price that is not finite (JSON `Infinity`,
    `NaN`, or 1e999, which Python reads as infinity), zero or negative fails its region with one line naming the
    type and the field, and nothing of that region reaches the overlay; other regions are written as usual."""
    poisoned = next(o for o in SNAPSHOT if o.region == "eastus" and o.spot_usd_per_hour is not None)
    for item in fake.azure_items:
        if item["armSkuName"] == poisoned.instance_type and item["armRegionName"] == "eastus" \
                and item["meterName"].endswith(" Spot") and "Windows" not in item["productName"]:  # fmt: skip
            item["retailPrice"] = item["unitPrice"] = answer
    result = run_trainfleet("catalog", "refresh", "--cloud", "azure", "--regions", "eastus,westus3", "--json",
                            env=env)  # fmt: skip
    assert result.code == 1, result.stdout + result.stderr
    report = {r["region"]: r for r in result.json()["regions"]}
    error = report["eastus"]["error"]
    assert not report["eastus"]["ok"] and report["westus3"]["ok"]
    assert f"azure {poisoned.instance_type} in eastus: spot_usd_per_hour = {answer!r}" in error, error
    assert "nothing of eastus was written" in error and "\n" not in error
    written = read_overlay(tmp_path / "catalog-overlay.csv")
    assert written and {o.region for o in written} == {"westus3"}
