"""The embedded catalog: built from ../shared/data with provenance, typed, and strict about corruption."""

from __future__ import annotations

import csv
import hashlib
import shutil
from dataclasses import fields
from pathlib import Path

import pytest

from infra.catalog import default_catalog, load_catalog, loader
from infra.catalog.build import build
from infra.catalog.loader import DATA_DIR, checked_at_build, read_offers
from infra.catalog.model import OFFER_COLUMNS, Offer
from infra.errors import CatalogError
from tests.conftest import SHARED_DATA
from tests.needs import need


@pytest.fixture(scope="module")
def catalog():
    return default_catalog()


def test_offers_exist_for_every_cloud(catalog):
    clouds = {o.cloud for o in catalog.all_offers}
    assert clouds == {"aws", "gcp", "azure"}
    for cloud in clouds:
        assert len(catalog.offers(cloud=cloud)) > 50


def test_p4de_us_east_1_matches_the_source_row(catalog):
    offers = catalog.offers(cloud="aws", region="us-east-1", instance_type="p4de.24xlarge")
    assert offers
    source_rows = [
        r for r in csv.DictReader((SHARED_DATA / "catalog/aws_accel.csv").open())
        if r["InstanceType"] == "p4de.24xlarge" and r["Region"] == "us-east-1"
    ]  # fmt: skip
    assert {o.zone for o in offers} == {r["AvailabilityZone"] for r in source_rows}
    for o in offers:
        assert (o.accelerator, o.accelerators_per_node, o.accelerator_memory_gib) == ("A100-80GB", 8, 80)
        assert o.on_demand_usd_per_hour == float(source_rows[0]["Price"])
        assert o.source == "skypilot-aws"
        assert o.interruption_source == "aws-spot-advisor"


def test_gaudi_and_not_gaudi(catalog):
    dl1 = catalog.offers(cloud="aws", instance_type="dl1.24xlarge")
    assert dl1 and all((o.accelerator, o.accelerators_per_node) == ("Gaudi-HL205", 8) for o in dl1)
    dl2q = catalog.offers(cloud="aws", instance_type="dl2q.24xlarge")
    assert dl2q and all("Gaudi" not in o.accelerator for o in dl2q)


def test_gcp_vm_price_is_host_plus_gpu(catalog):
    # The source README's worked example: a2-highgpu-1g us-central1-a = 0.73948 + 2.93391.
    (offer,) = catalog.offers(cloud="gcp", zone="us-central1-a", instance_type="a2-highgpu-1g")
    assert offer.on_demand_usd_per_hour == pytest.approx(0.73948 + 2.93391)
    assert offer.accelerator == "A100-40GB"


def test_unknown_prices_stay_unknown(catalog):
    # p5e.48xlarge has no on-demand price anywhere in the source: unknown, never 0.
    p5e = catalog.offers(cloud="aws", instance_type="p5e.48xlarge")
    assert p5e and all(o.on_demand_usd_per_hour is None for o in p5e)
    assert not any(o.on_demand_usd_per_hour == 0 for o in catalog.all_offers)


def test_interruption_is_published_or_labelled_assumption(catalog):
    for o in catalog.all_offers:
        if o.cloud == "aws":
            assert o.interruption_source in ("aws-spot-advisor", "")
        else:
            assert o.interruption_assumed and "(assumed)" in o.interruption_label


def test_known_source_error_is_corrected_and_noted(catalog):
    (nd,) = {
        (o.accelerators_per_node, o.note) for o in catalog.offers(instance_type="Standard_ND96isr_H100_v5")
    }
    assert nd[0] == 8 and "source says 12" in nd[1]


def test_hardware_facts(catalog):
    h100 = catalog.accelerator("H100-80GB")
    assert (h100.memory_gib, h100.peak("bf16"), h100.peak("fp8")) == (80, 989.5, 1979)
    assert catalog.accelerator("V100-16GB").peak("bf16") is None  # V100 has no bf16
    assert catalog.accelerator("Trainium1").peak("bf16") == 180  # 2 NeuronCores x 90


def test_every_offer_has_a_known_source(catalog):
    for o in catalog.all_offers:
        assert o.source in catalog.sources
        if o.interruption_source:
            assert o.interruption_source in catalog.sources


def test_embedded_data_is_exactly_what_the_build_makes(tmp_path: Path):
    need(SHARED_DATA.is_dir(), "../shared/data beside the checkout", "CI clones main with shared/ beside it")
    build(SHARED_DATA, tmp_path)
    for name in ("offers.csv", "offers.csv.sha256", "accelerators.csv", "sources.json"):
        assert (tmp_path / name).read_text() == (DATA_DIR / name).read_text(), f"{name} is stale: rebuild it"


def test_the_shipped_table_is_the_one_the_build_checked_and_passes_todays_rules():
    """offers.csv.sha256 lets every load skip the row checks (loader.checked_at_build): it must name the shipped
    bytes (sha256sum's own format, so `sha256sum -c` agrees), and those rows must pass the rules as they are now."""
    offers = DATA_DIR / "offers.csv"
    digest, name = (DATA_DIR / "offers.csv.sha256").read_text().split()
    assert name == "offers.csv" and digest == hashlib.sha256(offers.read_bytes()).hexdigest()
    assert checked_at_build(offers)
    assert len(read_offers(offers, check=True)) == len(default_catalog().all_offers)


