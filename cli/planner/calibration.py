"""MFU calibrated on the llm-foundry throughput table (216 published rows, embedded in the catalog), and held
to the published evidence of each accelerator family (cli/planner/evidence.py).

The curve is a log-linear fit of hardware FLOP utilisation (HFU, which counts recomputed FLOPs):

    ln HFU = c[curve, precision] + b1 ln(h / 4096) + b2 * attention share + b3 ln(devices / 8)
             + b4 ln(tokens per micro-batch / 2048)

fitted by ordinary least squares over every row. MFU = HFU with no activation checkpointing and
3/4 HFU with it (the forward pass runs twice: 8N instead of 6N hardware FLOPs per token).
Features are clamped to the range the table covers, so nothing is extrapolated beyond it.
Curves: `a100` (A100 rows), `hopper` (H100 rows), `hopper-fp8`. Each accelerator family is scaled from
one of them by its own published rows and capped at the best MFU published for it (evidence.py).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from cli.planner import evidence
from cli.planner.evidence import EvidenceRow, FamilyEvidence, base_curve, family_of
from cli.planner.presets import LLMFOUNDRY_MODELS
from infra.catalog.loader import DATA_DIR

TABLE = DATA_DIR / "calibration" / "llmfoundry_throughput_full.csv"
FAMILIES = ("a100", "hopper", "hopper-fp8")  # the fitted curves


@dataclass(frozen=True, slots=True)
class Row:
    """One llm-foundry benchmark row, with the shape of its model."""

    model: str
    gpu: str  # a100_40gb, a100_80gb, h100_80gb
    accelerator: str  # the catalog's name for it
    precision: str  # bf16 / fp8
    seq_len: int
    devices: int
    micro_batch: int
    grad_accum: int
    activation_checkpointing: bool
    zero_stage: int  # FULL_SHARD = 3, SHARD_GRAD_OP = 2
    mfu: float  # 0..1
    hfu: float
    tokens_per_s_per_device: float
    model_tflops: float  # achieved model TFLOP/s per device, as the table states it
    section: str

    @property
    def family(self) -> str:
        """The fitted curve this row belongs to."""
        return base_curve(family_of(self.accelerator), self.precision)

    def evidence(self) -> EvidenceRow:
        shape = LLMFOUNDRY_MODELS[self.model]
        return EvidenceRow(self.accelerator, self.model, shape.hidden, shape.layers, shape.params, self.seq_len,
                           self.devices, self.micro_batch * self.seq_len, self.precision, "full",
                           self.tokens_per_s_per_device, self.mfu, self.activation_checkpointing,
                           "mosaicml/llm-foundry scripts/train/benchmarking/README.md")  # fmt: skip


def load_rows(path: Path = TABLE) -> list[Row]:
    """Read the table (the only I/O in the planner's models)."""
    with path.open(newline="") as fh:
        raw = list(csv.DictReader(fh))
    accel = {"a100_40gb": "A100-40GB", "a100_80gb": "A100-80GB", "h100_80gb": "H100-80GB"}
    rows = []
    for r in raw:
        rows.append(
            Row(
                model=r["Model"],
                gpu=r["GPU"],
                accelerator=accel[r["GPU"]],
                precision="fp8" if "fp8" in r["Precision"] else "bf16",
                seq_len=int(r["SeqLen (T)"]),
                devices=int(r["# GPUs"]),
                micro_batch=int(r["MicroBatchSize"]),
                grad_accum=int(r["GradAccum"]),
                activation_checkpointing=r["Activation Checkpointing"] == "True",
                zero_stage=3 if r["Sharding Strategy"] == "FULL_SHARD" else 2,
                mfu=float(r["MFU"]) / 100,
                hfu=float(r["HFU"]) / 100,
                tokens_per_s_per_device=float(r["Throughput (T/s/GPU)"]),
                model_tflops=float(r["Model TFLOP"]),
                section=r["section"],
            )
        )
    return rows


@dataclass(frozen=True, slots=True)
class Fit:
    intercepts: dict[str, float]
    slopes: tuple[float, float, float, float]  # ln h, attention share, ln devices, ln micro tokens
    lo: tuple[float, float, float, float]  # feature ranges seen in the table
    hi: tuple[float, float, float, float]
    rows: int
    families: dict[str, FamilyEvidence] = field(default_factory=dict, compare=False, hash=False)
    # device_mfu is a pure function of its arguments; a search asks the same few thousand times over
    _mfu_memo: dict[tuple, tuple[float, float]] = field(default_factory=dict, init=False, compare=False, hash=False, repr=False)

    def hfu(self, family: str, hidden: int, attention_share: float, devices: int, micro_tokens: int) -> float:
        x = _features(hidden, attention_share, devices, micro_tokens)
        x = tuple(min(max(v, lo), hi) for v, lo, hi in zip(x, self.lo, self.hi, strict=True))
        return math.exp(self.intercepts[family] + sum(b * v for b, v in zip(self.slopes, x, strict=True)))

    def mfu_rises_with_micro_tokens(self) -> bool:
        """Whether MFU never falls as a micro-batch carries more tokens: they enter only through the clamped
        ln(tokens) term of HFU (slope b4), which the 1.0 ceiling, the family factor, recompute's 3/4 and the
        evidence cap keep monotone (`device_mfu`)."""
        return self.slopes[3] >= 0

    def mfu(self, family: str, hidden: int, attention_share: float, devices: int, micro_tokens: int,
            checkpointing: bool) -> float:  # fmt: skip
        return _mfu_of_hfu(self.hfu(family, hidden, attention_share, devices, micro_tokens), checkpointing)

    def device_mfu(self, accelerator: str, precision: str, hidden: int, attention_share: float, devices: int,
                   micro_tokens: int, checkpointing: bool) -> float:  # fmt: skip
        """The family's MFU: its curve x its factor, capped at the best MFU published for it near this size."""
        key = (accelerator, precision, hidden, attention_share, devices, micro_tokens)
        held = self._mfu_memo.get(key)
        if held is None:
            held = self._mfu_memo[key] = self._device_mfus(*key)
        return held[checkpointing]

    def _device_mfus(self, accelerator: str, precision: str, hidden: int, attention_share: float, devices: int,
                     micro_tokens: int) -> tuple[float, float]:  # fmt: skip
        """`device_mfu` without and with activation checkpointing: one HFU, two MFUs (`mfu`)."""
        fam = family_of(accelerator)
        curve = base_curve(fam, precision)
        hfu = self.hfu(curve, hidden, attention_share, devices, micro_tokens)
        factor = 1.0
        if fam not in evidence.FITTED:
            ev = self.families.get(fam)
            factor = ev.factor(precision) if ev is not None else self._no_evidence_factor(fam, precision)
        cap = self._cap(fam, curve, hidden, precision)
        out = []
        for checkpointing in (False, True):
            m = _mfu_of_hfu(hfu, checkpointing) * factor
            out.append(min(m, cap) if cap is not None else m)
        return out[0], out[1]

    def _no_evidence_factor(self, fam: str, precision: str) -> float:
        analog = self.families.get(evidence.ANALOG.get(fam, ""))
        return min(evidence.NO_EVIDENCE_FACTOR, analog.factor(precision)) if analog else evidence.NO_EVIDENCE_FACTOR

    def _cap(self, fam: str, curve: str, hidden: int, precision: str) -> float | None:
        for name in (fam, evidence.PEER[curve]):  # its own rows, else those of the family its curve is fitted on
            ev = self.families.get(name)
            cap = ev.cap(hidden, precision) if ev is not None else None
            if cap is not None:
                return cap
        return None

    def assumption(self, accelerator: str, precision: str) -> str | None:
        """What a plan on this accelerator assumes about its MFU where no published rows of its precision exist."""
        fam = family_of(accelerator)
        ev = self.families.get(fam)
        if fam in evidence.FITTED or (ev is not None and ev.rows_for(precision)):
            return None
        curve = base_curve(fam, precision)
        peer = evidence.PEER[curve]
        if ev is not None and ev.rows:
            return (f"{accelerator} {precision}: published rows are {', '.join(sorted(ev.factors))} only; "
                    f"{ev.factor(precision):.2f} x the {curve} curve and the {peer} caps assumed")
        factor = self._no_evidence_factor(fam, precision)
        analog = evidence.ANALOG.get(fam)
        why = f" (as its closest published analog, {analog})" if factor < evidence.NO_EVIDENCE_FACTOR else ""
        return (f"{accelerator} {precision}: no published training throughput in the calibration data; "
                f"{factor:.2f} x the {curve} curve{why}, capped as {peer}, assumed")

    def evidence_line(self, accelerator: str, precision: str, hidden: int) -> str:
        fam = family_of(accelerator)
        ev = self.families.get(fam)
        if ev is None or not ev.rows_for(precision):
            return self.assumption(accelerator, precision) or ""
        curve = base_curve(fam, precision)
        factor = "fitted on its own rows" if fam in evidence.FITTED else f"x {ev.factor(precision):.2f} (median of its rows)"
        cap = self._cap(fam, curve, hidden, precision)
        return (f"{accelerator}: {curve} curve {factor}; capped at MFU {cap:.3f}, the best of "
                f"{len(ev.rows_for(precision))} published {fam} {precision} rows at the nearest model sizes")

    def formula(self) -> str:
        c = ", ".join(f"{k} {v:+.3f}" for k, v in self.intercepts.items())
        b = self.slopes
        return (
            f"ln HFU = c[{c}] {b[0]:+.3f} ln(h/4096) {b[1]:+.3f} attn_share {b[2]:+.3f} ln(devices/8) "
            f"{b[3]:+.3f} ln(micro_tokens/2048)  (OLS on {self.rows} llm-foundry rows)"
        )


def _mfu_of_hfu(hfu: float, checkpointing: bool) -> float:
    """Recompute runs the forward twice: 8N hardware FLOPs a token for the 6N of the model."""
    return min(hfu, 1.0) * (0.75 if checkpointing else 1.0)


def _features(hidden: int, attention_share: float, devices: int, micro_tokens: int) -> tuple[float, ...]:
    return (math.log(hidden / 4096), attention_share, math.log(devices / 8), math.log(micro_tokens / 2048))


def attention_share(layers: int, hidden: int, seq_len: int, params: int, dense: float = 6.0) -> float:
    att = 12.0 * layers * hidden * seq_len
    return att / (dense * params + att)


def fit_rows(rows: list[Row]) -> Fit:
    """Least squares of ln HFU on the features (normal equations, Gauss-Jordan; no numpy needed)."""
    xs, ys = [], []
    for r in rows:
        shape = LLMFOUNDRY_MODELS[r.model]
        feats = _features(
            shape.hidden,
            attention_share(shape.layers, shape.hidden, r.seq_len, shape.params),
            r.devices,
            r.micro_batch * r.seq_len,
        )
        xs.append([1.0 if r.family == f else 0.0 for f in FAMILIES] + list(feats))
        ys.append(math.log(r.hfu))
    k = len(xs[0])
    a = [
        [sum(x[i] * x[j] for x in xs) for j in range(k)]
        + [sum(x[i] * y for x, y in zip(xs, ys, strict=True))]
        for i in range(k)
    ]
    for i in range(k):
        p = max(range(i, k), key=lambda r: abs(a[r][i]))
        a[i], a[p] = a[p], a[i]
        for r in range(k):
            if r != i and a[r][i]:
                f = a[r][i] / a[i][i]
                a[r] = [vr - f * vi for vr, vi in zip(a[r], a[i], strict=True)]
    coef = [a[i][k] / a[i][i] for i in range(k)]
    feats = [x[len(FAMILIES) :] for x in xs]
    lo = tuple(min(f[j] for f in feats) for j in range(4))
    hi = tuple(max(f[j] for f in feats) for j in range(4))
    return Fit(
        dict(zip(FAMILIES, coef[: len(FAMILIES)], strict=True)),
        tuple(coef[len(FAMILIES) :]),
        lo,
        hi,
        len(rows),
    )


def with_evidence(fit: Fit, rows: list[Row], family_rows: list[EvidenceRow]) -> Fit:
    """The fit with every family's evidence: the llm-foundry rows for A100/H100, the collected rows for all."""
    by_family: dict[str, list[EvidenceRow]] = {}
    for r in [r.evidence() for r in rows] + family_rows:
        by_family.setdefault(r.family, []).append(r)

    def curve_mfu(r: EvidenceRow) -> float:
        share = attention_share(r.layers, r.hidden, r.seq_len, int(r.params))
        # Unknown micro batch: one sequence; unknown recompute: none (the higher curve, so a lower factor).
        return fit.mfu(base_curve(r.family, r.precision), r.hidden, share, r.devices, r.micro_tokens or r.seq_len,
                       bool(r.checkpointing))  # fmt: skip

    families = {}
    for fam, fam_rows in by_family.items():
        factors = {} if fam in evidence.FITTED else evidence.family_factors(fam_rows, curve_mfu)
        families[fam] = FamilyEvidence(fam, tuple(sorted(fam_rows, key=lambda r: r.hidden)), factors)
    return replace(fit, families=families)


def catalog_peaks() -> dict[str, dict[str, float]]:
    from infra.catalog import default_catalog

    peaks = {name: {p: a.peak(p) for p in ("bf16", "fp8") if a.peak(p)}
             for name, a in default_catalog().accelerators.items()}  # fmt: skip
    for name, extra in evidence.EVIDENCE_PEAKS.items():
        peaks[name] = extra | peaks.get(name, {})
    return peaks


@cache
def default_fit() -> Fit:
    rows = load_rows()
    return with_evidence(fit_rows(rows), rows, evidence.load_family_rows(catalog_peaks()))
