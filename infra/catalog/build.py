"""Build the embedded catalog (infra/catalog/data/) from the facts in ../shared/data.

    python -m infra.catalog.build --source ../shared/data

Nothing here invents a price: every price is copied from a source row (GCP VM prices are the sum of
the host row and the GPU row of the same zone, as the source README prescribes). Corrections of
known source errors and curated hardware facts (memory, network) are listed below, each with where
it comes from, and land in data/sources.json beside the rows they touch.
"""

from __future__ import annotations

import argparse
import ast
import csv
import hashlib
import io
import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

from infra.atomic import write_file
from infra.catalog.loader import CHECKED_SUFFIX, read_offers
from infra.catalog.model import OFFER_COLUMNS

DATA_DIR = Path(__file__).parent / "data"

SKYPILOT = "skypilot-org/skypilot-catalog (Apache-2.0), copied verbatim; see shared data catalog/README.md"
SOURCES = {
    "skypilot-aws": {
        "what": "AWS on-demand and spot USD/hour per availability zone",
        "origin": SKYPILOT,
        "repository": "skypilot-org/skypilot-catalog",
        "path": "catalogs/v8/aws/vms.csv",
        "commit": "00148f2af3672e2229b4f7bf8157d5a3f36e3c35",
        "as_of": "unknown (no date in the source); snapshot at that commit",
    },
    "skypilot-gcp": {
        "what": "GCP host (vCPU+RAM) and GPU USD/hour per zone; a VM's price is host row + GPU row",
        "origin": SKYPILOT,
        "repository": "skypilot-org/skypilot-catalog",
        "path": "catalogs/v8/gcp/vms.csv",
        "commit": "006059e0f18acb1341e22a27751e9f80df6ba92f",
        "as_of": "unknown (no date in the source); snapshot at that commit",
    },
    "skypilot-azure": {
        "what": "Azure pay-as-you-go and spot USD/hour per region (US regions only, older v6 snapshot)",
        "origin": SKYPILOT,
        "repository": "skypilot-org/skypilot-catalog",
        "path": "catalogs/v6/azure/vms.csv",
        "commit": "098741e70562f65d7af1cceb81e33b284f742604",
        "as_of": "unknown (no date in the source); OLD v6 snapshot",
    },
    "aws-spot-advisor": {
        "what": "AWS Spot Instance Advisor interruption buckets (r 0..4 = <5%, 5-10%, 10-15%, 15-20%, >20%/month)",
        "origin": "public advisor feed as kept in alexei-led/spotinfo internal/spot/data",
        "commit": "5eedf20a",
        "as_of": "2025-06-28",
    },
    "assumed-interruption": {
        "what": "GCP and Azure publish no per-type interruption rate; bucket 2 (10-15%/month) is an "
        "explicit trainfleet assumption, labelled as such on every such offer",
        "origin": "trainfleet assumption",
        "as_of": "n/a",
    },
    "peak-flops": {
        "what": "peak dense TFLOP/s per accelerator and precision",
        "origin": "vendor datasheets as tabulated in composer, pytorch-lightning, torchtitan, ml-engineering, "
        "Intel Hot Chips 2024 (per row in data/calibration/peak_flops.csv)",
    },
    "network-specs": {
        "what": "inter-node bandwidth (Gbit/s) and fabric per instance type",
        "origin": "AWS: EC2 DescribeInstanceTypes NetworkInfo as moto 5.2.5 ships it (getmoto/moto "
        "moto/ec2/resources/instance_types.json.gz): a fixed NetworkPerformance, or the cards' summed baseline for "
        "'Up to N'; Azure: the size pages' Max Bandwidth (MicrosoftDocs/azure-compute-docs "
        "articles/virtual-machines/sizes/gpu-accelerated/); the rest: vendor spec sheets (hardware-specs)",
    },
    "hardware-specs": {
        "what": "accelerator memory where the price source does not carry it, and inter-node fabric bandwidth",
        "origin": "vendor product pages: AWS EC2 accelerated-computing instance specifications, Google Cloud "
        "GPU machine types, Azure ND/NC-series size pages, NVIDIA/Intel datasheets",
    },
}

