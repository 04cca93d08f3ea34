"""The batch a user asks for is the batch every plan trains (issue 31 #5): micro batch x accumulation x data
parallel == the global batch in sequences, for the best plan, every runner-up and every frontier plan; a batch
a fleet cannot split is refused with the nearest batches it can. Expected figures are worked by hand."""

from __future__ import annotations

import json

import pytest

from tests.conftest import one_line_error, run_in_process


def plan(capsys, *args: str) -> dict:
    code, out, err = run_in_process(capsys, "plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def trained_sequences(p: dict) -> int:
    return p["micro_batch"] * p["grad_accum"] * p["data_parallel"]


def every_plan(data: dict) -> list[dict]:
    return [data["best"], *data["alternatives"], *data["frontier"]]


def test_the_default_batch_is_trained_exactly_by_every_plan_shown(capsys):
    # default: the power of two of sequences nearest 4 x 2^20 tokens: 2^22 / 2048 = 2048 sequences. Before, plans
    # on 384 devices trained ceil(2048 / 384) x 384 = 2304 (+12.5%) and were ranked against 2048-sequence plans.
    data = plan(capsys, "--model", "llama-7b", "--tokens", "200B", "--deadline", "72h", "--top", "8")
    plans = every_plan(data)
    assert len(plans) >= 8
    assert {trained_sequences(p) for p in plans} == {2048}
    assert data["best"]["data_parallel"] == data["best"]["devices"] // (
        data["best"]["tensor_parallel"] * data["best"]["pipeline_parallel"])
    assert any("global batch 2,048 sequences of 2,048 tokens (4,194,304 tokens), trained exactly" in line
               for line in data["best"]["assumptions"])  # fmt: skip


def test_the_default_batch_follows_the_sequence_length(capsys):
    # 2^22 / 4096 = 1024 sequences; 2^22 / 3000 = 1398.1, nearest power of two in log: 2^10 (log2 = 10.45)
    assert {trained_sequences(p) for p in every_plan(plan(capsys, "--model", "llama-7b", "--tokens", "20B",
                                                          "--seq-len", "4096"))} == {1024}  # fmt: skip
    assert {trained_sequences(p) for p in every_plan(plan(capsys, "--model", "llama-7b", "--tokens", "20B",
                                                          "--seq-len", "3000"))} == {1024}  # fmt: skip


def test_an_asked_batch_is_honoured_though_it_leaves_fleets_out(capsys):
    # 1,536 sequences = 3 x 512: 64 nodes x 8 = 512 ranks split it (3 each), 32 x 8 = 256 too (6 each); a fleet of
    # 1,024 devices cannot (1.5 each) unless its layout divides them: every plan shown trains exactly 1,536
    data = plan(capsys, "--model", "llama-7b", "--tokens", "200B", "--global-batch", str(1536 * 2048), "--top", "8")
    assert {trained_sequences(p) for p in every_plan(data)} == {1536}
    for p in every_plan(data):
        assert 1536 % p["data_parallel"] == 0 and (1536 // p["data_parallel"]) % p["micro_batch"] == 0


def test_a_prime_batch_leaves_only_fleets_that_split_it_and_says_which_were_left_out(capsys):
    # 1,021 sequences is prime: only one data-parallel rank splits it, so only plans whose whole world is one
    # data-parallel rank (one device, or tensor/pipeline parallel over all of them) can train it
    data = plan(capsys, "--params", "350M", "--tokens", "2B", "--global-batch", str(1021 * 2048), "--max-nodes", "4")
    for p in every_plan(data):
        assert p["data_parallel"] == 1 and trained_sequences(p) == 1021
    note = next(n for n in data["notes"] if "not offered" in n)
    assert "splits the global batch of 1,021 sequences evenly" in note
    # the largest fleet searched: 4 nodes of 16 (GCP a2-megagpu-16g) = 64 devices; the multiples of 64 either side
    # of 1,021: 960 and 1,024
    assert "64 devices could train 960 or 1,024 sequences" in note
    assert data["search"]["fleets_not_splitting_batch"] > 0


def test_a_batch_that_is_not_whole_sequences_names_the_nearest_that_are(capsys):
    # 4,000,000 / 2,048 = 1,953.1: 1,953 x 2,048 = 3,999,744 and 1,954 x 2,048 = 4,001,792; nearest power of
    # two: 2,048 sequences = 4,194,304 tokens
    line = one_line_error(capsys, "plan", "--model", "llama-7b", "--tokens", "200B", "--global-batch", "4M")
    assert "--global-batch 4,000,000 tokens is not a whole number of 2,048-token sequences" in line
    assert "3,999,744 or 4,001,792" in line and "4,194,304 (2,048 sequences" in line


def test_estimate_refuses_a_fleet_that_cannot_split_the_batch_and_names_the_batches_it_can(capsys):
    # 2,048 sequences over 384 ranks = 5.33: the multiples of 384 either side are 1,920 (3,932,160 tokens) and
    # 2,304 (4,718,592 tokens)
    line = one_line_error(capsys, "estimate", "--model", "llama-7b", "--tokens", "200B", "--accelerator",
                          "A100-80GB", "--devices", "384", "--tp", "1", "--pp", "1")  # fmt: skip
    assert "does not split evenly over 384 data-parallel ranks" in line
    assert "--global-batch 3,932,160 (1,920 sequences) or --global-batch 4,718,592 (2,304 sequences)" in line


def test_estimate_says_when_a_batch_leaves_less_than_one_sequence_per_rank(capsys):
    # 256 sequences over 512 ranks: the first batch they split is 512 sequences = 1,048,576 tokens
    line = one_line_error(capsys, "estimate", "--model", "llama-7b", "--tokens", "200B", "--accelerator",
                          "A100-80GB", "--devices", "512", "--global-batch", str(256 * 2048), "--tp", "1", "--pp",
                          "1")  # fmt: skip
    assert "leaves less than one sequence for each of 512 data-parallel ranks" in line
    assert "use --global-batch 1,048,576 (512 sequences), or a layout with another data-parallel size" in line


def test_estimate_finds_the_layout_that_splits_the_batch(capsys):
    # 256 sequences on 512 devices: tensor parallel 2 leaves 256 ranks of one sequence each
    code, out, err = run_in_process(capsys, "estimate", "--model", "llama-7b", "--tokens", "200B", "--accelerator",
                                    "A100-80GB", "--devices", "512", "--global-batch", str(256 * 2048), "--tp", "2",
                                    "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert (d["micro_batch"], d["grad_accum"], d["tensor_parallel"]) == (1, 1, 2)


@pytest.mark.parametrize("micro", ["3", "16"])
def test_estimate_refuses_a_micro_batch_that_does_not_divide_each_ranks_share(capsys, micro):
    # 2,048 sequences over 256 ranks: 8 each; 3 and 16 do not divide 8
    line = one_line_error(capsys, "estimate", "--model", "llama-7b", "--tokens", "200B", "--accelerator",
                          "A100-80GB", "--devices", "256", "--micro-batch", micro, "--tp", "1", "--pp", "1")  # fmt: skip
    assert f"--micro-batch {micro} does not divide the 8 sequences each of 256 data-parallel ranks" in line
    assert "use one of 1, 2, 4, 8" in line
