"""The user overlay: atomic writes, merging, loading by default_catalog, corruption, and `catalog status`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace

import pytest

from infra.catalog.loader import DATA_DIR, read_offers
from infra.catalog.refresh import overlay as overlay_mod
from infra.catalog.refresh.overlay import merge, read_overlay, write_overlay
from tests.conftest import REPO, assert_one_line_error, run_trainfleet
from tests.fake_price_apis import FakePriceApis, Faults, isolated_env

SNAPSHOT = read_offers(DATA_DIR / "offers.csv")


def refreshed(offer, price: float, as_of="2026-11-20T10:00:00Z"):
    return replace(offer, on_demand_usd_per_hour=price, source="azure-retail-prices", as_of=as_of)


def test_round_trip_keeps_every_field_and_merge_keeps_untouched_rows(tmp_path):
    path = tmp_path / "o.csv"
    a, b, c = [o for o in SNAPSHOT if o.cloud == "azure"][:3]
    first = [refreshed(a, 1.234567891), refreshed(b, 2.0)]
    write_overlay(path, first)
    assert sorted(read_overlay(path), key=render_key) == sorted(first, key=render_key)
    second = merge(read_overlay(path), [refreshed(b, 3.0, "2026-11-21T00:00:00Z"), refreshed(c, 4.0)])
    write_overlay(path, second)
    got = {o.instance_type + o.region: o.on_demand_usd_per_hour for o in read_overlay(path)}
    assert got == {
        a.instance_type + a.region: 1.234567891,
        b.instance_type + b.region: 3.0,
        c.instance_type + c.region: 4.0,
    }


def render_key(o):
    return (o.cloud, o.region, o.zone, o.instance_type)


def test_failed_write_leaves_previous_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "catalog-overlay.csv"
    azure = [o for o in SNAPSHOT if o.cloud == "azure"]
    write_overlay(path, [refreshed(azure[0], 1.0)])
    before = path.read_bytes()

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(overlay_mod.os, "replace", crash)
    with pytest.raises(OSError):
        write_overlay(path, [refreshed(o, 9.0) for o in azure])
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["catalog-overlay.csv"]


def test_default_catalog_ignores_a_missing_overlay_and_uses_a_present_one(tmp_path):
    env = isolated_env(tmp_path)
    plain = run_trainfleet("catalog", "show", "Standard_NC24ads_A100_v4", "--json", env=env).json()
    assert {o["source"] for o in plain["offers"]} == {"skypilot-azure"}
    offer = next(o for o in SNAPSHOT if o.instance_type == "Standard_NC24ads_A100_v4")
    write_overlay(tmp_path / "catalog-overlay.csv", [refreshed(offer, 1.5)])
    shown = run_trainfleet("catalog", "show", "Standard_NC24ads_A100_v4", "--json", env=env).json()
    mine = [o for o in shown["offers"] if o["region"] == offer.region]
    assert [(o["source"], o["on_demand_usd_per_hour"], o["as_of"]) for o in mine] == [
        ("azure-retail-prices", 1.5, "2026-11-20T10:00:00Z")
    ]
    assert any(o["source"] == "skypilot-azure" for o in shown["offers"])  # other regions: the snapshot


@pytest.mark.parametrize(
    "text",
    [
        "cloud,region\nazure,eastus\n",  # wrong header
        ",".join([*overlay_mod.HEADER])
        + "\nazure,eastus,,Standard_X,,1,1,1,1,abc,,,,,,src,,\n",  # bad number
        ",".join([*overlay_mod.HEADER]) + "\nazure,eastus,,Standard_X\n",  # truncated by hand
        "\x00\xff\xfe garbage",
    ],
)
def test_corrupt_overlay_is_one_line_naming_file_and_fix(tmp_path, text):
    path = tmp_path / "catalog-overlay.csv"
    path.write_bytes(text.encode("latin-1"))
    result = run_trainfleet("catalog", "list", "--cloud", "azure", env=isolated_env(tmp_path))
    assert_one_line_error(result, str(path), "trainfleet catalog refresh", "delete")
    assert "reinstall" not in result.stderr


def test_refresh_replaces_a_corrupt_overlay_and_says_so(tmp_path):
    path = tmp_path / "catalog-overlay.csv"
    path.write_text("not,an,overlay\n")
    fake = FakePriceApis().start()
    try:
        env = {**isolated_env(tmp_path), **fake.env()}
        result = run_trainfleet("catalog", "refresh", "--cloud", "azure", "--regions", "westus", env=env)
    finally:
        fake.stop()
    assert result.code == 0 and "was corrupt" in result.stdout
    assert read_overlay(path) and list(tmp_path.glob("catalog-overlay.csv.corrupt-*"))


def test_overlay_flag_and_status_table(tmp_path):
    fake = FakePriceApis().start()
    custom = tmp_path / "elsewhere" / "prices.csv"
    try:
        env = {**isolated_env(tmp_path), **fake.env()}
        result = run_trainfleet(
            "catalog", "refresh", "--cloud", "azure", "--regions", "westus", "--overlay", str(custom), env=env
        )
    finally:
        fake.stop()
    assert result.code == 0 and custom.exists() and not (tmp_path / "catalog-overlay.csv").exists()
    env = {**isolated_env(tmp_path), "TRAINFLEET_HOME": str(custom.parent)}
    (custom.parent / "catalog-overlay.csv").write_bytes(custom.read_bytes())
    status = run_trainfleet("catalog", "status", "--cloud", "azure", env=env)
    assert status.code == 0
    lines = status.stdout.splitlines()
    assert any(
        "westus " in line and "azure-retail-prices" in line and "refresh" in line and "min" in line
        for line in lines
    )
    assert any(
        "eastus " in line and "skypilot-azure" in line and "snapshot" in line and "unknown" in line
        for line in lines
    )
    assert "from a refresh" in status.stdout


def test_status_without_overlay_is_all_snapshot(tmp_path):
    info = run_trainfleet("catalog", "status", "--json", env=isolated_env(tmp_path)).json()
    assert info["from_refresh"] == 0 and info["from_snapshot"] == len(SNAPSHOT) and not info["overlay_exists"]
    assert {g["kind"] for g in info["groups"]} == {"snapshot"}


class RequestCounter:
    """Counts the requests a fake API server answers and wakes a waiter at a chosen count, so a test acts at a
    known point of a client's run instead of sleeping and hoping."""

    def __init__(self, fake: FakePriceApis) -> None:
        self.count = 0
        self._changed = threading.Condition()
        answer = fake.log  # the fake logs every request it answers

        def log(api: str, detail: str) -> None:
            answer(api, detail)
            with self._changed:
                self.count += 1
                self._changed.notify_all()

        fake.log = log

    def reset(self) -> None:
        with self._changed:
            self.count = 0

    def wait_for(self, n: int, timeout_s: float = 60) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.count >= n, timeout_s)


