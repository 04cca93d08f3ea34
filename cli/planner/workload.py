"""What is trained: the model shape, tokens, sequence length, numerics and method (full or LoRA).

FLOPs per trained token follow the PaLM/llm-foundry convention used by the calibration table:
    full: 6 N + 12 L h s      (forward 2N + backward 4N, plus attention scores over s tokens)
    lora: 4 N + 12 L h s      (the frozen base still back-propagates activations (2N) but computes
                               no weight gradients (the other 2N); adapter FLOPs are negligible)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from cli.planner.overheads import DEFAULT_OVERHEADS, JobOverheads
from cli.planner.presets import PRESETS, ModelShape, shape_for_params
from infra.errors import TrainfleetError, did_you_mean, shown

BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
LORA_TARGETS = 4  # adapters on the q, k, v and o projections of every layer


@dataclass(frozen=True)
class Workload:
    shape: ModelShape
    tokens: int
    seq_len: int = 2048
    precision: str = "bf16"
    method: str = "full"  # full | lora
    lora_rank: int = 16
    global_batch_tokens: int = 4 * 1024 * 1024  # whole sequences (cli/planner/batch.py)
    overheads: JobOverheads = DEFAULT_OVERHEADS  # evaluation and data-loader stalls (cli/planner/overheads.py)

    def __post_init__(self) -> None:
        if self.global_batch_tokens < self.seq_len or self.global_batch_tokens % self.seq_len:
            raise ValueError(f"a global batch of {self.global_batch_tokens:,} tokens is not a whole number of "
                             f"{self.seq_len:,}-token sequences")  # fmt: skip

    @property
    def params(self) -> int:
        return self.shape.params

    @property
    def batch_sequences(self) -> int:
        """Sequences per optimizer step: the batch every plan trains exactly (cli/planner/batch.py)."""
        return self.global_batch_tokens // self.seq_len

    @cached_property
    def trainable_params(self) -> int:
        """full: every parameter; lora: 2 * rank * hidden per adapted (hidden x hidden) matrix."""
        if self.method == "full":
            return self.params
        return LORA_TARGETS * 2 * self.lora_rank * self.shape.hidden * self.shape.layers

    @cached_property
    def attention_flops_per_token(self) -> float:
        return 12.0 * self.shape.layers * self.shape.hidden * self.seq_len

    @cached_property
    def dense_flops_factor(self) -> float:
        """6 for full training, 4 for LoRA (no weight gradients for the frozen base)."""
        return 6.0 if self.method == "full" else 4.0

    @cached_property
    def attention_share(self) -> float:
        """Share of the FLOPs per token spent on attention scores."""
        return self.attention_flops_per_token / self.flops_per_token

    @cached_property
    def layer_flops_per_token(self) -> float:
        """One decoder layer's FLOPs a token: its matrices' (dense factor x weights) and its attention scores."""
        return self.dense_flops_factor * self.shape.layer_matrix_params + 12.0 * self.shape.hidden * self.seq_len

    @cached_property
    def head_flops_per_token(self) -> float:
        """The output head's FLOPs a token (dense factor x V x h): what a pipeline's last stage adds."""
        return self.dense_flops_factor * self.shape.vocab * self.shape.hidden

    @cached_property
    def flops_per_token(self) -> float:
        """Model FLOPs per trained token (what MFU counts)."""
        return self.dense_flops_factor * self.params + self.attention_flops_per_token

    @cached_property
    def total_flops(self) -> float:
        return self.flops_per_token * self.tokens

    @cached_property
    def checkpoint_bytes(self) -> float:
        """A resumable checkpoint: 16-bit weights plus fp32 master, Adam m and v (2 + 12 bytes/param) of
        what is trained; LoRA saves only the adapters (the base is already in the bucket)."""
        return 14.0 * self.trainable_params

    def explain(self) -> list[str]:
        s = self.shape
        dense = "6N" if self.method == "full" else "4N (LoRA: no base weight gradients)"
        return [
            f"model {s.name}: N = {s.params:,} params, {s.layers} layers, hidden {s.hidden}, {s.heads} heads, "
            f"vocab {s.vocab}",
            f"FLOPs per token = {dense} + 12*L*h*s = {self.flops_per_token:.4g} FLOP/token "
            f"(L={s.layers}, h={s.hidden}, s={self.seq_len})",
            f"total = {self.tokens:,} tokens x {self.flops_per_token:.4g} = {self.total_flops:.4g} FLOP",
            f"trained params = {self.trainable_params:,}"
            + (f" (LoRA rank {self.lora_rank} on q,k,v,o)" if self.method == "lora" else ""),
        ]


def resolve_shape(model: str | None, params: int | None) -> ModelShape:
    """--model NAME or --params N (both: the preset's shape scaled to N is not guessed; N must match)."""
    if model:
        key = model.lower()
        if key not in PRESETS:
            raise TrainfleetError(
                f"--model {shown(model)} is not a known preset{did_you_mean(key, list(PRESETS))}; "
                f"use one of {', '.join(PRESETS)} or give --params"
            )
        shape = PRESETS[key]
        if params is not None and abs(params - shape.params) > 0.05 * shape.params:
            raise TrainfleetError(
                f"--params {params:,} contradicts --model {model} ({shape.params:,} params); give one of them"
            )
        return shape
    if params is None:
        raise TrainfleetError("give the model size: --model llama-7b or --params 7B")
    return shape_for_params(params)
