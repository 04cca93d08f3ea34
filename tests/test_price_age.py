"""How old the prices behind a plan, an estimate and a preview are, and the line that says when they are too old.

Ages are worked from dates these tests write: an overlay row observed 120 days before now is 120 days old, past a
90-day limit and within a 200-day one. The embedded snapshot's price sources carry no date (sources.json), so its
prices are undated, and an undated price counts as too old.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from infra.catalog.loader import DATA_DIR, read_offers
from infra.catalog.price_age import DEFAULT_MAX_AGE_DAYS, PriceAge, oldest, refresh_command
from infra.catalog.refresh.overlay import write_overlay
from tests.conftest import assert_one_line_error, run_trainfleet
from tests.fake_price_apis import isolated_env

SNAPSHOT = read_offers(DATA_DIR / "offers.csv")
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SOURCES = {"undated-snapshot": {"as_of": "unknown (no date in the source)"}, "dated-feed": {"as_of": "2025-06-28"}}
# the quick start's job, held to one Azure region and accelerator so the best plan is the row the overlay dates
JOB = ("plan", "--model", "llama-7b", "--tokens", "200B", "--deadline", "72h", "--clouds", "azure",
       "--regions", "eastus", "--accelerators", "A100-40GB")  # fmt: skip


def offer(source: str, as_of: str = ""):
    return replace(SNAPSHOT[0], source=source, as_of=as_of)


def test_an_observed_row_is_as_old_as_its_date_and_judged_against_the_limit():
    age = oldest([offer("azure-retail-prices", "2026-08-01T12:00:00Z")], SOURCES, NOW)
    assert age.days == 120  # Aug 1 -> Nov 29: 30 + 30 + 31 + 29 days
    assert age.label() == "observed 2026-08-01, 120 days old"
    assert age.too_old(90) and not age.too_old(120) and not age.too_old(200)


def test_a_source_date_dates_its_rows_and_no_date_anywhere_is_undated_and_too_old():
    assert oldest([offer("dated-feed")], SOURCES, NOW).observed == datetime(2025, 6, 28, tzinfo=UTC)
    undated = oldest([offer("undated-snapshot")], SOURCES, NOW)
    assert (undated.observed, undated.days, undated.label()) == (None, None, "undated")
    assert undated.too_old(1e9)
    assert undated.to_json() == {"as_of": None, "age_days": None, "source": "undated-snapshot"}


def test_the_oldest_of_several_prices_is_the_earliest_and_any_undated_one_wins():
    a, b = offer("azure-retail-prices", "2026-11-01T00:00:00Z"), offer("aws-price-list", "2026-10-01T00:00:00Z")
    assert oldest([a, b], SOURCES, NOW) == PriceAge("aws-price-list", datetime(2026, 10, 1, tzinfo=UTC), NOW)
    assert oldest([a, offer("undated-snapshot"), b], SOURCES, NOW).observed is None


def test_the_refresh_command_names_the_cloud_and_regions_as_the_refresh_command_takes_them():
    assert refresh_command("azure", ["westus2", "eastus", "eastus"]) == (
        "trainfleet catalog refresh --cloud azure --regions eastus,westus2"
    )
    assert refresh_command("gcp") == "trainfleet catalog refresh --cloud gcp"


def test_the_options_default_is_the_libraries_limit():
    from cli.options import MaxPriceAgeOpt

    option = MaxPriceAgeOpt.__metadata__[0]
    assert option.envvar == "TRAINFLEET_MAX_PRICE_AGE_DAYS" and "default 90" in option.help
    assert DEFAULT_MAX_AGE_DAYS == 90


def _overlay_best_row(home, days_old: float) -> str:
    """The quick start's Azure row, refreshed `days_old` days ago at the snapshot's price; its as_of."""
    row = next(o for o in SNAPSHOT if (o.instance_type, o.region) == ("Standard_ND96asr_v4", "eastus"))
    as_of = (datetime.now(UTC) - timedelta(days=days_old)).strftime("%Y-%m-%dT%H:%M:%SZ")
    write_overlay(home / "catalog-overlay.csv", [replace(row, source="azure-retail-prices", as_of=as_of)])
    return as_of


def test_the_quick_start_plan_says_its_snapshot_price_is_undated_and_how_to_refresh_it(tmp_path):
    result = run_trainfleet(*JOB, env=isolated_env(tmp_path))
    assert result.code == 0, result.stderr
    assert "price: $2.9917/node-h spot, undated (skypilot-azure)" in result.stdout
    out = " ".join(result.stdout.split())
    assert ("the price of this plan (Standard_ND96asr_v4 spot in azure eastus) is undated (skypilot-azure: "
            "skypilot-org/skypilot-catalog catalogs/v6/azure/vms.csv @ 098741e7; the source carries no date): "
            "update it with `trainfleet catalog refresh --cloud azure --regions eastus`") in out  # fmt: skip


def test_a_price_refreshed_120_days_ago_is_flagged_past_90_days_and_not_past_200(tmp_path):
    env = isolated_env(tmp_path)
    as_of = _overlay_best_row(tmp_path, 120)
    plan = run_trainfleet(*JOB, "--json", env=env).json()
    assert plan["best"]["instance_type"] == "Standard_ND96asr_v4"
    assert plan["best"]["price_age"]["as_of"] == as_of and plan["best"]["price_age"]["age_days"] == 120.0
    stale = [n for n in plan["notes"] if n.startswith("the price of this plan")]
    assert stale == [
        f"the price of this plan (Standard_ND96asr_v4 spot in azure eastus) was observed {as_of[:10]}, 120 days "
        "old, past the 90-day limit (--max-price-age): update it with `trainfleet catalog refresh --cloud azure "
        "--regions eastus` and run this again"
    ]
    for more in (["--max-price-age", "200"], []):
        extra = {} if more else {"TRAINFLEET_MAX_PRICE_AGE_DAYS": "200"}
        plan = run_trainfleet(*JOB, "--json", *more, env={**env, **extra}).json()
        assert not [n for n in plan["notes"] if n.startswith("the price of this plan")], more


def test_a_fresh_price_shows_its_age_in_hours_and_no_note(tmp_path):
    _overlay_best_row(tmp_path, 0.5)
    result = run_trainfleet(*JOB, env=isolated_env(tmp_path))
    assert result.code == 0, result.stderr
    assert "h old (azure-retail-prices)" in result.stdout
    assert "the price of this plan" not in " ".join(result.stdout.split())


def test_estimate_shows_the_price_age_and_the_note(tmp_path):
    env = isolated_env(tmp_path)
    as_of = _overlay_best_row(tmp_path, 120)
    args = ("estimate", "--model", "llama-7b", "--tokens", "20B", "--accelerator", "A100-40GB", "--devices", "64",
            "--cloud", "azure", "--region", "eastus", "--purchase", "spot", "--json")  # fmt: skip
    got = run_trainfleet(*args, env=env).json()
    assert got["price_age"]["as_of"] == as_of
    assert [n[:65] for n in got["notes"]] == ["the price of this plan (Standard_ND96asr_v4 spot in azure eastus)"]
    assert run_trainfleet(*args, "--max-price-age", "365", env=env).json()["notes"] == []


def test_preview_names_the_oldest_instance_price_per_cloud_and_flags_it(tmp_path):
    result = run_trainfleet("preview", "-s", "azure-dev", env=isolated_env(tmp_path))
    assert result.code == 0, result.stderr
    out = " ".join(result.stdout.split())
    assert "Instance prices (azure): oldest undated (skypilot-azure)" in out
    assert "is undated (skypilot-azure: skypilot-org/skypilot-catalog catalogs/v6/azure/vms.csv @ 098741e7" in out
    assert "`trainfleet catalog refresh --cloud azure`" in out


@pytest.mark.parametrize("value", ["abc", "nan", "-1", "1e9"])
def test_a_bad_limit_is_one_line_naming_the_option(tmp_path, value):
    env = {**isolated_env(tmp_path), "TRAINFLEET_MAX_PRICE_AGE_DAYS": value}
    assert_one_line_error(run_trainfleet(*JOB, env=env), "--max-price-age")
    assert_one_line_error(run_trainfleet(*JOB, "--max-price-age", value, env=isolated_env(tmp_path)),
                          "--max-price-age")  # fmt: skip
