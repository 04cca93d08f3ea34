"""How close the throughput model comes to the llm-foundry table: tokens/s per device, per row.

    .venv/bin/python benchmarks/plan_calibration.py [--rows]

Prints the fitted formula, the median / p90 / worst relative error over all 216 rows (in-sample), the
same with each model held out of the fit (out-of-sample), per-section medians and the worst rows.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cli.planner.calibration import default_fit, fit_rows, load_rows  # noqa: E402
from cli.planner.presets import LLMFOUNDRY_MODELS  # noqa: E402
from cli.planner.validation import replay, summary  # noqa: E402
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


if __name__ == "__main__":
    main()
