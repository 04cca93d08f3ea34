"""Published training throughput per accelerator family: the MFU a plan may claim, and never more.

Evidence rows come from two vendored tables under the catalog's calibration data:
  llmfoundry_throughput_full.csv  216 llm-foundry rows (A100 40/80GB, H100), the fitted curve's own data
  family_throughput.csv           rows collected for the other families (L4, L40S, A10G, H200, B200, Gaudi,
                                  and more H100), each with its source, a verbatim quote and notes
                                  (provenance: family_throughput.md beside it)
Every row's MFU is recomputed the planner's way, from its tokens/s per device:
    MFU = tokens/s x (6N + 12 L h s) / peak        (4N for LoRA rows: no base weight gradients)
with the peak the catalog (or PEAKS_OUTSIDE_CATALOG) gives for the row's precision.

A family rides on a fitted llm-foundry curve (BASE_CURVE) scaled by its factor: the median, over its rows
of the job's precision class (16-bit or fp8), of measured MFU / the curve's MFU for the row's shape (1 for
the two fitted families). On top, the MFU is capped at the best MFU published for that family and
precision class at the nearest model sizes (the rows of the nearest hidden size at or below, and at or
above, the job's): no plan claims more than someone measured. Where a family has no rows of the job's
precision class, the plan says so and takes the conservative figure: min(1, the other class's factor) and
the cap of the family its curve was fitted on (H100 or A100); with no rows at all, NO_EVIDENCE_FACTOR of
the curve.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from infra.catalog.loader import DATA_DIR

FAMILY_TABLE = DATA_DIR / "calibration" / "family_throughput.csv"

# Catalog accelerator (and evidence-only names) -> evidence family.
FAMILY = {
    "A100-40GB": "a100", "A100-80GB": "a100", "H100-80GB": "h100", "H100-NVL": "h100-nvl", "H200": "h200",
    "B200": "b200", "GB200": "gb200", "B300": "b300", "L4": "l4", "L40S": "l40s", "A10G": "a10", "A10": "a10",
    "Gaudi-HL205": "gaudi1", "Gaudi2": "gaudi2", "Gaudi3": "gaudi3",
}  # fmt: skip
# The fitted llm-foundry curve each family is scaled from (Hopper-generation and later: the H100 curve).
BASE_CURVE = {"h100": "hopper", "h100-nvl": "hopper", "h200": "hopper", "b200": "hopper", "gb200": "hopper",
              "b300": "hopper"}  # fmt: skip
FITTED = {"a100", "h100"}
NO_EVIDENCE_FACTOR = 0.5
# Families without any rows take the factor of their closest published analog when it is lower than the default:
# the L4 (Ada) and A10G/A10 (Ampere) are PCIe cards without NVLink, like the L40S (Ada, PCIe) whose rows exist.
ANALOG = {"l4": "l40s", "a10": "l40s"}
PEER = {"a100": "a100", "hopper": "h100", "hopper-fp8": "h100"}  # the fitted family of each curve
# Dense peaks the catalog lacks for evidence rows: Gaudi 2/3 and GB200 from peak_flops.csv beside the tables
# (Intel product briefs; GB200 per GPU); fp8 of B200 (4.5 PFLOP/s dense: NVIDIA HGX B200 datasheet, 72 PFLOP/s
# FP8 with sparsity for 8 GPUs), L40S (733 TFLOP/s dense: NVIDIA L40S datasheet, 1,466 with sparsity), GB200.
EVIDENCE_PEAKS = {"Gaudi2": {"bf16": 432.0, "fp8": 865.0}, "Gaudi3": {"bf16": 1835.0, "fp8": 1835.0},
                  "GB200": {"bf16": 2500.0, "fp8": 5000.0}, "B200": {"fp8": 4500.0}, "L40S": {"fp8": 733.0}}
# fmt: skip


def precision_class(precision: str) -> str:
    return "fp8" if precision == "fp8" else "16-bit"


def family_of(accelerator: str) -> str:
    return FAMILY.get(accelerator, accelerator.lower())


def base_curve(family: str, precision: str) -> str:
    curve = BASE_CURVE.get(family, "a100")
    return "hopper-fp8" if curve == "hopper" and precision == "fp8" else curve


@dataclass(frozen=True, slots=True)
class EvidenceRow:
    accelerator: str
    model: str
    hidden: int
    layers: int
    params: float
    seq_len: int
    devices: int
    micro_tokens: int | None  # tokens per device per micro-step, where the source says
    precision: str
    method: str
    tokens_per_s_per_device: float
    mfu: float  # recomputed as above
    checkpointing: bool | None
    source: str

    @property
    def family(self) -> str:
        return family_of(self.accelerator)


def row_mfu(tokens_per_s: float, params: float, layers: int, hidden: int, seq_len: int, method: str,
            peak_tflops: float) -> float:  # fmt: skip
    dense = 6.0 if method == "full" else 4.0
    return tokens_per_s * (dense * params + 12.0 * layers * hidden * seq_len) / (peak_tflops * 1e12)


def _bool(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text.strip().lower())


def load_family_rows(peaks: dict[str, dict[str, float]], path: Path = FAMILY_TABLE) -> list[EvidenceRow]:
    """Rows of family_throughput.csv that state tokens/s and a dense model shape (MoE rows are left out:
    6N of the total parameters is not what they compute)."""
    out = []
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            try:
                tps = float(r["tokens_per_s_per_device"])
                params = float(r["params_b"]) * 1e9
                layers, hidden, seq = int(r["layers"]), int(r["hidden"]), int(r["seq_len"])
                devices = int(r["devices"])
            except ValueError:
                continue  # a row kept for its provenance but without a usable figure (e.g. MLPerf time only)
            if "moe" in (r["model"] + r["notes"]).lower():
                continue
            precision = "fp8" if r["precision"].strip().lower() == "fp8" else "bf16"
            peak = peaks.get(r["accelerator"], {}).get(precision)
            if not peak:
                continue
            method = "lora" if r["method"].strip().lower() == "lora" else "full"
            out.append(EvidenceRow(r["accelerator"], r["model"], hidden, layers, params, seq, devices, None,
                                   precision, method, tps, row_mfu(tps, params, layers, hidden, seq, method, peak),
                                   _bool(r["activation_checkpointing"]), r["source"]))  # fmt: skip
    return out


@dataclass(frozen=True)
class FamilyEvidence:
    """One family's rows, its factor on its base curve per precision class, and its MFU caps."""

    family: str
    rows: tuple[EvidenceRow, ...] = ()
    factors: dict[str, float] = field(default_factory=dict)  # precision class -> median measured / curve
    # a memo, never copied by dataclasses.replace (init=False): a family with other rows starts empty
    _caps: dict[tuple[int, str], float | None] = field(default_factory=dict, init=False, compare=False, repr=False)

    def rows_for(self, precision: str) -> list[EvidenceRow]:
        return [r for r in self.rows if precision_class(r.precision) == precision_class(precision)]

    def factor(self, precision: str) -> float:
        """Its own class's factor; else no more than the other class's and never above 1; else the default."""
        own = self.factors.get(precision_class(precision))
        if own is not None:
            return own
        return min([1.0, *self.factors.values()]) if self.factors else NO_EVIDENCE_FACTOR

    def cap(self, hidden: int, precision: str) -> float | None:
        """The best MFU published at the nearest hidden sizes at or below and at or above `hidden` (the
        smallest or largest published size beyond the table's ends); None without rows of the class."""
        key = (hidden, precision_class(precision))
        if key not in self._caps:
            self._caps[key] = self._cap(hidden, precision)
        return self._caps[key]

    def _cap(self, hidden: int, precision: str) -> float | None:
        rows = self.rows_for(precision)
        if not rows:
            return None
        sizes = sorted({r.hidden for r in rows})
        below = [h for h in sizes if h <= hidden]
        above = [h for h in sizes if h >= hidden]
        near = {below[-1] if below else sizes[0], above[0] if above else sizes[-1]}
        return max(r.mfu for r in rows if r.hidden in near)


def family_factors(rows: list[EvidenceRow], curve_mfu) -> dict[str, float]:
    """Per precision class: the median of measured / curve MFU over its rows (the curve at each row's shape)."""
    out = {}
    for cls in {precision_class(r.precision) for r in rows}:
        ratios = [r.mfu / curve_mfu(r) for r in rows if precision_class(r.precision) == cls]
        ratios = [x for x in ratios if math.isfinite(x) and x > 0]
        if ratios:
            out[cls] = statistics.median(ratios)
    return out
