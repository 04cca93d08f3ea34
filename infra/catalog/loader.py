"""Load the catalog files into typed offers and index them for the filters the CLI and planner use."""

from __future__ import annotations

import csv
import hashlib
import importlib
import json
import math
from collections import defaultdict
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from infra.catalog.model import OFFER_COLUMNS, Accelerator, Offer
from infra.catalog.offer_rules import NUMBERS, row_problem
from infra.catalog.sold import NOT_SOLD_NOTE, on_demand_sold
from infra.errors import CatalogError, shown

DATA_DIR = Path(__file__).parent / "data"
CHECKED_SUFFIX = ".sha256"  # beside a table the build checked: its digest, in sha256sum's format
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


def read_offers(path: Path, check: bool = True) -> list[Offer]:
    """Parse an offers CSV (the embedded one or a refreshed overlay), each row held to offer_rules unless `check`
    is False (a table the build checked: `checked_at_build`)."""
    try:
        with path.open(newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None or header[: len(OFFER_COLUMNS)] != OFFER_COLUMNS:
                raise CatalogError(f"catalog file {path}: header is not {','.join(OFFER_COLUMNS)}; {_FIX}")
            has_as_of = len(header) > len(OFFER_COLUMNS) and header[len(OFFER_COLUMNS)] == "as_of"
            return [
                _offer(row, f"catalog file {path} line {n}", has_as_of, check) for n, row in enumerate(reader, 2)
            ]
    except OSError as exc:
        raise CatalogError(f"catalog file {path} cannot be read ({exc.strerror}); {_FIX}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise CatalogError(f"catalog file {path} is corrupt ({exc}); {_FIX}") from None


_COLUMNS = [*OFFER_COLUMNS, "as_of"]  # as_of: optional, last
_AT = {column: i for i, column in enumerate(_COLUMNS)}
_NUMBER_AT = [_AT[column] for column in NUMBERS]


def _offer(row: list[str], where: str, has_as_of: bool, check: bool = True) -> Offer:
    width = len(OFFER_COLUMNS) + (1 if has_as_of else 0)
    if len(row) != width:
        raise CatalogError(f"{where}: has {len(row)} columns, expected {width}; {_FIX}")
    try:
        numbers = [float(row[i]) if row[i] else None for i in _NUMBER_AT]  # '' is unknown (None), never 0
    except ValueError:
        column, text = next((c, row[i]) for c, i in zip(NUMBERS, _NUMBER_AT, strict=True) if not _is_number(row[i]))
        raise CatalogError(f"{where}: column {column} = {shown(text)} is not a number; {_FIX}") from None
    if check:
        values: dict[str, object] = {**dict(zip(_COLUMNS, row, strict=False)), **dict(zip(NUMBERS, numbers, strict=True))}
        values.setdefault("as_of", "")
        bad = row_problem(values)
        if bad:
            column, problem = bad
            cell = row[_AT[column]] if _AT[column] < len(row) else ""
            raise CatalogError(f"{where}: column {column} = {shown(cell)} {problem}; {_FIX}")
    # the text cells by name, in OFFER_COLUMNS' order (the numbers between them are parsed above)
    cloud, region, zone, instance_type, accelerator = row[:5]
    interruption_source, _, fabric, source, note = row[12:17]
    per_node, device_gib, vcpus, memory_gib, on_demand, spot, bucket, network = numbers
    if not on_demand_sold(cloud, instance_type):
        on_demand = None
        note = "; ".join(n for n in (note, NOT_SOLD_NOTE) if n)
    # positional, in the Offer's field order: OFFER_COLUMNS, then as_of (tests/test_catalog.py holds them alike)
    return Offer(cloud, region, zone, instance_type, accelerator, int(per_node or 0), device_gib or 0.0, vcpus or 0.0,
                 memory_gib or 0.0, on_demand, spot, None if bucket is None else int(bucket), interruption_source,
                 network, fabric, source, note, row[-1] if has_as_of else "")  # fmt: skip


def _is_number(text: str) -> bool:
    try:
        float(text or 0)
    except ValueError:
        return False
    return True


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


def snapshot_offers(data_dir: Path = DATA_DIR) -> tuple[Offer, ...]:
    """The offers of a catalog folder's offers.csv, parsed once per version of the file: every catalog load (each
    after a refresh rewrites the overlay) starts from them, and parsing 2,000+ rows takes tens of milliseconds."""
    path = data_dir / "offers.csv"
    try:
        st = path.stat()
    except OSError:
        return tuple(read_offers(path))  # says why, in one line
    return _parsed_offers(path, st.st_mtime_ns, st.st_size)


@cache
def _parsed_offers(path: Path, mtime_ns: int, size: int) -> tuple[Offer, ...]:
    return tuple(read_offers(path, check=not checked_at_build(path)))


def checked_at_build(path: Path) -> bool:
    """Whether `path` is, byte for byte, the table `python -m infra.catalog.build` checked row by row and recorded
    in PATH.sha256: its rows need no second check at every load (6% of a plan's instructions). Any other content (an
    edit, a corrupt copy) is checked as it loads. tests/test_catalog.py holds the shipped table to today's rules."""
    try:
        recorded = path.with_name(path.name + CHECKED_SUFFIX).read_text().split()[0]
        return hashlib.sha256(path.read_bytes()).hexdigest() == recorded
    except (OSError, IndexError, UnicodeDecodeError):
        return False


def load_catalog(data_dir: Path = DATA_DIR, overlays: Iterable[Path] = ()) -> Catalog:
    """Read the embedded catalog; offers in `overlays` replace the same (cloud, region, zone, type)."""
    offers = {(o.cloud, o.region, o.zone, o.instance_type): o for o in snapshot_offers(data_dir)}
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
    from infra.catalog.refresh.overlay import (  # late: import cycle
        REFRESH_SOURCES,
        overlay_path,
        trainfleet_home,
    )

    overlay = overlay_path()
    catalog = load_catalog(overlays=[overlay] if overlay.is_file() else [])
    for key, source in REFRESH_SOURCES.items():
        catalog.sources.setdefault(key, source)
    # `catalog refresh --cloud CLOUD --capacity`: dated interruption data over the snapshot's
    home = trainfleet_home()
    for name, module in CAPACITY_STORES:
        path = home / name
        if not path.is_file():
            continue  # the usual case: the module that reads it is not even imported
        store = importlib.import_module(module)
        refresh = store.read_refresh(path)
        sources = {**catalog.sources, store.SOURCE: refresh.source_entry()}
        catalog = Catalog(store.apply_refreshed(catalog.all_offers, refresh), catalog.accelerators.values(), sources)
    return catalog


# The files `catalog refresh --cloud CLOUD --capacity` writes under $TRAINFLEET_HOME, and the module that reads each
# (its read_refresh, apply_refreshed and SOURCE); tests/test_catalog.py holds the names to the modules' own.
CAPACITY_STORES = (
    ("spot-advisor.json", "infra.catalog.advisor"),
    ("azure-eviction-rates.json", "infra.catalog.azure_eviction"),
    ("gcp-preemption-history.json", "infra.catalog.gcp_preemption"),
)
