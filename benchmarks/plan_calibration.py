"""How close the planner comes to published measurements: step throughput and whole runs.

    .venv/bin/python benchmarks/plan_calibration.py [--rows]

1. llm-foundry (A100/H100): the fitted formula, the median / p90 / worst relative error over all 216 rows
   (in-sample), the same with each model held out of the fit, per-section medians and the worst rows.
2. Every other family (family_throughput.csv): per family, the predicted MFU (its curve x its factor, capped)
   against each published row's, in-sample and with the row's model left out of the factor and the cap.
3. Whole runs (training_runs.csv, the development set): reported vs predicted device-hours per run; none is in
   any fit. Where a run publishes its step throughput too, its error split into the step and the time beside it.
4. The plan's 80% interval: its coverage on the development set and on the held-out runs (held_out_runs.csv).
5. Published tensor x pipeline runs replayed at their own layouts (layout_runs.csv): the development runs that set
   the layout efficiency, and the held-out one that measures it. Then published ZeRO-3 steps of GPT-3 175B at
   384-1,536 GPUs (Narayanan et al. 2021 Table 2; measured only, nothing fitted to them).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import math  # noqa: E402
from dataclasses import replace  # noqa: E402

from cli.planner import evidence, layout_runs, reliability, throughput  # noqa: E402
from cli.planner.calibration import attention_share, default_fit, fit_rows, load_rows  # noqa: E402
from cli.planner.overheads import DATA_STALL_SHARE, EVAL_EVERY_STEPS, EVAL_ITERS  # noqa: E402
from cli.planner.presets import LLMFOUNDRY_MODELS  # noqa: E402
from cli.planner.uncertainty import PLAN_INTERVAL, interval_from_ratios  # noqa: E402
from cli.planner.validation import HELD_OUT_TABLE, load_published, replay, replay_run, summary  # noqa: E402
from infra.catalog import default_catalog  # noqa: E402


def show(title: str, stats: dict) -> None:
    print(
        f"{title:<34} rows {stats['rows']:>3}  median {stats['median_relative_error']:6.1%}  "
        f"mean {stats['mean_relative_error']:6.1%}  p90 {stats['p90_relative_error']:6.1%}  "
        f"worst {stats['worst_relative_error']:6.1%}"
    )


def main() -> None:
    rows = load_rows()
    accelerators = default_catalog().accelerators
    fit = default_fit()
    print(fit.formula())
    errors = replay(rows, fit, accelerators)
    show("in-sample (all rows)", summary(errors))
    held = []
    for model in LLMFOUNDRY_MODELS:
        held += replay([r for r in rows if r.model == model], fit_rows([r for r in rows if r.model != model]),
                       accelerators)  # fmt: skip
    show("leave-one-model-out", summary(held))
    for section in sorted({r.section for r in rows}):
        sub = [e for e in errors if e.row.section == section]
        print(f"  {section[:60]:<60} rows {len(sub):>3}  median "
              f"{statistics.median(e.relative for e in sub):6.1%}  worst {max(e.relative for e in sub):6.1%}")  # fmt: skip
    print(
        "worst rows (model, GPU, seq len, devices, micro batch, act ckpt: predicted vs measured tokens/s/device):"
    )
    for e in sorted(errors, key=lambda e: -e.relative)[: 200 if "--rows" in sys.argv else 5]:
        r = e.row
        print(f"  {r.model:>5} {r.gpu:<10} s={r.seq_len:<6} n={r.devices:<4} mb={r.micro_batch:<3} "
              f"ckpt={str(r.activation_checkpointing):<5} {e.predicted:10,.0f} vs {e.measured:10,.0f}  "
              f"{e.relative:6.1%}")  # fmt: skip
    families(fit)
    runs(fit, accelerators)
    layouts(fit)
    zero3_at_scale(fit)


def curve_mfu(fit, x) -> float:
    """The fitted curve of x's family at x's own shape (what a family's factor divides by)."""
    return fit.mfu(evidence.base_curve(x.family, x.precision), x.hidden,
                   attention_share(x.layers, x.hidden, x.seq_len, int(x.params)), x.devices,
                   x.micro_tokens or x.seq_len, bool(x.checkpointing))  # fmt: skip


def predicted_row_mfu(fit, r) -> float:
    share = attention_share(r.layers, r.hidden, r.seq_len, int(r.params))
    return fit.device_mfu(r.accelerator, r.precision, r.hidden, share, r.devices, r.micro_tokens or r.seq_len,
                          bool(r.checkpointing))  # fmt: skip


def families(fit) -> None:
    print("\nfamilies: predicted vs published MFU per row (in-sample | the row's model left out of factor and cap)")
    for fam, ev in sorted(fit.families.items()):
        if fam in evidence.FITTED:
            continue
        ins, out = [], []
        for r in ev.rows:
            rest = tuple(x for x in ev.rows if x.model != r.model)
            held = replace(ev, rows=rest, factors={k: v for k, v in ev.factors.items()
                                                   if any(evidence.precision_class(x.precision) == k for x in rest)})
            if rest:
                held = replace(held, factors=evidence.family_factors(list(rest), lambda x: curve_mfu(fit, x)))
            held_fit = replace(fit, families={**fit.families, fam: held})
            p_in, p_out = predicted_row_mfu(fit, r), predicted_row_mfu(held_fit, r)
            ins.append((p_in - r.mfu) / r.mfu)
            out.append((p_out - r.mfu) / r.mfu)
            if "--rows" in sys.argv:
                print(f"    {r.accelerator:<6} {r.model[:34]:<34} {r.precision:<4} n={r.devices:<5} published MFU "
                      f"{r.mfu:.3f}  predicted {p_in:.3f} | {p_out:.3f}")
        print(f"  {fam:<7} rows {len(ev.rows):>2}  factors {', '.join(f'{k} {v:.2f}' for k, v in ev.factors.items())}"
              f"  in-sample: median |err| {statistics.median(abs(x) for x in ins):5.1%}, above published in "
              f"{sum(x > 1e-9 for x in ins)} rows | model left out: median |err| "
              f"{statistics.median(abs(x) for x in out):5.1%}, worst over-prediction {max(out):+.1%}")


def runs(fit, accelerators) -> None:
    dev = [replay_run(r, fit, accelerators) for r in load_published()]
    timed = [e for e in dev if e.run.device_hours is not None]
    print(f"\nwhole runs (development set, {len(timed)} runs, none in any fit): failures "
          f"{reliability.FAILURES_PER_DEVICE_HOUR:g} per device-hour, restart {reliability.PROVISION_S / 60:.0f} min, "
          f"evaluation {EVAL_ITERS} forward passes every {EVAL_EVERY_STEPS:,} steps, data-loader stalls "
          f"{DATA_STALL_SHARE:.0%} (cli/planner/overheads.py)")
    for e in timed:
        run = e.run
        print(f"  {run.name[:42]:<42} {run.accelerator:<9} x{run.devices:<5} reported {run.device_hours:>11,.0f} "
              f"predicted {e.predicted_device_hours:>11,.0f}  reported/predicted {e.ratio:5.2f}")
    ratios = [e.ratio for e in timed]
    logs = [abs(math.log(x)) for x in ratios]
    print(f"  median reported/predicted {statistics.median(ratios):.2f}, median |log error| {statistics.median(logs):.2f} "
          f"(x{math.exp(statistics.median(logs)):.2f}), runs under-predicted {sum(x > 1 for x in ratios)} of "
          f"{len(ratios)}")
    held = [replay_run(r, fit, accelerators) for r in load_published(HELD_OUT_TABLE)]
    split(dev, held)
    held_out = interval_coverage(ratios, held)
    by_scale([(e.run.devices, e.ratio) for e in timed], held_out)


def split(dev, held) -> None:
    """Where a run publishes its step throughput as well as its time, which part of the error is where: the step
    (published / predicted tokens/s per device) and the time beside the steps (published time over the steps' time
    at the published throughput, against what the planner models beside them: evaluation, stalls, failures,
    restarts and checkpoints)."""
    print("\nstep throughput and time beside the steps (runs that publish a step throughput)")
    for title, errors in (("development", dev), ("held out", held)):
        stepped = [e for e in errors if e.run.tokens_per_s_per_device is not None]
        for e in stepped:
            run = e.run
            beside = (f"beside the steps {e.beside_steps:+6.1%} (modelled {e.modelled_beside_steps:+.1%})"
                      if run.device_hours is not None else "")
            print(f"  {title:<11} {run.name[:34]:<34} x{run.devices:<6} published {run.tokens_per_s_per_device:>8,.1f} "
                  f"predicted {e.predicted_tokens_per_s_per_device:>8,.1f} tokens/s/device  published/predicted "
                  f"{e.step_ratio:5.2f}  {beside}")
        steps = [e.step_ratio for e in stepped]
        besides = [e for e in stepped if e.run.device_hours is not None]
        print(f"  {title:<11} step published/predicted: median {statistics.median(steps):.2f} over {len(steps)} runs "
              f"(range {min(steps):.2f}-{max(steps):.2f}); time beside the steps: median "
              f"{statistics.median(e.beside_steps for e in besides):+.1%} over {len(besides)}, modelled "
              f"{statistics.median(e.modelled_beside_steps for e in besides):+.1%}")


def interval_coverage(dev_ratios, held) -> list[tuple[int, float]]:
    """The plan's 80% interval (cli/planner/uncertainty.py): how often it holds on the development set's runs, and on
    the held-out runs (held_out_runs.csv: LLaMA, Llama 2/3, OPT, BLOOM, MPT; those with a device count and a
    reported time can be replayed). Neither set is in any fit."""
    iv = PLAN_INTERVAL

    def inside(r: float) -> bool:
        return iv.low <= r <= iv.high

    again = interval_from_ratios(dev_ratios)
    print(f"\n80% interval x{iv.low:.2f} to x{iv.high:.2f}, median x{iv.median:.2f} (recomputed from the development "
          f"set's ratios: x{again.low:.3f} to x{again.high:.3f}, median x{again.median:.3f})")
    print(f"  development set: {sum(map(inside, dev_ratios))} of {len(dev_ratios)} inside")
    hits, out = 0, []
    timed = [e for e in held if e.run.device_hours is not None]
    for e in timed:
        run = e.run
        hits += inside(e.ratio)
        out.append((run.devices, e.ratio))
        print(f"  held out: {run.name[:34]:<34} {run.accelerator:<9} x{run.devices:<6} reported "
              f"{run.device_hours:>12,.0f} predicted {e.predicted_device_hours:>12,.0f}  reported/predicted "
              f"{e.ratio:5.2f}  {'inside' if inside(e.ratio) else 'OUTSIDE'}")
    print(f"  held-out runs: {hits} of {len(timed)} inside the interval")
    return out


SCALES = ((1, 512), (513, 4096), (4097, 10**9))  # devices: the three bands


def by_scale(dev: list[tuple[int, float]], held_out: list[tuple[int, float]]) -> None:
    """Reported / predicted device-hours by the run's device count, each run as the planner prices it."""
    print("\nerror by scale (reported / predicted device-hours; |log error| as a factor)")
    for title, pairs in (("development", dev), ("held out", held_out)):
        for low, high in SCALES:
            ratios = [r for n, r in pairs if low <= n <= high]
            band = f"{low:,}-{high:,}" if high < 10**9 else f"> {low - 1:,}"
            if not ratios:
                print(f"  {title:<22} {band:>12} devices: no runs")
                continue
            logs = [abs(math.log(r)) for r in ratios]
            print(f"  {title:<22} {band:>12} devices: {len(ratios):>2} runs, median ratio "
                  f"{statistics.median(ratios):.2f}, median |log error| x{math.exp(statistics.median(logs)):.2f}, "
                  f"worst x{math.exp(max(logs)):.2f}")


def layouts(fit) -> None:
    print(f"\ntensor x pipeline runs at their own layouts (layout efficiency {throughput.LAYOUT_EFFICIENCY:.2f}, the "
          "most under which no development run is predicted faster)")
    for run in layout_runs.load():
        st = run.replay(fit)
        print(f"  {run.role:<11} {run.name[:40]:<40} TP{run.tp} PP{run.pp:<3} x{st.devices:<5}"
              f" m {st.grad_accum:>3}  published {run.published:7.2f} predicted {st.tokens_per_second_per_device:7.2f} "
              f"tokens/s/device  published/predicted {run.published / st.tokens_per_second_per_device:.3f}")  # fmt: skip


def zero3_at_scale(fit) -> None:
    """GPT-3 175B (96 layers, h 12288, V 51200) under ZeRO-3 without model parallelism on A100-80GB, batch 1536 x
    2048 (Narayanan et al. 2021 Table 2, from a secondary copy; the GPU counts 384/768/1536 are inferred there, and
    the micro batch is not given: the largest that divides a device's share of the batch, the model's best case).
    Published TFLOP/s per GPU count recomputation's forward; the model's are scaled by 4/3 the same way."""
    from cli.planner.memory import Sharding
    from cli.planner.presets import ModelShape
    from cli.planner.workload import Workload

    h, layers, vocab = 12288, 96, 51200
    w = Workload(ModelShape("gpt3-175b", layers * 12 * h * h + vocab * h + 2048 * h, layers, h, 96, vocab, 4 * h),
                 10**12, 2048, global_batch_tokens=1536 * 2048)  # fmt: skip
    hw = throughput.Hardware("A100-80GB", 312.0, 8, 80, 1024, 128, 1600.0, "infiniband")
    print("\nZeRO-3 at scale: GPT-3 175B, batch 1536 x 2048 (Narayanan 2021 Table 2; GPU counts inferred, UNCERTAIN)")
    for devices, published in ((384, 144.0), (768, 88.0), (1536, 44.0)):
        share = 1536 // devices
        st = throughput.step(w, hw, devices // 8, Sharding(3), share, True, fit)
        predicted = st.tokens_per_second_per_device * w.flops_per_token * 4 / 3 / 1e12
        print(f"  x{devices:<5} micro batch {share}  published {published:5.0f} predicted {predicted:5.0f} TFLOP/s per "
              f"GPU  published/predicted {published / predicted:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
