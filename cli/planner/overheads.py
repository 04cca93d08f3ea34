"""Time a run spends beside its training steps that the job itself decides: evaluation and data-loader stalls.

Failures, restarts, checkpoints and waiting for capacity are modelled in cli/planner/reliability.py and
cli/planner/capacity.py. Nothing here is fitted to whole runs: each default comes from a published setting or
measurement, and each is a flag of `plan` and `estimate`.

Evaluation. Every EVAL_EVERY_STEPS optimizer steps the job runs EVAL_ITERS forward-only passes of one global
batch. A forward pass is a third of a training step's FLOPs (2N + 4 L h s of the 6N + 12 L h s per token), a
quarter when the training step recomputes its forward (activation checkpointing: 8N of hardware FLOPs), and it
runs at the step's own compute speed; it sends no gradients, so no communication is counted for it:
    evaluation share = EVAL_ITERS / EVAL_EVERY_STEPS x (micro-steps x compute per micro-step x 1/3 or 1/4) / step
Published cadences (the launch scripts of large runs; provenance in evaluation_cadence.md in
infra/catalog/data/calibration/): BLOOM-176B 1 iteration every 1,000 steps, Megatron-LM's GPT-3 175B example 10 every 1,000,
its Llama 3 8B example 32 every 100, its Mamba example 32 every 2,000. The default is the 175B example's, the
middle of the four: 0.33% of the steps' time without recompute. --eval-every and --eval-iters set a job's own.

Data-loader stalls. DATA_STALL_SHARE of the useful time waiting for batches. trainfleet's trainer reads token
shards that `trainfleet data` tokenized ahead of time, the way the published runs below read theirs; the one
development-set run whose whole wall time and step throughput are both published closely enough to bound it,
SmolLM3-3B (384 H100s, 24 days, 13,500-14,000 tokens/s per GPU), spent no measurable time beside its steps:
11T tokens at 13,750 tokens/s per GPU are 222,222 GPU-hours against the 221,184 it ran. So 0 by default;
--data-stall prices a pipeline that tokenizes or decodes on the fly.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cli.planner.throughput import Step

EVAL_EVERY_STEPS = 1000
EVAL_ITERS = 10
DATA_STALL_SHARE = 0.0
CADENCE_SOURCE = ("Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh: --eval-interval 1000 --eval-iters 10; "
                  "BLOOM-176B ran 1, Megatron-LM's Llama 3 8B example 32 every 100")  # fmt: skip


def forward_share(checkpointing: bool) -> float:
    """A forward pass's share of a training micro-step's compute: 2 of 6 FLOPs per parameter and token, 2 of 8
    when the step recomputes its forward."""
    return 0.25 if checkpointing else 1 / 3


@dataclass(frozen=True, slots=True)
class JobOverheads:
    """What the job spends beside its training steps (the module docstring): its evaluation cadence and its
    data-loader stalls."""

    eval_every_steps: int = EVAL_EVERY_STEPS
    eval_iters: int = EVAL_ITERS  # 0: no evaluation during training
    data_stall_share: float = DATA_STALL_SHARE

    def eval_seconds_per_step(self, st: Step, checkpointing: bool) -> float:
        """Evaluation seconds per optimizer step, averaged over the cadence."""
        forward_s = st.grad_accum * st.compute_s * forward_share(checkpointing)
        return self.eval_iters / self.eval_every_steps * forward_s

    def eval_share(self, st: Step, checkpointing: bool) -> float:
        """Evaluation time as a share of the training steps' time."""
        return self.eval_seconds_per_step(st, checkpointing) / st.step_s

    def shares(self, st: Step, checkpointing: bool) -> dict[str, float]:
        """reliability.assess's keyword arguments for this job on this step."""
        return {"eval_share": self.eval_share(st, checkpointing), "data_stall_share": self.data_stall_share}

    def explain(self, st: Step, checkpointing: bool) -> list[str]:
        if self.eval_iters:
            share = forward_share(checkpointing)
            evaluation = (
                f"evaluation: {self.eval_iters} forward-only pass(es) of a global batch every {self.eval_every_steps:,} "
                f"steps, each {share:.2g} of a step's compute ({st.grad_accum} x {st.compute_s:.3f} s): "
                f"{self.eval_seconds_per_step(st, checkpointing):.4f} s per step, "
                f"{self.eval_share(st, checkpointing):.2%} of the steps' time"
                + (f" (default: {CADENCE_SOURCE}; --eval-every, --eval-iters)" if self.is_default_cadence else "")
            )  # fmt: skip
        else:
            evaluation = "evaluation: none during training (--eval-iters 0)"
        stalls = (f"data-loader stalls: {self.data_stall_share:.1%} of the steps' time"
                  + (" (default: pre-tokenized shards, as SmolLM3-3B's published run spent no measurable time beside "
                     "its steps; --data-stall prices a pipeline that tokenizes on the fly)"
                     if self.data_stall_share == DATA_STALL_SHARE else " (--data-stall)"))  # fmt: skip
        return [evaluation, stalls]

    def assumption(self, st: Step, checkpointing: bool) -> str:
        """One line for the plan's assumptions."""
        evaluation = (f"{self.eval_iters} forward pass(es) every {self.eval_every_steps:,} steps "
                      f"({self.eval_share(st, checkpointing):.2%} of the steps' time)" if self.eval_iters else "none")
        return (f"evaluation {evaluation}, data-loader stalls {self.data_stall_share:.1%}: published settings, not "
                "fitted (cli/planner/overheads.py; --eval-every, --eval-iters, --data-stall)")  # fmt: skip

    # The stack file's job section (infra/config.py Job) names its keys as these fields are named.

    def stack_fields(self) -> dict[str, float]:
        """The stack file's job keys for what differs from the defaults."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return {k: v for k, v in values.items() if v != getattr(DEFAULT_OVERHEADS, k)}

    @classmethod
    def given(cls, **values: float | None) -> JobOverheads:
        """The values given (None: not given), the defaults elsewhere: a command line's flags or a stack's keys."""
        return cls(**{k: v for k, v in values.items() if v is not None})

    @classmethod
    def from_stack(cls, job) -> JobOverheads:
        """A stack's job section: its keys where set, the defaults elsewhere."""
        return cls.given(**{f.name: getattr(job, f.name) for f in fields(cls)})

    @property
    def is_default_cadence(self) -> bool:
        return (self.eval_every_steps, self.eval_iters) == (EVAL_EVERY_STEPS, EVAL_ITERS)


DEFAULT_OVERHEADS = JobOverheads()
