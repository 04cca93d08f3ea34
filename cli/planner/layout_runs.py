"""Published tensor x pipeline runs, replayed at their own layouts (infra/catalog/data/calibration/layout_runs.csv).

`throughput.LAYOUT_EFFICIENCY` is the largest factor (to two decimals) under which no *development* run is
predicted faster than it ran (tests/test_planner_layouts.py holds it there). The *held-out* runs never set it;
they measure it (benchmarks/plan_calibration.py prints both).

Each run is replayed through the planner's own `throughput.step`: its model, layout, micro batch, ZeRO stage and
recompute, on 8-device nodes with NVLink and the run's node network over InfiniBand/Omni-Path (an RDMA fabric).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from cli.planner.calibration import Fit
from cli.planner.memory import Sharding
from cli.planner.presets import ModelShape
from cli.planner.throughput import Hardware, Step, step
from cli.planner.workload import Workload
from infra.catalog import Accelerator, default_catalog
from infra.catalog.loader import DATA_DIR

LAYOUT_RUNS = DATA_DIR / "calibration" / "layout_runs.csv"
DEVICES_PER_NODE = 8  # every run in the table is on DGX-style 8-GPU nodes


@dataclass(frozen=True, slots=True)
class LayoutRun:
    name: str
    role: str  # development | held_out
    workload: Workload
    hardware: Hardware
    nodes: int
    zero_stage: int
    micro_batch: int
    recompute: bool
    tp: int
    pp: int
    published: float  # tokens/s per device

    def replay(self, fit: Fit) -> Step:
        return step(self.workload, self.hardware, self.nodes, Sharding(self.zero_stage), self.micro_batch,
                    self.recompute, fit, tp=self.tp, pp=self.pp)  # fmt: skip

    def published_over_predicted(self, fit: Fit) -> float:
        return self.published / self.replay(fit).tokens_per_second_per_device


def load(path: Path = LAYOUT_RUNS) -> list[LayoutRun]:
    accelerators = default_catalog().accelerators
    with path.open(newline="") as fh:
        return [_run(row, accelerators[row["accelerator"]]) for row in csv.DictReader(fh)]


def _run(row: dict[str, str], accel: Accelerator) -> LayoutRun:
    """A row on its accelerator's catalog figures (16-bit dense peak, memory); the runs trained in 16 bits."""
    number = {k: int(row[k]) for k in ("params", "layers", "hidden", "heads", "vocab", "ffn", "seq_len",
                                       "batch_sequences", "micro_batch", "tp", "pp", "zero_stage", "devices")}  # fmt: skip
    shape = ModelShape(row["run"], number["params"], number["layers"], number["hidden"], number["heads"],
                       number["vocab"], number["ffn"])  # fmt: skip
    workload = Workload(shape, 10**12, number["seq_len"],
                        global_batch_tokens=number["batch_sequences"] * number["seq_len"])  # fmt: skip
    hardware = Hardware(row["accelerator"], accel.peak("bf16") or 0.0, DEVICES_PER_NODE, accel.memory_gib, 1024.0,
                        128.0, float(row["node_network_gbits"]), "infiniband")  # fmt: skip
    return LayoutRun(row["run"], row["role"], workload, hardware, number["devices"] // DEVICES_PER_NODE,
                     number["zero_stage"], number["micro_batch"], row["recompute"] == "true", number["tp"],
                     number["pp"], float(row["published_tokens_per_s_per_device"]))  # fmt: skip
