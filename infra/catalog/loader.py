"""Load the catalog files into typed offers and index them for the filters the CLI and planner use."""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from infra.catalog.model import OFFER_COLUMNS, OFFER_LIMITS, Accelerator, Offer
from infra.catalog.sold import NOT_SOLD_NOTE, on_demand_sold
from infra.errors import CatalogError, shown

DATA_DIR = Path(__file__).parent / "data"
_FIX = "reinstall trainfleet, or rebuild it with `python -m infra.catalog.build`"


class Catalog:
    """Offers and accelerators with lookups by cloud, region and instance type."""

    def __init__(self, offers: Iterable[Offer], accelerators: Iterable[Accelerator], sources: dict):
        self.all_offers: tuple[Offer, ...] = tuple(offers)
        self.accelerators: dict[str, Accelerator] = {a.name: a for a in accelerators}
        self.sources: dict = sources
        self._by_type: dict[tuple[str, str], list[Offer]] = defaultdict(list)
        for offer in self.all_offers:
            self._by_type[(offer.cloud, offer.instance_type)].append(offer)

    def offers(
        self,
        cloud: str | None = None,
        region: str | None = None,
        instance_type: str | None = None,
        accelerator: str | None = None,
        zone: str | None = None,
    ) -> list[Offer]:
        """Offers matching every given filter (exact matches)."""
        pool: Iterable[Offer]
        if cloud is not None and instance_type is not None:
            pool = self._by_type.get((cloud, instance_type), [])
        else:
            pool = self.all_offers
        return [
            o
            for o in pool
            if (cloud is None or o.cloud == cloud)
            and (region is None or o.region == region)
            and (instance_type is None or o.instance_type == instance_type)
            and (accelerator is None or o.accelerator == accelerator)
            and (zone is None or o.zone == zone)
        ]

    def instance_types(self, cloud: str | None = None) -> list[str]:
        return sorted({o.instance_type for o in self.all_offers if cloud is None or o.cloud == cloud})

    def accelerator(self, name: str) -> Accelerator | None:
        return self.accelerators.get(name)


def _float(text: str, where: str, column: str) -> float | None:
    """A numeric cell: '' is unknown (None); anything else must be a finite number within OFFER_LIMITS."""
    if text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise CatalogError(f"{where}: column {column} = {shown(text)} is not a number; {_FIX}") from None
    if not math.isfinite(value):
        raise CatalogError(f"{where}: column {column} = {shown(text)} is not a finite number; {_FIX}")
    low, high, whole = OFFER_LIMITS.get(column, (-math.inf, math.inf, False))
    if not low <= value <= high:
        raise CatalogError(f"{where}: column {column} = {shown(text)} is outside {low:g}..{high:g}; {_FIX}")
    if whole and value != int(value):
        raise CatalogError(f"{where}: column {column} = {shown(text)} is not a whole number; {_FIX}")
    return value