# Source spelling -> normalised accelerator name.
AWS_ACCELERATORS = {
    "A100": "A100-40GB", "A100-80GB": "A100-80GB", "H100": "H100-80GB", "H200": "H200", "B200": "B200",
    "B300": "B300", "V100": "V100-16GB", "V100-32GB": "V100-32GB", "T4": "T4", "A10G": "A10G", "L4": "L4",
    "L40S": "L40S", "Gaudi HL-205": "Gaudi-HL205", "Trainium": "Trainium1", "Trainium2": "Trainium2",
}  # fmt: skip
# dl2q carries no accelerator name in the source; it is Qualcomm Cloud AI 100 (inference), not Gaudi.
AWS_UNNAMED = {"dl2q.24xlarge": ("Qualcomm-AI100", 8)}
GCP_ACCELERATORS = {
    "A100": "A100-40GB", "A100-80GB": "A100-80GB", "H100": "H100-80GB", "H100-MEGA": "H100-80GB",
    "H200": "H200", "B200": "B200", "L4": "L4",
}  # fmt: skip
AZURE_ACCELERATORS = {
    "A100": "A100-40GB", "A100-80GB": "A100-80GB", "V100": "V100-16GB", "V100-32GB": "V100-32GB",
    "T4": "T4", "A10": "A10", "K80": "K80", "M60": "M60", "Radeon MI25": "Radeon-MI25", "H100": "H100-80GB",
}  # fmt: skip
# NC H100 v5 sizes carry the H100 NVL (94 GB), not the SXM part.
AZURE_TYPE_ACCELERATOR = {"Standard_NC40ads_H100_v5": "H100-NVL", "Standard_NC80adis_H100_v5": "H100-NVL"}
# Known source errors, corrected with the reason recorded on the row.
AZURE_COUNT_FIX = {"Standard_ND96isr_H100_v5": (8, "source says 12 GPUs; the ND H100 v5 size has 8")}

