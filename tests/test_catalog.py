"""The embedded catalog: built from ../shared/data with provenance, typed, and strict about corruption."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest

from infra.catalog import default_catalog, load_catalog
from infra.catalog.build import build
from infra.catalog.loader import DATA_DIR
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
    assert not any(
        o.on_demand_usd_per_hour == 0 for o in catalog.all_offers if o.instance_type != "a4-highgpu-8g"
    )


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
    for name in ("offers.csv", "accelerators.csv", "sources.json"):
        assert (tmp_path / name).read_text() == (DATA_DIR / name).read_text(), f"{name} is stale: rebuild it"


@pytest.mark.parametrize(
    "damage,needle",
    [
        (lambda text: text.replace("13.10904", "13.1x", 1), "is not a number"),
        (lambda text: text.replace("cloud,region", "cloud;region", 1), "header is not"),
        (lambda text: text + "aws,us-east-1,only-three-columns\n", "columns, expected"),
        (
            lambda text: text.replace("\n", "\naws,us-east-1,z,t,,,,,,,,,,,,,\n", 1).replace(
                "z,t,", "z,t,", 1
            ),
            "",
        ),
    ],
)
def test_corrupt_catalog_is_one_clear_error(tmp_path: Path, damage, needle):
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    offers = data / "offers.csv"
    offers.write_text(damage(offers.read_text()))
    if not needle:  # a row with empty numbers is still a valid (unpriced) row
        assert load_catalog(data).offers(instance_type="t")
        return
    with pytest.raises(CatalogError) as err:
        load_catalog(data)
    assert needle in str(err.value) and "offers.csv" in str(err.value) and "\n" not in str(err.value)


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
