"""The global batch a plan trains: whole sequences, split evenly over the data-parallel ranks.

DeepSpeed trains only train_batch_size == micro batch x accumulation x data-parallel size (runtime/config.py
`_batch_assertion`, infra/parallelism.py), and Megatron likewise needs the global batch to be a multiple of micro
batch x data parallel. So a plan trains exactly the batch asked for, and only on layouts whose data-parallel size
divides it; a fleet no layout of which can split it is not offered (the plan counts them and names the nearest
batch they could run). The batch is part of the training recipe (learning rate, warmup, loss curve), so a planner
never grows it to fill a fleet.

The default batch is about 4M tokens for full training (LLaMA, Llama 2 and 3, Touvron et al. 2023: 4M tokens per
step) and 256K for LoRA, rounded to a power-of-two number of sequences, which every power-of-two data-parallel size
up to it splits.
"""

from __future__ import annotations

import math

DEFAULT_BATCH_TOKENS = {"full": 4 * 2**20, "lora": 256 * 2**10}


def default_batch_sequences(method: str, seq_len: int) -> int:
    """The power of two of sequences nearest (in log) to the method's default tokens per step."""
    return 2 ** max(0, round(math.log2(DEFAULT_BATCH_TOKENS[method] / seq_len)))


def split_problem(sequences: int, data_parallel: int) -> str | None:
    """Why `data_parallel` ranks cannot train a global batch of `sequences` (None: they can, each taking an equal
    whole number of sequences per step)."""
    if data_parallel > sequences:
        return (f"a global batch of {sequences:,} sequences leaves less than one sequence for each of "
                f"{data_parallel:,} data-parallel ranks")  # fmt: skip
    if sequences % data_parallel:
        return f"a global batch of {sequences:,} sequences does not split evenly over {data_parallel:,} data-parallel ranks"
    return None


def nearest_batches(sequences: int, data_parallel: int) -> list[int]:
    """The batches `data_parallel` ranks can train nearest to `sequences`: the multiples of it either side (the
    smaller only when it is at least one sequence per rank)."""
    below = sequences // data_parallel * data_parallel
    return [b for b in (below, below + data_parallel) if b >= data_parallel and b != sequences]


def batch_option(sequences: int, seq_len: int) -> str:
    return f"--global-batch {sequences * seq_len:,} ({sequences:,} sequences)"


def split_fix(sequences: int, seq_len: int, data_parallel: int) -> str:
    """What to change so `data_parallel` ranks can train the batch: the nearest batches they split."""
    options = " or ".join(batch_option(b, seq_len) for b in nearest_batches(sequences, data_parallel))
    return f"use {options}, or a layout with another data-parallel size (--tp, --pp, --devices)"


def whole_sequences_problem(batch_tokens: int, seq_len: int) -> str | None:
    """Why a batch of `batch_tokens` is not a whole number of sequences of `seq_len`, with the nearest that are."""
    if batch_tokens % seq_len == 0:
        return None
    below = batch_tokens // seq_len
    near = [b for b in (below, below + 1) if b >= 1]
    power = 2 ** max(0, round(math.log2(batch_tokens / seq_len)))
    return (f"--global-batch {batch_tokens:,} tokens is not a whole number of {seq_len:,}-token sequences; use "
            f"{' or '.join(f'{b * seq_len:,}' for b in near)}, or {power * seq_len:,} ({power:,} sequences: a power "
            "of two, which every power-of-two data-parallel size up to it splits)")  # fmt: skip
