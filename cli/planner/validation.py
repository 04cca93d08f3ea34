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
# Nothing is fitted to these runs: they measure the planner (its step speed, the overheads beside the steps and the
# failures and checkpoints of cli/planner/reliability.py) and, where a run also publishes its step throughput, which
# of the two parts the error is in.

RUNS_TABLE = DATA_DIR / "calibration" / "training_runs.csv"
HELD_OUT_TABLE = DATA_DIR / "calibration" / "held_out_runs.csv"
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
    device_hours: float | None  # reported, or devices x reported wall days x 24; None: neither published
    tokens_per_s_per_device: float | None = None  # published step throughput, where the run states it


def load_published(path: Path = RUNS_TABLE) -> list[PublishedRun]:
    """The dense runs on accelerators the catalog prices with a device count and a reported time (hours or days),
    a published step throughput, or both (MoE runs and FLOP-derived hours are kept in the table for provenance
    only)."""
    out = []
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if r["accelerator"] not in RUN_NODE_GBITS or r["params_b"] != r["active_params_b"] or not r["devices"]:
                continue
            devices = int(r["devices"])
            hours = None
            if "computed" not in r["what_device_hours_cover"].lower():
                hours = float(r["device_hours"]) if r["device_hours"] else (
                    devices * float(r["wall_days"]) * 24 if r["wall_days"] else None)  # fmt: skip
            throughput = float(r["throughput_tokens_per_s_per_device"] or 0) or None
            if hours is None and throughput is None:
                continue
            out.append(PublishedRun(r["run"], float(r["params_b"]) * 1e9, int(r["layers"]) if r["layers"] else None,
                                    int(r["hidden"]) if r["hidden"] else None, int(r["seq_len"] or 2048),
                                    float(r["tokens_b"]) * 1e9, r["accelerator"], devices, hours, throughput))  # fmt: skip
    return out


def load_runs(path: Path = RUNS_TABLE) -> list[PublishedRun]:
    """The runs of `load_published` with a reported time: what whole-run device-hours are measured on."""
    return [r for r in load_published(path) if r.device_hours is not None]


def load_step_runs(path: Path = RUNS_TABLE) -> list[PublishedRun]:
    """The runs of `load_published` with a published step throughput."""
    return [r for r in load_published(path) if r.tokens_per_s_per_device is not None]


@dataclass(frozen=True, slots=True)
class RunError:
    run: PublishedRun
    predicted_device_hours: float
    predicted_tokens_per_s_per_device: float = math.nan  # the planner's step throughput for the run

    @property
    def ratio(self) -> float:
        """reported / predicted: above 1 means the planner would have promised too little."""
        assert self.run.device_hours is not None, f"{self.run.name} publishes no time"
        return self.run.device_hours / self.predicted_device_hours

    @property
    def step_ratio(self) -> float:
        """published / predicted step throughput: below 1 means the planner's steps are faster than the run's."""
        assert self.run.tokens_per_s_per_device is not None, f"{self.run.name} publishes no step throughput"
        return self.run.tokens_per_s_per_device / self.predicted_tokens_per_s_per_device

    @property
    def beside_steps(self) -> float:
        """The run's published time beside its steps, as a share of its steps' time at the published throughput
        (evaluation, stalls, failures, restarts, checkpoints and the rest; negative within rounding)."""
        assert self.run.device_hours is not None and self.run.tokens_per_s_per_device is not None
        return self.run.device_hours * 3600 * self.run.tokens_per_s_per_device / self.run.tokens - 1


    @property
    def modelled_beside_steps(self) -> float:
        """The same share as the planner models it (evaluation, stalls, failures, restarts, checkpoints)."""
        return self.predicted_device_hours * 3600 * self.predicted_tokens_per_s_per_device / self.run.tokens - 1


def run_batch_tokens(run: PublishedRun) -> int:
    """A run's global batch, which the table does not record: the whole number of sequences per device nearest the
    default 4Mi tokens per step (cli/planner/batch.py; at least one), over all its devices. A run must split its
    batch evenly over its data-parallel ranks; this is one of the usual size that its own devices split."""
    per_device = max(1, round(DEFAULT_BATCH_TOKENS["full"] / (run.seq_len * run.devices)))
    return per_device * run.devices * run.seq_len


def replay_run(run: PublishedRun, fit: Fit, accelerators: dict[str, Accelerator]) -> RunError:
    """The run as `trainfleet estimate` prices it: its devices on 8-GPU RDMA nodes, on demand, the DeepSpeed setup
    that fits with the least expected wall time (`assess_options`: its checkpoint laid out as DeepSpeed writes it,
    failures and restarts included), the default evaluation and data-loader stalls (cli/planner/overheads.py)."""
    from cli.planner import reliability
    from cli.planner.optimizer import assess_options, setup_options, setup_parts

    shape = shape_for_params(int(run.params))
    if run.layers and run.hidden:
        shape = ModelShape(run.name, int(run.params), run.layers, run.hidden, shape.heads, shape.vocab, 4 * run.hidden)
    accel = accelerators[run.accelerator]
    g = 8 if run.devices >= 8 else run.devices
    hw = Hardware(run.accelerator, accel.peak("bf16") or 0.0, g, accel.memory_gib, 1152.0, 96.0,
                  RUN_NODE_GBITS[run.accelerator], "infiniband")  # fmt: skip
    nodes = max(1, run.devices // g)
    w = Workload(shape, int(run.tokens), run.seq_len, global_batch_tokens=run_batch_tokens(run))
    options = setup_options(w, hw, nodes, fit)
    if not options:
        return RunError(run, math.inf, 0.0)
    setup = assess_options(w, hw, nodes, options, "aws", "on-demand", None)[0]
    useful = w.tokens / setup.step.tokens_per_second / 3600
    rel = reliability.assess(useful, nodes, g, "aws", False, None, w.checkpoint_bytes, hw.network_gbits,
                             setup.step.step_s, **w.overheads.shares(setup.step, setup.checkpointing),
                             parts=setup_parts(w, hw, nodes, setup))  # fmt: skip
    return RunError(run, rel.wall_hours * nodes * g, setup.step.tokens_per_second_per_device)