def read_offers(path: Path) -> list[Offer]:
    """Parse an offers CSV (the embedded one or a refreshed overlay)."""
    try:
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None or header[: len(OFFER_COLUMNS)] != OFFER_COLUMNS:
                raise CatalogError(f"catalog file {path}: header is not {','.join(OFFER_COLUMNS)}; {_FIX}")
            has_as_of = len(header) > len(OFFER_COLUMNS) and header[len(OFFER_COLUMNS)] == "as_of"
            return [
                _offer(row, f"catalog file {path} line {n}", has_as_of) for n, row in enumerate(reader, 2)
            ]
    except OSError as exc:
        raise CatalogError(f"catalog file {path} cannot be read ({exc.strerror}); {_FIX}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise CatalogError(f"catalog file {path} is corrupt ({exc}); {_FIX}") from None


def _offer(row: list[str], where: str, has_as_of: bool) -> Offer:
    width = len(OFFER_COLUMNS) + (1 if has_as_of else 0)
    if len(row) != width:
        raise CatalogError(f"{where}: has {len(row)} columns, expected {width}; {_FIX}")
    v = dict(zip(OFFER_COLUMNS, row, strict=False))
    if v["cloud"] not in ("aws", "gcp", "azure") or not v["instance_type"] or not v["region"]:
        raise CatalogError(f"{where}: cloud/region/instance_type missing or unknown; {_FIX}")
    bucket = _float(v["interruption_bucket"], where, "interruption_bucket")  # 0..4, whole
    prices = {c: _float(v[c], where, c) for c in ("on_demand_usd_per_hour", "spot_usd_per_hour")}
    note = v["note"]
    if not on_demand_sold(v["cloud"], v["instance_type"]):
        prices["on_demand_usd_per_hour"] = None
        note = "; ".join(n for n in (note, NOT_SOLD_NOTE) if n)
    return Offer(
        cloud=v["cloud"],
        region=v["region"],
        zone=v["zone"],
        instance_type=v["instance_type"],
        accelerator=v["accelerator"],
        accelerators_per_node=int(_float(v["accelerators_per_node"], where, "accelerators_per_node") or 0),
        accelerator_memory_gib=_float(v["accelerator_memory_gib"], where, "accelerator_memory_gib") or 0.0,
        vcpus=_float(v["vcpus"], where, "vcpus") or 0.0,
        memory_gib=_float(v["memory_gib"], where, "memory_gib") or 0.0,
        on_demand_usd_per_hour=prices["on_demand_usd_per_hour"],
        spot_usd_per_hour=prices["spot_usd_per_hour"],
        interruption_bucket=None if bucket is None else int(bucket),
        interruption_source=v["interruption_source"],
        network_gbps=_float(v["network_gbps"], where, "network_gbps"),
        fabric=v["fabric"],
        source=v["source"],
        note=note,
        as_of=row[len(OFFER_COLUMNS)] if has_as_of else "",
    )


def read_accelerators(path: Path) -> list[Accelerator]:
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CatalogError(f"catalog file {path} cannot be read ({exc}); {_FIX}") from None
    accelerators = []
    for n, r in enumerate(rows, 2):
        where = f"catalog file {path} line {n}"
        try:
            peaks = {
                k.removeprefix("peak_").removesuffix("_tflops"): float(v)
                for k, v in r.items()
                if k.startswith("peak_") and k.endswith("_tflops") and v
            }
            memory = float(r["memory_gib"])
            accelerators.append(Accelerator(r["name"], r["vendor"], memory, peaks, r.get("peak_hardware", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise CatalogError(f"{where}: bad accelerator row ({exc}); {_FIX}") from None
        if not all(math.isfinite(x) and x > 0 for x in [memory, *peaks.values()]):
            raise CatalogError(f"{where}: memory_gib and peak TFLOP/s must be positive finite numbers; {_FIX}")
    return accelerators


def load_catalog(data_dir: Path = DATA_DIR, overlays: Iterable[Path] = ()) -> Catalog:
    """Read the embedded catalog; offers in `overlays` replace the same (cloud, region, zone, type)."""
    offers = {(o.cloud, o.region, o.zone, o.instance_type): o for o in read_offers(data_dir / "offers.csv")}
    for overlay in overlays:
        try:
            overlay_offers = read_offers(overlay)
        except CatalogError as exc:  # the user's refreshed overlay: name it and its own fix
            fix = f"run `trainfleet catalog refresh` to rewrite it, or delete {overlay}"
            raise CatalogError(exc.message.replace(_FIX, fix)) from None
        offers.update({(o.cloud, o.region, o.zone, o.instance_type): o for o in overlay_offers})
    try:
        sources = json.loads((data_dir / "sources.json").read_text())
    except (OSError, ValueError) as exc:
        raise CatalogError(
            f"catalog file {data_dir / 'sources.json'} cannot be read ({exc}); {_FIX}"
        ) from None
    return Catalog(offers.values(), read_accelerators(data_dir / "accelerators.csv"), sources)


@cache
def default_catalog() -> Catalog:
    """The catalog every command uses: the embedded snapshot, under the user's refreshed overlay if one exists."""
    from infra.catalog.refresh.overlay import REFRESH_SOURCES, overlay_path  # late: import cycle

    overlay = overlay_path()
    catalog = load_catalog(overlays=[overlay] if overlay.is_file() else [])
    for key, source in REFRESH_SOURCES.items():
        catalog.sources.setdefault(key, source)
    return catalog
