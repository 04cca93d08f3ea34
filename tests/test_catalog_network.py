"""The catalog's inter-node bandwidth per instance type, held to the clouds' own figures.

AWS: moto ships EC2's DescribeInstanceTypes records; each figure the build carries is derived from that record here by
a separate, naive reading (a fixed "N Gigabit" or "K x N Gigabit", or the cards' summed baseline for "Up to N").
Azure: the size page's table as vendored under tests/fixtures/network_specs/ (Mbps / 1000).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from infra.catalog.build import AWS_NETWORK, AZURE_NETWORK, EFA_NOT_YET, NETWORK
from infra.catalog.loader import DATA_DIR, read_offers

FIXTURES = Path(__file__).parent / "fixtures" / "network_specs"
SNAPSHOT = read_offers(DATA_DIR / "offers.csv")


def moto_network_info() -> dict[str, dict]:
    moto = pytest.importorskip("moto")  # a test dependency: under CI=true a skip fails the run
    path = Path(moto.__file__).parent / "ec2" / "resources" / "instance_types.json.gz"
    return {t: r["NetworkInfo"] for t, r in json.loads(gzip.decompress(path.read_bytes())).items()}


def describe_gbps(info: dict) -> float:
    """Sustained Gbit/s of one DescribeInstanceTypes NetworkInfo record."""
    perf = info["NetworkPerformance"]
    if perf.startswith("Up to "):
        return sum(card["BaselineBandwidthInGbps"] for card in info["NetworkCards"])
    cards = re.fullmatch(r"(\d+)x (\d+) Gigabit", perf)
    if cards:
        return int(cards[1]) * int(cards[2])
    return float(perf.removesuffix(" Gigabit"))


def test_every_aws_figure_is_the_describe_instance_types_figure():
    records = moto_network_info()
    aws = {t: v for t, v in NETWORK.items() if t in {o.instance_type for o in SNAPSHOT if o.cloud == "aws"}}
    checked = {t for t in aws if t in records}
    assert set(AWS_NETWORK) <= checked  # every figure added from that file is in it
    for itype in sorted(checked):
        gbps, fabric = aws[itype]
        info = records[itype]
        assert gbps == describe_gbps(info), itype
        assert fabric == ("efa" if info.get("EfaSupported") and itype not in EFA_NOT_YET else ""), itype
    # the one held back: EC2's own record says why
    b300 = records["p6-b300.48xlarge"]
    assert (b300["MaximumNetworkCards"], b300["EfaInfo"]["MaximumEfaInterfaces"]) == (17, 16)


def test_every_aws_accelerator_type_the_describe_file_knows_has_a_network_figure():
    records = moto_network_info()
    missing = sorted({o.instance_type for o in SNAPSHOT if o.cloud == "aws" and o.accelerator
                      and o.instance_type in records and o.network_gbps is None})  # fmt: skip
    assert missing == []


def size_page_bandwidth() -> dict[str, float]:
    """Size -> Gbit/s from every vendored Azure size page's network table (Mbps, perhaps with thousands commas)."""
    out = {}
    for page in sorted(FIXTURES.glob("azure_*_network.md")):
        for row in page.read_text().splitlines()[2:]:
            cells = [c.strip() for c in row.split("|")]
            out[cells[1]] = int(cells[3].replace(",", "")) / 1000
    return out


def test_azure_figures_are_the_size_pages_max_bandwidth():
    page = size_page_bandwidth()
    assert len(page) == 9 and set(AZURE_NETWORK) == set(page)
    assert {t: AZURE_NETWORK[t][0] for t in page} == page
    for itype, gbps in page.items():
        rows = [o for o in SNAPSHOT if o.instance_type == itype]
        assert rows and {o.network_gbps for o in rows} == {gbps}, itype


def test_the_quick_start_types_kept_their_published_fabric():
    # hand-checked against the same records: a change here is a change of source, not a refactor
    assert NETWORK["p5.48xlarge"] == (3200, "efa") and NETWORK["g5.24xlarge"] == (50, "efa")