AZURE_REGIONS = (
    "centralus",
    "eastus",
    "eastus2",
    "northcentralus",
    "southcentralus",
    "westus",
    "westus2",
    "westus3",
)


def test_kill_9_mid_refresh_never_corrupts_the_overlay(tmp_path):
    """Kill the refresh process at many points while it fetches and writes (after its 1st, 5th, ... request of
    about 78); the overlay always loads, and holds the previous refresh's rows plus whole regions of the new
    one, never a torn file."""
    fake = FakePriceApis(Faults(azure_delay_s={r: 0.05 for r in AZURE_REGIONS}, azure_page_size=15)).start()
    counter = RequestCounter(fake)
    path = tmp_path / "catalog-overlay.csv"
    env = {**os.environ, **isolated_env(tmp_path), **fake.env(), "COLUMNS": "200"}
    try:
        done = subprocess.run([sys.executable, "-m", "cli", "catalog", "refresh", "--cloud", "azure",
                               "--regions", "westus"], cwd=REPO, env=env, capture_output=True, timeout=60)  # fmt: skip
        assert done.returncode == 0
        previous = {(o.region, o.instance_type): o for o in read_overlay(path)}
        for requests_before_kill in (1, 5, 12, 20, 30, 42, 55, 70):
            counter.reset()
            proc = subprocess.Popen([sys.executable, "-m", "cli", "catalog", "refresh", "--cloud", "azure",
                                     "--parallel", "2"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)  # fmt: skip
            assert counter.wait_for(requests_before_kill), "the refresh never got that far"
            assert proc.poll() is None  # it has more pages to ask for: the kill lands mid-refresh
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            rows = read_overlay(path)  # raises CatalogError if torn
            by_key = {(o.region, o.instance_type): o for o in rows}
            assert previous.keys() <= by_key.keys()  # nothing from before was lost
            per_region = {}
            for o in rows:
                per_region.setdefault(o.region, set()).add(o.as_of)
            assert all(len(stamps) == 1 for stamps in per_region.values())  # each region whole, one refresh
    finally:
        fake.stop()


def test_unwritable_overlay_location_is_one_line(tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    fake = FakePriceApis().start()
    try:
        env = {**isolated_env(tmp_path), **fake.env()}
        result = run_trainfleet(
            "catalog",
            "refresh",
            "--cloud",
            "azure",
            "--regions",
            "westus",
            "--overlay",
            str(blocker / "o.csv"),
            env=env,
        )
    finally:
        fake.stop()
    assert_one_line_error(result, "cannot write the catalog overlay", "TRAINFLEET_HOME")