def test_an_offer_takes_its_fields_in_the_tables_column_order():
    """The loader builds each Offer positionally from a row: its fields must be the table's columns, then as_of
    (then what a capacity refresh adds at load, never read from a row)."""
    assert [f.name for f in fields(Offer)] == [*OFFER_COLUMNS, "as_of", "interruption_rate", "interruption_evidence"]


def test_a_checked_table_loads_without_its_rows_checked_and_any_other_with(tmp_path: Path, monkeypatch):
    """Byte for byte the checked table: no row is checked again. A byte changed (here a harmless price edit), or
    a digest file that says nothing: every row is checked, as for any file."""
    checked: list = []
    real = loader.row_problem
    monkeypatch.setattr(loader, "row_problem", lambda row: checked.append(row) or real(row))

    def rows_checked(name: str, edit=None) -> int:  # each case its own folder: loads are cached per file version
        data = tmp_path / name
        shutil.copytree(DATA_DIR, data)
        if edit:
            edit(data)
        checked.clear()
        assert len(load_catalog(data).all_offers) > 2000
        return len(checked)

    assert rows_checked("as-shipped") == 0
    offers = DATA_DIR / "offers.csv"
    price = offers.read_text().replace(",9.973400,", ",9.973401,", 1)
    assert rows_checked("one-price-edited", lambda d: (d / "offers.csv").write_text(price)) > 2000
    assert rows_checked("digest-emptied", lambda d: (d / "offers.csv.sha256").write_text("")) > 2000


# The p4de.24xlarge row in use1-az4 of offers.csv, as the build writes it; each damage case below edits
# text that is really in the file (checked first), so no case can silently test an undamaged file.
P4DE_ROW = (
    "aws,us-east-1,use1-az4,p4de.24xlarge,A100-80GB,8,80,96,1152,27.44705,9.973400,0,aws-spot-advisor,400,efa,"
    "skypilot-aws,"
)
HEADER_LINE = ",".join(
    ["cloud", "region", "zone", "instance_type", "accelerator", "accelerators_per_node", "accelerator_memory_gib",
     "vcpus", "memory_gib", "on_demand_usd_per_hour", "spot_usd_per_hour", "interruption_bucket",
     "interruption_source", "network_gbps", "fabric", "source", "note"]
)  # fmt: skip


@pytest.mark.parametrize(
    "old,new,needle",
    [
        (",13.10904,", ",13.1x,", "column on_demand_usd_per_hour = '13.1x' is not a number"),
        (HEADER_LINE, HEADER_LINE.replace("cloud,region", "cloud;region"), "header is not cloud,region,"),
        (P4DE_ROW, "aws,us-east-1,only-three-columns", "has 3 columns, expected 17"),
        (
            P4DE_ROW,
            P4DE_ROW.replace(",9.973400,", ",inf,"),
            "column spot_usd_per_hour = 'inf' is not a finite",
        ),
        (
            P4DE_ROW,
            P4DE_ROW.replace(",0,aws-spot", ",7,aws-spot"),
            "column interruption_bucket = '7' is outside 0..4",
        ),
        (
            P4DE_ROW,
            P4DE_ROW.replace(",8,80,", ",8.5,80,"),
            "column accelerators_per_node = '8.5' is not a whole",
        ),
        (P4DE_ROW, P4DE_ROW.replace("aws,", "aws2,", 1), "column cloud = 'aws2' is not one of aws, gcp, azure"),
        # Issue 27: what passed the loader and broke a command later (a node of 0 GPUs divided by zero in
        # `estimate`; a $0 price made a free plan), each refused by the one rule for its field.
        (P4DE_ROW, P4DE_ROW.replace(",8,80,", ",0,80,"), "column accelerators_per_node = '0' is outside 1..1024"),
        (P4DE_ROW, P4DE_ROW.replace(",27.44705,", ",0,"),
         "column on_demand_usd_per_hour = '0' must be more than 0 and at most 100000"),  # fmt: skip
        (P4DE_ROW, P4DE_ROW.replace(",96,1152,", ",0,1152,"), "column vcpus = '0' must be more than 0"),
        (P4DE_ROW, P4DE_ROW.replace(",A100-80GB,8,80,", ",,8,80,"),
         "column accelerator = '' is missing: accelerator, accelerators_per_node and accelerator_memory_gib go "
         "together"),  # fmt: skip
        (P4DE_ROW, P4DE_ROW.replace("us-east-1,", "us east 1,", 1), "column region = 'us east 1' is not a region"),
        (P4DE_ROW, P4DE_ROW.replace(",efa,", ",efa\x1b[2J,"), "column fabric = 'efa\\x1b[2J' is not a fabric"),
        (P4DE_ROW, P4DE_ROW.replace(",aws-spot-advisor,", ",guess,"), "column interruption_source = 'guess'"),
    ],
    ids=["number", "header", "columns", "infinite", "bucket-range", "whole-number", "cloud", "no-gpus",
         "free", "no-vcpus", "half-accelerator", "region", "escape", "interruption-source"],  # fmt: skip
)
def test_corrupt_catalog_is_one_clear_error(tmp_path: Path, old, new, needle):
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    offers = data / "offers.csv"
    text = offers.read_text()
    assert old != new and old in text, (
        f"the damage {old!r} is not in offers.csv: this case would test nothing"
    )
    offers.write_text(text.replace(old, new, 1))
    with pytest.raises(CatalogError) as err:
        load_catalog(data)
    message = str(err.value)
    assert needle in message and "\n" not in message
    line = text[: text.index(old)].count("\n") + 1  # the damaged line, counted in the file itself
    if line == 1:  # the header
        assert message.startswith(f"catalog file {offers}: ")
    else:
        assert message.startswith(f"catalog file {offers} line {line}: ")


