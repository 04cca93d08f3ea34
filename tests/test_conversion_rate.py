"""benchmarks/conversion_rate.py, which measured the planner's universal-conversion rate: its fit arithmetic on a
hand-worked example, and its measurement end to end at a tiny size (a real bf16 ZeRO-2 checkpoint from
templates/train.py on 2 CPU ranks, converted by trainfleet-resize.py's own `convert`)."""

from __future__ import annotations

import json
import os

import pytest

from benchmarks import conversion_rate as cr
from tests.needs import need_module


def test_fit_and_held_out_error_match_a_hand_worked_example():
    # (1 GB, 3 s), (2 GB, 6 s), (3 GB, 7 s): means 2e9 B and 16/3 s; Sxy = -1e9 * (3 - 16/3) + 1e9 * (7 - 16/3)
    # = 4e9 B*s, Sxx = 2e18 B^2: slope 2e-9 s/B (500 MB/s), intercept 16/3 - 2e-9 * 2e9 = 4/3 s.
    a, rate = cr.fit([(1e9, 3.0), (2e9, 6.0), (3e9, 7.0)])
    assert rate == pytest.approx(500e6) and a == pytest.approx(4 / 3)
    # Held out: the two smaller sizes give 0 s + 3e-9 s/B (333 MB/s), which predicts 9 s for 3 GB where 7 s was
    # measured: +2/7. Order of the points does not matter.
    a, rate, predicted, error = cr.held_out([(3e9, 7.0), (1e9, 3.0), (2e9, 6.0)])
    assert a == pytest.approx(0, abs=1e-9) and rate == pytest.approx(1e9 / 3)
    assert predicted == pytest.approx(9.0) and error == pytest.approx(2 / 7)


def test_checkpoint_sizes_follow_the_layer_count():
    # hidden 256: 4 heads of 64, SwiGLU width ceil(8 * 256 / 3 / 256) * 256 = 768, the bytes vocabulary of 257.
    # A layer: q, k, v, o 4 * 256^2 = 262,144 + gate, up, down 3 * 256 * 768 = 589,824 + 2 norms 512 = 852,480.
    # Embedding and output 2 * 257 * 256 = 131,584, final norm 256.
    assert cr.parameters(256, 3) == 131_584 + 3 * 852_480 + 256
    per_layer = cr.layer_parameters(cr.HIDDEN) * 14  # bf16 ZeRO-2: 14 bytes a parameter
    assert cr.depth_for(0.01, 2) == 2  # never less than two decoder layers
    assert cr.depth_for(10 * per_layer / 2**30, 2) == 10


@pytest.mark.e2e
def test_measures_a_real_conversion_end_to_end(tmp_path):
    need_module("torch", "pip install torch==2.13.0")
    need_module("deepspeed", "pip install --no-build-isolation 'deepspeed>=0.19,<0.20'")
    params = cr.parameters(256, 3)
    step, train_pss = cr.make_checkpoint(tmp_path / "run", zero=2, depth=3, hidden=256)
    files = {p.name: p.stat().st_size for p in step.iterdir()}
    assert "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt" in files and train_pss > 0

    row = cr.convert_once(step, tmp_path / "convert", tmp_path / "convert.log")
    assert "*** Done!" in (tmp_path / "convert.log").read_text()  # DeepSpeed's converter ran to its end
    assert row["input_bytes"] == sum(files.values())
    assert 14 * params < row["input_bytes"] < 14 * params + 200_000  # + pickling and the step's metadata
    # Universal: fp32 master, m and v per parameter plus the copied model file, about what went in
    assert 0.9 < row["output_bytes"] / row["input_bytes"] < 1.2
    assert row["input_bytes"] <= row["peak_disk_bytes"] < 3.5 * row["input_bytes"]
    assert row["seconds"] > 0 and row["cpu_seconds"] > 0 and row["peak_pss_bytes"] > 0
    assert row["workers"] == max(1, min(8, os.cpu_count() or 1))
    # The original step is untouched (the conversion ran on hard links) and the scratch folder is gone
    assert {p.name: p.stat().st_size for p in step.iterdir()} == files
    assert "universal" not in json.loads((step / "COMPLETE").read_text())
    assert not (tmp_path / "convert").exists()
