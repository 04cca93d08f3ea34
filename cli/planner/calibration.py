"""MFU calibrated on the llm-foundry throughput table (216 published rows, embedded in the catalog).

The model is a log-linear fit of hardware FLOP utilisation (HFU, which counts recomputed FLOPs):

    ln HFU = c[family, precision] + b1 ln(h / 4096) + b2 * attention share + b3 ln(devices / 8)
             + b4 ln(tokens per micro-batch / 2048)

fitted by ordinary least squares over every row. MFU = HFU with no activation checkpointing and
3/4 HFU with it (the forward pass runs twice: 8N instead of 6N hardware FLOPs per token).
Features are clamped to the range the table covers, so nothing is extrapolated beyond it.
Families: `a100` (A100 rows), `hopper` (H100 rows, also used for H200/B200), `hopper-fp8`; other
accelerators have no published rows and use the A100 curve, which every plan states as an assumption.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from cli.planner.presets import LLMFOUNDRY_MODELS
from infra.catalog.loader import DATA_DIR

TABLE = DATA_DIR / "calibration" / "llmfoundry_throughput_full.csv"
FAMILIES = ("a100", "hopper", "hopper-fp8")
HOPPER = {"H100-80GB", "H100-NVL", "H200", "B200"}
CALIBRATED = {"A100-40GB": "a100", "A100-80GB": "a100", "H100-80GB": "hopper"}


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
        return family_of(self.accelerator, self.precision)[0]


def family_of(accelerator: str, precision: str) -> tuple[str, bool]:
    """(calibration family, calibrated?) for an accelerator and precision."""
    if accelerator in HOPPER:
        fam = "hopper-fp8" if precision == "fp8" else "hopper"
        return fam, accelerator == "H100-80GB" and precision in ("bf16", "fp8")
    return "a100", accelerator in CALIBRATED and precision in ("bf16", "fp16")


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

    def hfu(self, family: str, hidden: int, attention_share: float, devices: int, micro_tokens: int) -> float:
        x = _features(hidden, attention_share, devices, micro_tokens)
        x = tuple(min(max(v, lo), hi) for v, lo, hi in zip(x, self.lo, self.hi, strict=True))
        return math.exp(self.intercepts[family] + sum(b * v for b, v in zip(self.slopes, x, strict=True)))

    def mfu(self, family: str, hidden: int, attention_share: float, devices: int, micro_tokens: int,
            checkpointing: bool) -> float:  # fmt: skip
        hfu = self.hfu(family, hidden, attention_share, devices, micro_tokens)
        return min(hfu, 1.0) * (0.75 if checkpointing else 1.0)

    def formula(self) -> str:
        c = ", ".join(f"{k} {v:+.3f}" for k, v in self.intercepts.items())
        b = self.slopes
        return (
            f"ln HFU = c[{c}] {b[0]:+.3f} ln(h/4096) {b[1]:+.3f} attn_share {b[2]:+.3f} ln(devices/8) "
            f"{b[3]:+.3f} ln(micro_tokens/2048)  (OLS on {self.rows} llm-foundry rows)"
        )


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


@cache
def default_fit() -> Fit:
    return fit_rows(load_rows())