def test_a_row_with_empty_numbers_is_an_unpriced_row(tmp_path: Path):
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    offers = data / "offers.csv"
    text = offers.read_text()
    assert text.startswith(HEADER_LINE + "\n")
    offers.write_text(text.replace("\n", "\naws,us-east-1,z,t" + "," * 13 + "\n", 1))  # 17 columns
    (row,) = load_catalog(data).offers(instance_type="t")
    assert (row.cloud, row.region, row.zone) == ("aws", "us-east-1", "z")
    assert (row.on_demand_usd_per_hour, row.spot_usd_per_hour, row.interruption_bucket) == (None, None, None)


def test_overlay_replaces_matching_offers(tmp_path: Path):
    overlay = tmp_path / "overlay.csv"
    lines = (DATA_DIR / "offers.csv").read_text().splitlines()
    row = next(line for line in lines if line.startswith("aws,us-east-1,use1-az4,p4de.24xlarge"))
    fields = next(csv.reader([row]))
    fields[10] = "7.5"
    with overlay.open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([next(csv.reader([lines[0]])), fields])
    merged = load_catalog(overlays=[overlay])
    (offer,) = merged.offers(cloud="aws", zone="use1-az4", instance_type="p4de.24xlarge")
    assert offer.spot_usd_per_hour == 7.5
    assert len(merged.all_offers) == len(default_catalog().all_offers)


def test_types_gcp_sells_only_reserved_or_spot_have_no_on_demand_offer(catalog):
    """GCP's A4X, A4 and A3 Ultra run only reservation-bound, flex-start or spot (infra/catalog/sold.py cites
    the provisioning-model docs): the price lists' on-demand rate is not an offer, the spot price stays."""
    for prefix in ("a4-highgpu-", "a3-ultragpu-"):
        offers = [o for o in catalog.all_offers if o.cloud == "gcp" and o.instance_type.startswith(prefix)]
        assert offers, prefix
        assert all(o.on_demand_usd_per_hour is None and o.price("on-demand") is None for o in offers)
        assert any(o.spot_usd_per_hour for o in offers) and all(
            "on-demand not sold" in o.note for o in offers
        )
    # A3 Mega and A3 High are sold on demand
    a3 = [o for o in catalog.all_offers if o.cloud == "gcp" and o.instance_type.startswith("a3-highgpu-8g")]
    assert a3 and any(o.on_demand_usd_per_hour for o in a3)


def test_an_on_demand_plan_never_buys_what_is_not_sold(trainfleet):
    """Issue 16: the fastest-plan note offered GCP a4-highgpu-8g on-demand. B200 and H200 on demand now come
    from clouds that sell them that way, or not at all."""
    result = trainfleet("plan", "--params", "70B", "--tokens", "200B", "--accelerators", "B200,H200",
                        "--clouds", "gcp", "--purchase", "on-demand", "--json")  # fmt: skip
    assert result.code == 2 and "no catalog offer is usable" in result.stderr  # GCP sells neither on demand
    assert "a4-highgpu" not in result.stdout and "a3-ultragpu" not in result.stdout
    spot = trainfleet("plan", "--params", "70B", "--tokens", "200B", "--accelerators", "B200,H200",
                      "--clouds", "gcp", "--purchase", "spot", "--json")  # fmt: skip
    assert spot.code == 0, spot.stderr
    assert spot.json()["best"]["instance_type"].startswith(("a4-highgpu", "a3-ultragpu"))


def test_the_loader_looks_for_each_capacity_refresh_under_its_writers_name():
    """default_catalog checks for these files before importing their readers: a renamed file would go unread."""
    import importlib

    from infra.catalog.loader import CAPACITY_STORES

    names = {"infra.catalog.advisor": "ADVISOR_NAME", "infra.catalog.azure_eviction": "EVICTION_NAME",
             "infra.catalog.gcp_preemption": "HISTORY_NAME"}  # fmt: skip
    assert {m for _, m in CAPACITY_STORES} == set(names)
    for name, module in CAPACITY_STORES:
        assert getattr(importlib.import_module(module), names[module]) == name
