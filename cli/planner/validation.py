"""How close the throughput model comes to the published llm-foundry rows it is calibrated on.

Each row is replayed through the same `throughput.step` the planner uses (its model, sequence length,
devices, micro batch, grad accumulation, sharding and activation checkpointing), on 8-device nodes
with NVLink and the section's node network (A100 sections: 1600 Gbit/s RoCE as the table states;
H100 sections: 3200 Gbit/s assumed), and the predicted tokens/s per device is compared with the row's.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from cli.planner.calibration import Fit, Row
from cli.planner.memory import Sharding
from cli.planner.presets import LLMFOUNDRY_MODELS
from cli.planner.throughput import Hardware, step
from cli.planner.workload import Workload
from infra.catalog import Accelerator

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
                      ROW_NETWORK_GBITS[r.gpu])  # fmt: skip
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
