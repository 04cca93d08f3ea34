"""Obtainable spot capacity: AWS spot placement scores (1-10) per region or zone, instance type and node count.

Written by `trainfleet catalog refresh --cloud aws --placement-scores` to $TRAINFLEET_HOME/placement-scores.json
(infra/catalog/refresh/placement.py has the format); read here. A score is AWS's estimate, at the time it was
fetched, that a spot request for `target_capacity` instances would succeed; it guarantees nothing.

The lookup is conservative: a score measured for fewer nodes says nothing about more, so a question about
`nodes` is answered by the row with the smallest target_capacity >= nodes. A zone question (zone != "") is
answered only by a single-AZ score for that zone, a region question (zone "") only by a regional score: a
regional score assumes the fleet may use every zone, so it says nothing about one zone, and the reverse.
"""

from __future__ import annotations

import bisect
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from infra.errors import CatalogError, shown

PLACEMENT_SCORES_NAME = "placement-scores.json"
FORMAT_VERSION = 1
SCORE_MIN, SCORE_MAX = 1, 10  # GetSpotPlacementScores: "on a scale from 1 to 10"
# Azure's Spot Placement Score is a level, not a number (MicrosoftDocs azure-compute-docs spot-placement-score.md;
# tests/fixtures/azure_placement/PROVENANCE.md). Read on AWS's scale only where the two say the same thing: "High
# indicates that the deployment is highly likely to succeed", AWS's 10 "is highly likely to succeed"; "Low
# indicates that the deployment has a low chance of success", AWS's 1 "is not likely to succeed"; "Restricted SKU
# ... the Spot VM SKU isn't available for the subscription": none to be had. Medium has no words to read as a
# number: it is kept, shown, and the traces' assumed wait stands in. DataNotFoundOrStale is not kept.
AZURE_LEVEL_SCORE = {"High": SCORE_MAX, "Medium": None, "Low": SCORE_MIN, "RestrictedSkuNotAvailable": SCORE_MIN}


@dataclass(frozen=True, slots=True)
class PlacementScore:
    cloud: str
    region: str
    zone: str  # the AZ id (use1-az4) for a single-AZ score; "" for a regional score
    instance_type: str
    target_capacity: int  # instances the score was asked for
    score: int | None  # 1..10; None: a level with no number (Azure's Medium)
    as_of: str  # UTC ISO time the score was fetched
    source: str  # e.g. aws-get-spot-placement-scores
    level: str = ""  # Azure's own word for the score (High, Medium, Low, RestrictedSkuNotAvailable)


class PlacementScores:
    """Scores indexed by (cloud, region, zone, instance_type), each list sorted by target capacity."""

    def __init__(self, scores: Iterable[PlacementScore] = ()):
        self.scores: tuple[PlacementScore, ...] = tuple(scores)
        index: dict[tuple[str, str, str, str], list[PlacementScore]] = defaultdict(list)
        for s in self.scores:
            index[(s.cloud, s.region, s.zone, s.instance_type)].append(s)
        self._index = {k: sorted(v, key=lambda s: s.target_capacity) for k, v in index.items()}
        self._capacities = {k: [s.target_capacity for s in v] for k, v in self._index.items()}

    def __len__(self) -> int:
        return len(self.scores)

    def lookup(
        self, cloud: str, region: str, zone: str, instance_type: str, nodes: int
    ) -> PlacementScore | None:
        """The score for the smallest measured target capacity >= nodes; None when nothing covers `nodes`."""
        if nodes < 1:
            raise ValueError(f"nodes must be at least 1, got {nodes}")
        key = (cloud, region, zone, instance_type)
        capacities = self._capacities.get(key)
        if not capacities:
            return None
        i = bisect.bisect_left(capacities, nodes)
        return self._index[key][i] if i < len(capacities) else None


def placement_scores_path() -> Path:
    from infra.catalog.refresh.overlay import trainfleet_home  # late: keeps this module light

    return trainfleet_home() / PLACEMENT_SCORES_NAME


def _fix(path: Path) -> str:
    return (
        f"re-run `trainfleet catalog refresh --cloud aws --placement-scores` (and `--cloud azure`) to rewrite it, "
        f"or delete {path}"
    )


def read_document(path: Path) -> dict:
    """The file's JSON object, checked for shape; a bad file raises one-line CatalogError."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CatalogError(
            f"placement scores file {path} cannot be read ({exc.strerror or exc}); {_fix(path)}"
        ) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise CatalogError(f"placement scores file {path} is not valid JSON ({exc}); {_fix(path)}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("scores"), list):
        raise CatalogError(f'placement scores file {path} has no "scores" list; {_fix(path)}')
    if doc.get("format") != FORMAT_VERSION:
        raise CatalogError(
            f"placement scores file {path} has format {shown(doc.get('format'))}, expected {FORMAT_VERSION}; "
            f"{_fix(path)}"
        )
    for n, row in enumerate(doc["scores"], start=1):
        problem = row_problem(row)
        if problem:
            raise CatalogError(f"placement scores file {path}: score {n} {problem}; {_fix(path)}")
    return doc


def row_problem(row: object) -> str:
    """What is wrong with one stored row, or "" when nothing is."""
    if not isinstance(row, dict):
        return "is not an object"
    for name in ("cloud", "region", "instance_type", "fetched_at", "source"):
        if not isinstance(row.get(name), str) or not row[name]:
            return f"has no {name}"
    if not isinstance(row.get("zone"), str):
        return "has no zone"
    checked = [("target_capacity", 1, 2_000_000_000)]
    if row["cloud"] == "azure":
        level = row.get("level")
        if level not in AZURE_LEVEL_SCORE:
            return f"has level = {shown(level)}, not one of {', '.join(AZURE_LEVEL_SCORE)}"
        if row.get("score") != AZURE_LEVEL_SCORE[level]:
            return f"has score = {shown(row.get('score'))} for level {level}, not {AZURE_LEVEL_SCORE[level]}"
    else:
        checked.append(("score", SCORE_MIN, SCORE_MAX))
    for name, low, high in checked:
        value = row.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return f"has {name} = {shown(value)}, not a whole number in {low}..{high}"
    if not isinstance(row.get("single_az"), bool):
        return f"has single_az = {shown(row.get('single_az'))}, not true or false"
    if row["single_az"] != bool(row["zone"]):  # a zone score names its zone; a regional one names none
        return "has single_az and zone that disagree"
    return ""


def load_placement_scores(path: Path) -> PlacementScores:
    doc = read_document(Path(path))
    fields = ("cloud", "region", "zone", "instance_type", "target_capacity", "score", "fetched_at", "source")
    return PlacementScores(PlacementScore(*(r[f] for f in fields), level=r.get("level", "")) for r in doc["scores"])


@cache
def default_placement_scores() -> PlacementScores:
    """The user's refreshed scores if the file exists, else none (cached: one read per process)."""
    path = placement_scores_path()
    return load_placement_scores(path) if path.exists() else PlacementScores()


__all__ = [
    "PlacementScore",
    "PlacementScores",
    "default_placement_scores",
    "load_placement_scores",
    "placement_scores_path",
]
