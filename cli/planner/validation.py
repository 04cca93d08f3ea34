"""How close the throughput model comes to the published llm-foundry rows it is calibrated on.

Each row is replayed through the same `throughput.step` the planner uses (its model, sequence length,
devices, micro batch, grad accumulation, sharding and activation checkpointing), on 8-device nodes
with NVLink and the section's node network (A100 sections: 1600 Gbit/s RoCE as the table states;
H100 sections: 3200 Gbit/s assumed), and the predicted tokens/s per device is compared with the row's.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from cli.planner.batch import DEFAULT_BATCH_TOKENS
from cli.planner.calibration import Fit, Row
from cli.planner.memory import Sharding
from cli.planner.presets import LLMFOUNDRY_MODELS, ModelShape, shape_for_params
from cli.planner.throughput import Hardware, step
from cli.planner.workload import Workload
from infra.catalog import Accelerator
from infra.catalog.loader import DATA_DIR

ROW_NETWORK_GBITS = {"a100_40gb": 1600.0, "a100_80gb": 1600.0, "h100_80gb": 3200.0}


@dataclass(frozen=True, slots=True)
class RowError:
    row: Row
    predicted: float  # tokens/s per device
    measured: float

    @property
    def relative(self) -> float:
        return abs(self.predicted - self.measured) / self.measured


def replay(rows: list[Row], fit: Fit, accelerators: dict[str, Accelerator]) -> list[RowError]:
    out = []
    for r in rows:
        shape = LLMFOUNDRY_MODELS[r.model]
        accel = accelerators[r.accelerator]
        hw = Hardware(r.accelerator, accel.peak(r.precision) or 0.0, 8, accel.memory_gib, 1024.0, 96.0,
                      ROW_NETWORK_GBITS[r.gpu], "rdma")  # fmt: skip
        w = Workload(shape, 10**9, r.seq_len, r.precision, "full",
                     global_batch_tokens=r.micro_batch * r.grad_accum * r.devices * r.seq_len)  # fmt: skip
        nodes = max(1, r.devices // 8)
        st = step(w, hw, nodes, Sharding(r.zero_stage), r.micro_batch, r.activation_checkpointing, fit,
                  grad_accum=r.grad_accum)  # fmt: skip
        out.append(RowError(r, st.tokens_per_second_per_device, r.tokens_per_s_per_device))
    return out


def summary(errors: list[RowError]) -> dict[str, float]:
    rel = [e.relative for e in errors]
    return {
        "rows": len(rel),
        "median_relative_error": statistics.median(rel),
        "mean_relative_error": statistics.fmean(rel),
        "p90_relative_error": statistics.quantiles(rel, n=10)[-1],
        "worst_relative_error": max(rel),
    }


# --- whole runs: device-hours against the development set of published runs -----------------------------

RUNS_TABLE = DATA_DIR / "calibration" / "training_runs.csv"
RUN_NODE_GBITS = {"A100-40GB": 1600.0, "A100-80GB": 1600.0, "H100-80GB": 3200.0}  # 8-GPU nodes with RDMA


@dataclass(frozen=True, slots=True)
class PublishedRun:
    name: str
    params: float
    layers: int | None
    hidden: int | None
    seq_len: int
    tokens: float
    accelerator: str
    devices: int
    device_hours: float  # reported, or devices x reported wall days x 24


def load_runs(path: Path = RUNS_TABLE) -> list[PublishedRun]:
    """The dense runs on accelerators the catalog prices, with a device count and reported hours or days
    (MoE runs, FLOP-derived hours and runs without either figure are kept in the table for provenance only)."""
    out = []
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["accelerator"] not in RUN_NODE_GBITS or r["params_b"] != r["active_params_b"]:
                continue
            if not r["devices"] or "computed" in r["what_device_hours_cover"].lower():
                continue
            devices = int(r["devices"])
            hours = float(r["device_hours"]) if r["device_hours"] else (
                devices * float(r["wall_days"]) * 24 if r["wall_days"] else None)  # fmt: skip
            if hours is None:
                continue
            out.append(PublishedRun(r["run"], float(r["params_b"]) * 1e9, int(r["layers"]) if r["layers"] else None,
                                    int(r["hidden"]) if r["hidden"] else None, int(r["seq_len"] or 2048),
                                    float(r["tokens_b"]) * 1e9, r["accelerator"], devices, hours))  # fmt: skip
    return out


@dataclass(frozen=True, slots=True)
class RunError:
    run: PublishedRun
    predicted_device_hours: float

    @property
    def ratio(self) -> float:
        """reported / predicted: above 1 means the planner would have promised too little."""
        return self.run.device_hours / self.predicted_device_hours


def run_batch_tokens(run: PublishedRun) -> int:
    """A run's global batch, which the table does not record: the whole number of sequences per device nearest the
    default 4Mi tokens per step (cli/planner/batch.py; at least one), over all its devices. A run must split its
    batch evenly over its data-parallel ranks; this is one of the usual size that its own devices split."""
    per_device = max(1, round(DEFAULT_BATCH_TOKENS["full"] / (run.seq_len * run.devices)))
    return per_device * run.devices * run.seq_len


def replay_run(run: PublishedRun, fit: Fit, accelerators: dict[str, Accelerator], stall_share: float) -> RunError:
    """The run as `trainfleet estimate` prices it: its devices on 8-GPU RDMA nodes, on demand, the fastest
    DeepSpeed setup that fits (its checkpoint laid out as DeepSpeed writes it), failures, restarts and stalls
    included."""
    from cli.planner import reliability
    from cli.planner.optimizer import best_setup, setup_parts

    shape = shape_for_params(int(run.params))
    if run.layers and run.hidden:
        shape = ModelShape(run.name, int(run.params), run.layers, run.hidden, shape.heads, shape.vocab, 4 * run.hidden)
    accel = accelerators[run.accelerator]
    g = 8 if run.devices >= 8 else run.devices
    hw = Hardware(run.accelerator, accel.peak("bf16") or 0.0, g, accel.memory_gib, 1152.0, 96.0,
                  RUN_NODE_GBITS[run.accelerator], "infiniband")  # fmt: skip
    nodes = max(1, run.devices // g)
    w = Workload(shape, int(run.tokens), run.seq_len, global_batch_tokens=run_batch_tokens(run))
    setup = best_setup(w, hw, nodes, fit)
    if setup is None:
        return RunError(run, math.inf)
    useful = w.tokens / setup.step.tokens_per_second / 3600
    rel = reliability.assess(useful, nodes, g, "aws", False, None, w.checkpoint_bytes, hw.network_gbits,
                             setup.step.step_s, stall_share, parts=setup_parts(w, hw, nodes, setup))  # fmt: skip
    return RunError(run, rel.wall_hours * nodes * g)


def calibrated_stall_share(runs: list[PublishedRun], fit: Fit, accelerators: dict[str, Accelerator]) -> float:
    """The share of extra time that makes the median run's reported / predicted device-hours 1."""
    ratios = [replay_run(r, fit, accelerators, 0.0).ratio for r in runs]
    return max(0.0, statistics.median(ratios) - 1.0)
