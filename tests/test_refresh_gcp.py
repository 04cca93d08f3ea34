"""`trainfleet catalog refresh --cloud gcp` against a local Cloud Billing Catalog API (paged SKUs)."""

from __future__ import annotations

import pytest

from infra.catalog.loader import DATA_DIR, read_offers
from infra.catalog.refresh.overlay import read_overlay
from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import FakePriceApis, Faults, gcp_expected, isolated_env

SNAPSHOT = [o for o in read_offers(DATA_DIR / "offers.csv") if o.cloud == "gcp"]


def start(gcp: str = "ok") -> FakePriceApis:
    return FakePriceApis(Faults(gcp=gcp)).start()


@pytest.fixture
def fake():
    server = start()
    yield server
    server.stop()


def env_for(tmp_path, server, key="t0ken"):
    return {**isolated_env(tmp_path), **server.env(), "GOOGLE_API_KEY": key}


def test_vm_price_is_host_skus_plus_gpu_skus(tmp_path, fake):
    env = env_for(tmp_path, fake)
    result = run_trainfleet(
        "catalog", "refresh", "--cloud", "gcp", "--regions", "us-central1,europe-west4", env=env
    )
    assert result.code == 0, result.stdout + result.stderr
    rows = {(o.zone, o.instance_type): o for o in read_overlay(tmp_path / "catalog-overlay.csv")}
    snap = {(o.zone, o.instance_type): o for o in SNAPSHOT if o.region in ("us-central1", "europe-west4")}
    assert set(rows) == set(snap)  # every zone row of those regions, nothing else
    a2 = rows[("us-central1-a", "a2-highgpu-8g")]
    assert a2.on_demand_usd_per_hour == pytest.approx(
        gcp_expected(96, 680, 8, "Nvidia Tesla A100 GPU", spot=False)
    )
    assert a2.spot_usd_per_hour == pytest.approx(gcp_expected(96, 680, 8, "Nvidia Tesla A100 GPU", spot=True))
    g2 = next(o for (z, t), o in rows.items() if t == "g2-standard-48")
    assert g2.on_demand_usd_per_hour == pytest.approx(
        gcp_expected(g2.vcpus, g2.memory_gib, 4, "Nvidia L4 GPU", spot=False)
    )
    assert a2.source == "gcp-billing-catalog" and "host SKUs + GPU SKUs" in a2.note
    pages = [d for api, d in fake.requests if api == "gcp-skus"]
    assert len(pages) > 5  # nextPageToken followed through every page


def test_without_key_one_line(tmp_path, fake):
    result = run_trainfleet("catalog", "refresh", "--cloud", "gcp", env=env_for(tmp_path, fake, key=""))
    assert_one_line_error(result, "GOOGLE_API_KEY", "GOOGLE_OAUTH_ACCESS_TOKEN")


def test_rejected_key_reported_for_every_region(tmp_path, fake):
    result = run_trainfleet(
        "catalog",
        "refresh",
        "--cloud",
        "gcp",
        "--regions",
        "us-east1",
        env=env_for(tmp_path, fake, key="wrong"),
    )
    assert result.code == 1 and "API key not valid" in result.stdout
    assert not (tmp_path / "catalog-overlay.csv").exists()


@pytest.mark.parametrize(
    "fault, words", [("malformed", "malformed JSON"), ("throttled", "429"), ("down", "503")]
)
def test_a_bad_listing_changes_nothing(tmp_path, fault, words):
    good = start()
    try:
        assert run_trainfleet("catalog", "refresh", "--cloud", "gcp", "--regions", "us-west1",
                              env=env_for(tmp_path, good)).code == 0  # fmt: skip
    finally:
        good.stop()
    before = (tmp_path / "catalog-overlay.csv").read_bytes()
    bad = start(fault)
    try:
        result = run_trainfleet(
            "catalog",
            "refresh",
            "--cloud",
            "gcp",
            "--regions",
            "us-west1,us-east4",
            "--json",
            env=env_for(tmp_path, bad),
        )
    finally:
        bad.stop()
    assert result.code == 1
    regions = result.json()["regions"]
    assert [r["ok"] for r in regions] == [False, False] and all(words in r["error"] for r in regions)
    assert (tmp_path / "catalog-overlay.csv").read_bytes() == before
