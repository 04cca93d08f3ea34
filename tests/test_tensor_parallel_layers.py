"""The node's own tensor-parallel layers (templates/trainfleet_model.py `TensorParallel`) compute what the whole
layer computes, with and without sequence parallelism.

The reference is the same model built whole on one process from the same seed: two gloo ranks, each holding its
share, must give the whole layer's output, the whole input gradient, and each weight's gradient (the rank's rows
or columns of the whole one; a norm's whole gradient on every rank). A plain torch.distributed run, no DeepSpeed:
tests/test_deepspeed_parallelism.py launches the same layers inside DeepSpeed's pipeline.
"""

from __future__ import annotations

import os

import pytest

from tests.deepspeed_runs import master_port
from tests.needs import need_module

torch = need_module("torch", "pip install -e '.[e2e]'")

from templates.trainfleet_model import (  # noqa: E402
    DecoderLayer,
    Embedding,
    ModelConfig,
    OutputHead,
    TensorParallel,
    lm_loss,
    seeded,
)

CONFIG = ModelConfig(vocab_size=97, hidden=32, layers=1, heads=4, kv_heads=2, ffn=64)
BATCH, SEQ, SEED = 2, 8, 7
RTOL, ATOL = 1e-5, 1e-6  # fp32; the only difference is the order of the all-reduced partial sums


def build(tp: TensorParallel | None, recompute: bool) -> list:
    """Embedding, one decoder layer, head: each from its own seed, as PipelineModule(seed_layers=True) builds."""
    layers = []
    for index, make in enumerate((lambda: Embedding(CONFIG, tp), lambda: DecoderLayer(CONFIG, recompute, tp),
                                  lambda: OutputHead(CONFIG, tp))):  # fmt: skip
        seeded(SEED, index)
        layers.append(make())
    return layers


def run(layers: list) -> tuple:
    torch.manual_seed(0)
    tokens = torch.randint(0, CONFIG.vocab_size, (BATCH, SEQ + 1))
    embed, decoder, head = layers
    hidden = embed(tokens[:, :-1])
    hidden.retain_grad()
    loss = lm_loss(head(decoder(hidden)), tokens[:, 1:])
    loss.backward()
    return loss.detach(), {n: p.grad.detach().clone() for n, p in decoder.named_parameters()}


SPLIT = {"q_proj": 0, "k_proj": 0, "v_proj": 0, "gate_proj": 0, "up_proj": 0, "o_proj": 1, "down_proj": 1}


CASES = [(sequence_parallel, recompute) for sequence_parallel in (False, True) for recompute in (False, True)]


def ranks_agree(rank: int, size: int, port: int, failures) -> None:
    """Every case on one pair of processes (starting them costs more than the cases)."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=size)
    try:
        for sequence_parallel, recompute in CASES:
            case = f"rank {rank}, sequence parallel {sequence_parallel}, recompute {recompute}"
            whole_loss, whole_grads = run(build(None, recompute))
            tp = TensorParallel(rank, size, sequence_parallel)
            tp.group = dist.group.WORLD
            loss, grads = run(build(tp, recompute))
            try:
                torch.testing.assert_close(loss, whole_loss, rtol=RTOL, atol=ATOL)
                for name, grad in grads.items():
                    expected = whole_grads[name]
                    dim = next((d for key, d in SPLIT.items() if key in name), None)
                    if dim is not None:
                        expected = expected.chunk(size, dim=dim)[rank]
                    torch.testing.assert_close(grad, expected, rtol=RTOL, atol=ATOL, msg=lambda m, n=name: f"{n}: {m}")
            except AssertionError as e:
                failures.put(f"{case}: {e}")
    finally:
        dist.destroy_process_group()


def test_split_layers_compute_the_whole_layer_with_and_without_sequence_parallelism_and_recompute():
    import torch.multiprocessing as mp

    failures = mp.get_context("spawn").SimpleQueue()
    mp.spawn(ranks_agree, args=(2, master_port(), failures), nprocs=2)
    problems = []
    while not failures.empty():
        problems.append(failures.get())
    assert not problems, "\n".join(problems)


def test_a_split_that_leaves_a_rank_part_of_a_head_is_refused():
    with pytest.raises(ValueError, match="kv_heads 2 does not split over tensor parallel 4"):
        DecoderLayer(CONFIG, False, TensorParallel(0, 4))
    with pytest.raises(ValueError, match="tensor-parallel rank 2 is not in 0..1"):
        TensorParallel(2, 2)