# GCP accelerator-optimised machine types: (source GPU row name, GPUs per VM).
GCP_MACHINE_GPUS = {
    **{f"a2-highgpu-{n}g": ("A100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("A100", 16),
    **{f"a2-ultragpu-{n}g": ("A100-80GB", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("H100", n) for n in (1, 2, 4, 8)},
    "a3-edgegpu-8g": ("H100", 8),
    "a3-edgegpu-8g-nolssd": ("H100", 8),
    "a3-megagpu-8g": ("H100-MEGA", 8),
    "a3-ultragpu-8g": ("H200", 8),
    "a3-ultragpu-8g-nolssd": ("H200", 8),
    "a4-highgpu-8g": ("B200", 8),
    **{f"g2-standard-{v}": ("L4", 1) for v in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("L4", 2),
    "g2-standard-48": ("L4", 4),
    "g2-standard-96": ("L4", 8),
}

# Accelerator facts: memory GiB and the peak_flops.csv hardware rows that describe it.
ACCELERATORS = {
    "A100-40GB": ("NVIDIA", 40, ["NVIDIA A100 (SXM and PCIe, 40/80GB)"]),
    "A100-80GB": ("NVIDIA", 80, ["NVIDIA A100 (SXM and PCIe, 40/80GB)"]),
    "H100-80GB": ("NVIDIA", 80, ["NVIDIA H100 SXM"]),
    "H100-NVL": ("NVIDIA", 94, ["NVIDIA H100 NVL"]),
    "H200": ("NVIDIA", 141, ["NVIDIA H200 SXM"]),
    "B200": ("NVIDIA", 179, ["NVIDIA B200"]),
    "B300": ("NVIDIA", 268, []),
    "L4": ("NVIDIA", 24, ["NVIDIA L4"]),
    "L40S": ("NVIDIA", 48, ["NVIDIA L40S"]),
    "A10G": ("NVIDIA", 24, ["NVIDIA A10G (AWS g5)"]),
    "A10": ("NVIDIA", 24, ["NVIDIA A10"]),
    "V100-16GB": ("NVIDIA", 16, ["NVIDIA V100 SXM"]),
    "V100-32GB": ("NVIDIA", 32, ["NVIDIA V100 SXM"]),
    "T4": ("NVIDIA", 16, ["NVIDIA T4"]),
    "K80": ("NVIDIA", 12, []),
    "M60": ("NVIDIA", 8, []),
    "Radeon-MI25": ("AMD", 16, []),
    "Gaudi-HL205": ("Intel Habana", 32, ["Intel Gaudi (1st gen)"]),
    "Trainium1": ("AWS", 32, ["AWS Trainium1 (trn1, per NeuronCore-v2)"]),
    "Trainium2": ("AWS", 96, []),
    "Qualcomm-AI100": ("Qualcomm", 16, []),
}
# Trainium1 peak is tabulated per NeuronCore; a Trainium1 chip has two.
PEAK_SCALE = {"Trainium1": 2.0}
PRECISIONS = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "tf32": "tf32", "fp32 (non-tensor)": "fp32"}

# Inter-node fabric: instance type -> (Gbit/s, fabric), from the sources named in SOURCES["network-specs"].
# AWS: EC2 DescribeInstanceTypes NetworkInfo as moto 5.2.5 ships it (moto/ec2/resources/instance_types.json.gz):
# NetworkPerformance where it is a fixed "N Gigabit" (or "Kx N"), the network cards' summed baseline where it is
# "Up to N" (a burst a days-long all-reduce does not keep); efa where EfaSupported. tests/test_catalog_network.py
# holds every AWS entry to the installed moto file.
AWS_NETWORK = {
    "dl2q.24xlarge": (100, "efa"), "g4dn.16xlarge": (50, "efa"), "g4dn.2xlarge": (10, ""), "g4dn.4xlarge": (20, ""),
    "g4dn.8xlarge": (50, "efa"), "g4dn.xlarge": (5, ""), "g5.16xlarge": (25, "efa"), "g5.2xlarge": (5, ""),
    "g5.4xlarge": (10, ""), "g5.8xlarge": (25, "efa"), "g5.xlarge": (2.5, ""), "g6.12xlarge": (40, "efa"),
    "g6.16xlarge": (25, "efa"), "g6.24xlarge": (50, "efa"), "g6.2xlarge": (5, ""), "g6.4xlarge": (10, ""),
    "g6.8xlarge": (25, "efa"), "g6.xlarge": (2.5, ""), "g6e.16xlarge": (35, "efa"), "g6e.2xlarge": (5, ""),
    "g6e.4xlarge": (20, ""), "g6e.8xlarge": (25, "efa"), "g6e.xlarge": (2.5, ""), "p5.4xlarge": (100, "efa"),
    "p6-b300.48xlarge": (6400, ""), "trn1.2xlarge": (3.125, ""), "trn2.3xlarge": (200, "efa"),
}  # fmt: skip
# EFA-capable types the fleet cannot give EFA yet, so the catalog names no fabric (plans assume TCP) until it can.
EFA_NOT_YET = {
    "p6-b300.48xlarge": "17 network cards but 16 EFA interfaces (card 0 is ENA only): the fleet's one EFA interface "
    "per card, from card 0 (infra/catalog/network_cards.py), would not launch",
}
# Azure: the size pages' "Max Bandwidth (Mbps)" (MicrosoftDocs/azure-compute-docs, tests/fixtures/network_specs/).
AZURE_NETWORK = {
    "Standard_NC24ads_A100_v4": (20, ""), "Standard_NC48ads_A100_v4": (40, ""), "Standard_NC96ads_A100_v4": (80, ""),
    "Standard_NC40ads_H100_v5": (40, ""), "Standard_NC80adis_H100_v5": (80, ""), "Standard_NC4as_T4_v3": (8, ""),
    "Standard_NC8as_T4_v3": (8, ""), "Standard_NC16as_T4_v3": (8, ""), "Standard_NC64as_T4_v3": (32, ""),
}  # fmt: skip
NETWORK = {
    **AWS_NETWORK,
    **AZURE_NETWORK,
    "p4d.24xlarge": (400, "efa"), "p4de.24xlarge": (400, "efa"), "p5.48xlarge": (3200, "efa"),
    "p5e.48xlarge": (3200, "efa"), "p5en.48xlarge": (3200, "efa"), "p6-b200.48xlarge": (3200, "efa"),
    "p3dn.24xlarge": (100, "efa"), "p3.16xlarge": (25, ""), "dl1.24xlarge": (400, "efa"),
    "trn1.32xlarge": (800, "efa"), "trn1n.32xlarge": (1600, "efa"), "trn2.48xlarge": (3200, "efa"),
    "g5.48xlarge": (100, "efa"), "g5.12xlarge": (40, "efa"), "g5.24xlarge": (50, "efa"),
    "g4dn.metal": (100, "efa"), "g4dn.12xlarge": (50, "efa"), "g6.48xlarge": (100, "efa"),
    "g6e.48xlarge": (400, "efa"), "g6e.24xlarge": (200, "efa"), "g6e.12xlarge": (100, "efa"),
    "a2-highgpu-8g": (100, ""), "a2-megagpu-16g": (100, ""), "a2-ultragpu-8g": (100, ""),
    "a3-highgpu-8g": (1000, "gpudirect-tcpx"), "a3-megagpu-8g": (1800, "gpudirect-tcpxo"),
    "a3-ultragpu-8g": (3200, "rdma"), "a4-highgpu-8g": (3200, "rdma"),
    "Standard_ND96asr_v4": (1600, "infiniband"), "Standard_ND96amsr_A100_v4": (1600, "infiniband"),
    "Standard_ND96isr_H100_v5": (3200, "infiniband"), "Standard_ND40rs_v2": (100, "infiniband"),
}  # fmt: skip

GCP_AZURE_ASSUMED_BUCKET = 2


def _price(text: str) -> str:
    """Prices stay text exactly as in the source; empty means unknown, never 0."""
    return text.strip()


def _count(text: str) -> str:
    return str(int(float(text))) if text.strip() else ""


def _load_advisor(path: Path) -> dict[tuple[str, str], int]:
    data = json.loads(path.read_text())
    return {
        (region, itype): int(info["r"])
        for region, by_os in data["spot_advisor"].items()
        for itype, info in by_os.get("Linux", {}).items()
    }


def _aws_rows(src: Path, advisor: dict[tuple[str, str], int]) -> list[dict[str, str]]:
    rows = []
    for r in csv.DictReader((src / "catalog/aws_accel.csv").open()):
        itype = r["InstanceType"]
        if r["AcceleratorName"]:
            accel, count = AWS_ACCELERATORS[r["AcceleratorName"]], _count(r["AcceleratorCount"])
        else:
            accel, n = AWS_UNNAMED[itype]
            count = str(n)
        mem = ""
        if r["GpuInfo"]:
            gpus = ast.literal_eval(r["GpuInfo"])["Gpus"][0]
            mem = f"{gpus['MemoryInfo']['SizeInMiB'] / 1024:g}"
        bucket = advisor.get((r["Region"], itype))
        rows.append(_row(
            "aws", r["Region"], r["AvailabilityZone"], itype, accel, count, mem, r["vCPUs"], r["MemoryGiB"],
            _price(r["Price"]), _price(r["SpotPrice"]), bucket, "aws-spot-advisor" if bucket is not None else "",
            "skypilot-aws", "",
        ))  # fmt: skip
    return rows


def _gcp_rows(src: Path) -> list[dict[str, str]]:
    hosts, gpus = [], {}
    for r in csv.DictReader((src / "catalog/gcp_accel.csv").open()):
        if r["InstanceType"]:
            hosts.append(r)
        else:
            gpus[(r["AcceleratorName"], int(float(r["AcceleratorCount"])), r["AvailabilityZone"])] = r
    rows = []
    for h in hosts:
        gpu_name, n = GCP_MACHINE_GPUS[h["InstanceType"]]
        g = gpus.get((gpu_name, n, h["AvailabilityZone"]))
        od = _sum_prices(h["Price"], g["Price"] if g else "")
        spot = _sum_prices(h["SpotPrice"], g["SpotPrice"] if g else "")
        note = "price = host row + GPU row" if g else "no GPU price row for this zone: price unknown"
        rows.append(_row(
            "gcp", h["Region"], h["AvailabilityZone"], h["InstanceType"], GCP_ACCELERATORS[gpu_name], str(n),
            "", h["vCPUs"], h["MemoryGiB"], od, spot, GCP_AZURE_ASSUMED_BUCKET, "assumed-interruption",
            "skypilot-gcp", note,
        ))  # fmt: skip
    return rows


def _sum_prices(host: str, gpu: str) -> str:
    if not host.strip() or not gpu.strip():
        return ""
    return f"{float(host) + float(gpu):.6f}".rstrip("0").rstrip(".")


def _azure_rows(src: Path) -> list[dict[str, str]]:
    rows = []
    for r in csv.DictReader((src / "catalog/azure_accel.csv").open()):
        itype = r["InstanceType"]
        accel = AZURE_TYPE_ACCELERATOR.get(itype) or AZURE_ACCELERATORS.get(r["AcceleratorName"], "")
        count, note = _count(r["AcceleratorCount"]), ""
        if itype in AZURE_COUNT_FIX:
            fixed, note = AZURE_COUNT_FIX[itype]
            count = str(fixed)
        if accel and r["AcceleratorName"] and r["SpotPrice"] and r["SpotPrice"] == r["Price"]:
            note = (
                note + "; " if note else ""
            ) + "spot equals pay-as-you-go in the source (no real spot price)"
        rows.append(_row(
            "azure", r["Region"], "", itype, accel, count if accel else "", "", r["vCPUs"], r["MemoryGiB"],
            _price(r["Price"]), _price(r["SpotPrice"]), GCP_AZURE_ASSUMED_BUCKET, "assumed-interruption",
            "skypilot-azure", note,
        ))  # fmt: skip
    return rows


SPOT_NOT_BELOW_ON_DEMAND = "spot at or above on-demand in the source (a capped or stale spot price)"


def _row(cloud, region, zone, itype, accel, count, mem, vcpus, ram, od, spot, bucket, bucket_src, src, note):
    gbps, fabric = NETWORK.get(itype, ("", ""))
    if od and spot and float(spot) >= float(od) and "spot equals" not in note:
        note = f"{note}; {SPOT_NOT_BELOW_ON_DEMAND}" if note else SPOT_NOT_BELOW_ON_DEMAND
    if not mem and accel in ACCELERATORS:
        mem = str(ACCELERATORS[accel][1])
    values = [
        cloud, region, zone, itype, accel, count, mem, f"{float(vcpus):g}", f"{float(ram):g}", od, spot,
        "" if bucket is None else str(bucket), bucket_src, str(gbps), fabric, src, note,
    ]  # fmt: skip
    return dict(zip(OFFER_COLUMNS, values, strict=True))


def _accelerator_rows(src: Path) -> list[dict[str, str]]:
    peaks: dict[str, dict[str, tuple[str, str]]] = defaultdict(dict)
    for r in csv.DictReader((src / "calibration/peak_flops.csv").open()):
        if r["dtype"] in PRECISIONS:
            peaks[r["hardware"]][PRECISIONS[r["dtype"]]] = (r["tflops"], r["source"])
    rows = []
    for name, (vendor, mem, hardware) in ACCELERATORS.items():
        row = {"name": name, "vendor": vendor, "memory_gib": str(mem), "peak_hardware": "; ".join(hardware)}
        for precision in PRECISIONS.values():
            found = [peaks[h][precision] for h in hardware if precision in peaks[h]]
            value = float(found[0][0]) * PEAK_SCALE.get(name, 1.0) if found else None
            row[f"peak_{precision}_tflops"] = "" if value is None else f"{value:g}"
        rows.append(row)
    return rows


def build(src: Path, out: Path = DATA_DIR) -> dict[str, int]:
    """Write offers.csv, accelerators.csv, sources.json and calibration/ into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    advisor = _load_advisor(src / "aws/spot-advisor-data.json")
    offers = _aws_rows(src, advisor) + _gcp_rows(src) + _azure_rows(src)
    _write_csv(out / "offers.csv", OFFER_COLUMNS, offers)
    _record_checked(out / "offers.csv")
    accels = _accelerator_rows(src)
    _write_csv(out / "accelerators.csv", list(accels[0]), accels)
    write_file(out / "sources.json", json.dumps(SOURCES, indent=2) + "\n", what="catalog sources")
    (out / "calibration").mkdir(exist_ok=True)
    for f in sorted((src / "calibration").glob("*.csv")):
        shutil.copyfile(f, out / "calibration" / f.name)
    return {"offers": len(offers), "accelerators": len(accels)}


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, str]]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_file(path, buf.getvalue(), what="catalog table")


def _record_checked(path: Path) -> None:
    """Check every row of a table just written (offer_rules: one line naming a bad row) and record its sha256
    beside it: loads of that exact content skip the check (loader.checked_at_build)."""
    read_offers(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    write_file(path.with_name(path.name + CHECKED_SUFFIX), f"{digest}  {path.name}\n", what="catalog digest")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--source", type=Path, default=Path("../shared/data"), help="the shared data folder")
    parser.add_argument("--out", type=Path, default=DATA_DIR)
    args = parser.parse_args()
    counts = build(args.source, args.out)
    print(re.sub(r"[{}']", "", f"wrote {args.out}: {counts}"))


if __name__ == "__main__":
    main()
