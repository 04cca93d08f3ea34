"""DeepSpeed's universal-checkpoint conversion, timed at several sizes: the rate the planner's elastic shrink and
grow divide a checkpoint by (cli/planner/reliability.py UNIVERSAL_CONVERT_BYTES_PER_S).

    .venv/bin/python benchmarks/conversion_rate.py [--gib 0.25 0.5 1 2 3.5 5] [--repeats 3] \
        [--extra-stages 1 3 --extra-gib 1] [--quiet-load 2 --max-wait 60] [--csv PATH]

Each checkpoint is a real one: templates/train.py (the product's example trainer, as benchmarks/elastic_recovery.py
runs it) trains one step on 2 DeepSpeed CPU ranks in bf16 on random tokens and saves step-00000001 the node
protocol's way. Its model is the trainer's Llama at hidden 1024 with `depth` decoder layers (12.85M parameters a
layer: 4 attention projections and a SwiGLU MLP of 2816), so the checkpoint grows by its layer count; bf16 ZeRO-1/2
saves 14 bytes per parameter (the planner's workload.checkpoint_bytes), ZeRO-3 12. Each conversion is the product's own code: trainfleet-resize.py's
`convert` (the same `ds_to_universal --inject_missing_state` command, its worker counts, its temp folder beside
the step and its swap), run on a hard-linked copy of the step so the original stays for the next repeat.

Per conversion: input bytes, universal output bytes, peak disk (input + everything under the temp folder,
sampled every 0.2 s), wall seconds, the converter's CPU seconds, its peak memory (PSS of its processes), the
seconds a `sync` then takes to write back what it left dirty, and the 1-minute load average before and after
(each conversion first waits, up to --max-wait, for the load to fall under --quiet-load). The fit, seconds = a + bytes / rate, uses the fastest of each size's repeats (the least disturbed by other work
on a shared machine): first on every size but the largest, which it then predicts (held-out error), then on all.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.deepspeed_runs import VENV_BIN, launch_env, master_port, remove_finished_buffers, run_job  # noqa: E402
from tests.token_data import model_args, model_config  # noqa: E402

HIDDEN = 1024
STEP = "step-00000001"
CSV_FIELDS = [
    "started", "zero", "dtype", "hidden", "depth", "params", "repeat", "input_bytes", "output_bytes", "peak_disk_bytes",
    "seconds", "cpu_seconds", "peak_pss_bytes", "sync_seconds", "load1_before", "load1_after", "waited_s",
    "workers",
]  # fmt: skip


def parameters(hidden: int, depth: int) -> int:
    """The trainer's model (tests/token_data.py `model_config`): embedding, `depth` decoder layers, norm + output."""
    return model_config(hidden, depth).params


def layer_parameters(hidden: int) -> int:
    return parameters(hidden, 2) - parameters(hidden, 1)


def bytes_per_param(zero: int, dtype: str) -> int:
    """The 16-bit (or fp32) weights, which ZeRO-3's model files leave out, + fp32 master, Adam m and v."""
    return (0 if zero == 3 else 2 if dtype == "bf16" else 4) + 12


def depth_for(gib: float, zero: int, dtype: str = "bf16", hidden: int = HIDDEN) -> int:
    """The decoder layer count whose checkpoint is nearest `gib` GiB (at least 2: the rest is the small embedding
    and output layer of the bytes vocabulary)."""
    per_layer = layer_parameters(hidden) * bytes_per_param(zero, dtype)
    return max(2, round(gib * 2**30 / per_layer))


def tree_bytes(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # the converter deletes its temp files while we count
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def descendants_pss() -> int:
    """Proportional set size of every process below this one (shared pages counted once across them)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parent[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    ours, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - ours
        ours |= frontier
    total = 0
    for pid in ours:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
    return total


class Peak:
    """Samples, every 0.2 s while the block runs: the bytes under `folder` (if given) and our children's PSS."""

    def __init__(self, folder: Path | None = None):
        self.folder, self.disk, self.pss = folder, 0, 0
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            if self.folder is not None:
                self.disk = max(self.disk, tree_bytes(self.folder))
            self.pss = max(self.pss, descendants_pss())

    def __enter__(self) -> Peak:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def make_checkpoint(
    root: Path, zero: int, depth: int, dtype: str = "bf16", hidden: int = HIDDEN
) -> tuple[Path, int]:
    """One training step (bf16, or fp32) of templates/train.py on 2 CPU ranks, saved as root/ckpt/step-00000001.
    Returns the step folder and the training run's peak memory (PSS, bytes)."""
    root.mkdir(parents=True, exist_ok=True)
    config = {
        "train_batch_size": 2, "train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
        "bf16": {"enabled": dtype == "bf16"}, "zero_optimization": {"stage": zero}, "zero_allow_untested_optimizer": True,
    }  # fmt: skip
    if zero == 3:
        # as infra/userdata.py renders it
        config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = False
    (root / "ds_config.json").write_text(json.dumps(config))
    argv = [str(VENV_BIN / "deepspeed"), "--num_gpus", "2", "--master_port", str(master_port()),
            str(ROOT / "templates" / "train.py"), "--deepspeed_config", str(root / "ds_config.json"),
            "--steps", "1", "--synthetic-data", *model_args(hidden, depth)]  # fmt: skip
    env = launch_env(TRAINFLEET_CKPT_DIR=str(root / "ckpt"), TRAINFLEET_RUN_DIR=str(root / "run"))
    with Peak() as peak:
        result = run_job(argv, env, timeout=1800)
    remove_finished_buffers()  # the CPU ranks' shared-memory all-reduce buffers outlive them (66 MB each)
    if result.returncode != 0:
        raise RuntimeError(f"training run failed:\n{(result.stdout + result.stderr)[-4000:]}")
    return root / "ckpt" / STEP, peak.pss


def load_resize():
    """templates/node/trainfleet-resize.py as a module (its name has a hyphen)."""
    spec = importlib.util.spec_from_file_location(
        "trainfleet_resize", ROOT / "templates/node/trainfleet-resize.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def convert_once(step: Path, scratch: Path, log: Path) -> dict:
    """Time trainfleet-resize.py's `convert` on a hard-linked copy of `step` (inside `scratch`, which it empties
    first and after). The converter's output goes to `log`."""
    resize = load_resize()
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(
        step, scratch / step.name, copy_function=os.link
    )  # no bytes copied: the input stays cached
    folder = scratch / step.name
    input_bytes = tree_bytes(folder)
    done = json.loads((folder / "COMPLETE").read_text())
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # the converter's child inherits it: no GPU probe
    load_before = os.getloadavg()[0]
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    saved_stderr = sys.stderr
    try:
        with open(log, "w") as sink, Peak(scratch) as peak:
            sys.stderr = sink  # resize runs the converter with stdout=stderr=sys.stderr
            t0 = time.perf_counter()
            resize.convert(folder, done)
            seconds = time.perf_counter() - t0
    except SystemExit:
        raise RuntimeError(f"ds_to_universal failed on {step}:\n{log.read_text()[-4000:]}") from None
    finally:
        sys.stderr = saved_stderr
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    os.sync()  # the converter never syncs: what a node with less spare page cache would wait for
    sync_seconds = time.perf_counter() - t0
    assert json.loads((folder / "COMPLETE").read_text())["universal"] is True
    row = {
        "input_bytes": input_bytes,
        "output_bytes": tree_bytes(folder),
        # `scratch` held the hard-linked input (counted once) and the temp folder; the sampler misses at most
        # the last 0.2 s, after the temp files are gone
        "peak_disk_bytes": max(peak.disk, input_bytes),
        "seconds": round(seconds, 3),
        "cpu_seconds": round(
            sum(getattr(cpu_after, f) - getattr(cpu_before, f) for f in ("ru_utime", "ru_stime")), 2
        ),
        "peak_pss_bytes": peak.pss,
        "sync_seconds": round(sync_seconds, 3),
        "load1_before": round(load_before, 2),
        "load1_after": round(os.getloadavg()[0], 2),
        "workers": max(1, min(8, os.cpu_count() or 1)),  # what resize passes
    }
    shutil.rmtree(scratch, ignore_errors=True)
    return row


def wait_for_quiet(load: float, max_wait: float) -> float:
    """Wait until the 1-minute load average is under `load` (other work on this shared machine, and the tail of
    our own last run), at most `max_wait` seconds; returns the seconds waited."""
    t0 = time.time()
    while os.getloadavg()[0] >= load and time.time() - t0 < max_wait:
        time.sleep(5)
    return round(time.time() - t0, 1)


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares seconds = a + bytes / rate over (bytes, seconds): (a, rate in bytes/s)."""
    n = len(points)
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, 1 / slope


def held_out(points: list[tuple[float, float]]) -> tuple[float, float, float, float]:
    """Fit on all but the largest size, predict the largest: (a, rate, predicted s, relative error)."""
    points = sorted(points)
    a, rate = fit(points[:-1])
    x, y = points[-1]
    predicted = a + x / rate
    return a, rate, predicted, (predicted - y) / y


def summary(rows: list[dict]) -> dict:
    """One size's repeats: the fastest run's figures, and the spread of the times."""
    best = min(rows, key=lambda r: r["seconds"])
    times = [r["seconds"] for r in rows]
    return {**best, "spread": (max(times) - min(times)) / min(times), "repeats": len(rows)}


def table(sizes: list[dict]) -> str:
    lines = [f"{'zero':>4} {'dtype':>5} {'params':>7} {'input GiB':>9} {'out/in':>6} {'peak disk/in':>12} {'B/param peak':>12} "
             f"{'min s':>7} {'spread':>6} {'MB/s':>6} {'cpu s':>6} {'sync s':>6} {'PSS GiB':>7} {'load1':>9}"]  # fmt: skip
    for s in sizes:
        i = s["input_bytes"]
        lines.append(
            f"{s['zero']:>4} {s['dtype']:>5} {s['params'] / 1e6:>6.0f}M {i / 2**30:>9.2f} {s['output_bytes'] / i:>6.3f} "
            f"{s['peak_disk_bytes'] / i:>12.2f} {s['peak_disk_bytes'] / s['params']:>12.1f} {s['seconds']:>7.2f} "
            f"{s['spread']:>6.0%} {i / s['seconds'] / 1e6:>6.0f} {s['cpu_seconds']:>6.1f} {s['sync_seconds']:>6.2f} "
            f"{s['peak_pss_bytes'] / 2**30:>7.2f} {s['load1_before']:>4.2f}-{s['load1_after']:<4.2f}"
        )
    return "\n".join(lines)


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def report(rows: list[dict]) -> None:
    """The table of each configuration's fastest run, and the fits over the bf16 ZeRO-2 sizes."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["zero"], r["dtype"], r["depth"]), []).append(r)
    sizes = [summary(g) for g in groups.values()]
    print("\n" + table(sizes))
    main_series = [s for s in sizes if s["zero"] == 2 and s["dtype"] == "bf16"]
    if len(main_series) < 3:
        return
    series = [(s["input_bytes"], s["seconds"]) for s in main_series]
    a0, r0, predicted, error = held_out(series)
    x, y = max(series)
    print(f"\nfit without the largest: {a0:.2f} s + bytes / {r0 / 1e6:.0f} MB/s; predicts {x / 2**30:.2f} GiB in "
          f"{predicted:.1f} s, measured {y:.1f} s: held-out error {error:+.1%}")  # fmt: skip
    a1, r1 = fit(series)
    print(f"fit on all {len(series)} sizes: {a1:.2f} s + bytes / {r1 / 1e6:.0f} MB/s")
    ac, rc = fit([(s["input_bytes"], s["cpu_seconds"]) for s in main_series])
    print(f"the converter's CPU seconds (of the fastest runs), fitted the same way: {ac:.2f} s + bytes / "
          f"{rc / 1e6:.0f} MB per CPU second")  # fmt: skip
    ratio = [s["output_bytes"] / s["input_bytes"] for s in main_series]
    peak = [s["peak_disk_bytes"] / s["input_bytes"] for s in main_series]
    print(f"universal output per input byte: {min(ratio):.3f}-{max(ratio):.3f}; peak disk per input byte: "
          f"{min(peak):.2f}-{max(peak):.2f} = {14 * min(peak):.1f}-{14 * max(peak):.1f} bytes/param at 14 bytes/param "
          "(issue 29 finding 6: ~38)")  # fmt: skip
    ckpt_70b = 14.0 * 70e9
    print(f"70B (14 bytes/param, {ckpt_70b / 1e9:.0f} GB): {(a1 + ckpt_70b / r1) / 60:.0f} min at this fit, "
          f"{ckpt_70b / 200e6 / 60:.0f} min at the planner's 200 MB/s")  # fmt: skip


def read_rows(path: Path) -> list[dict]:
    """A CSV this script wrote, numbers as numbers."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k, v in r.items():
            if k not in ("started", "dtype"):
                r[k] = float(v) if "." in v else int(v)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--gib", type=float, nargs="+", default=[0.25, 0.5, 1, 2, 3.5, 5], help="bf16 ZeRO-2 sizes"
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--extra", nargs="*", default=["1:bf16", "3:bf16", "2:fp32"],
                    help="ZEROSTAGE:DTYPE also measured at --extra-gib, not fitted (2:fp32 is the "
                         "configuration of benchmarks/elastic_recovery.py's one measurement)")  # fmt: skip
    ap.add_argument("--extra-gib", type=float, default=1.0)
    ap.add_argument("--quiet-load", type=float, default=2.0, help="wait for a 1-minute load under this ...")
    ap.add_argument(
        "--max-wait", type=float, default=60, help="... before each conversion, at most this long"
    )
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new one under /tmp)")
    ap.add_argument("--csv", type=Path, default=None, help="write every conversion here")
    ap.add_argument("--summarize", type=Path, default=None, help="measure nothing: report this CSV's rows")
    a = ap.parse_args()
    if a.summarize:
        report(read_rows(a.summarize))
        return 0

    signal.signal(
        signal.SIGTERM, lambda *_: sys.exit(143)
    )  # so `finally` removes the scratch, writes the CSV
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    work = a.work or Path(tempfile.mkdtemp(prefix="tf-conversion-rate-"))
    extras = [(int(z), d) for z, d in (e.split(":") for e in a.extra)]
    plan = dict.fromkeys([(2, "bf16", depth_for(g, 2)) for g in sorted(a.gib)] +
                         [(z, d, depth_for(a.extra_gib, z, d)) for z, d in extras])  # fmt: skip
    rows: list[dict] = []
    trained: list[tuple[int, int]] = []  # (params, the training run's peak PSS)
    try:
        for zero, dtype, depth in plan:
            n = parameters(HIDDEN, depth)
            # No swap on this machine: skip a size whose training run the earlier ones (PSS = fixed + per param)
            # say will not fit, with a fifth spare for the converter and other work.
            if len({p for p, _ in trained}) >= 2:
                fixed, params_per_byte = fit(trained)
                need = fixed + n / params_per_byte
                if need > 0.8 * mem_available():
                    print(f"skipped ZeRO-{zero} {dtype} depth {depth}: training needs ~{need / 2**30:.1f} GiB, "
                          f"{mem_available() / 2**30:.1f} GiB available", flush=True)  # fmt: skip
                    continue
            root = work / f"z{zero}-{dtype}-d{depth}"
            t0 = time.time()
            step, train_pss = make_checkpoint(root, zero, depth, dtype)
            trained.append((n, train_pss))
            print(f"ZeRO-{zero} {dtype} depth {depth} ({n / 1e6:.0f}M params): checkpoint "
                  f"{tree_bytes(step) / 2**30:.2f} GiB made in {time.time() - t0:.0f} s, training PSS "
                  f"{train_pss / 2**30:.1f} GiB", flush=True)  # fmt: skip
            for repeat in range(a.repeats):
                waited = wait_for_quiet(a.quiet_load, a.max_wait)
                row = convert_once(step, root / "convert", root / f"convert-{repeat}.log")
                row = {"started": started, "zero": zero, "dtype": dtype, "hidden": HIDDEN, "depth": depth,
                       "params": n, "repeat": repeat, **row, "waited_s": waited}  # fmt: skip
                rows.append(row)
                print("  " + json.dumps(row), flush=True)
            shutil.rmtree(root, ignore_errors=True)
    finally:
        if a.work is None:
            shutil.rmtree(work, ignore_errors=True)
        if a.csv and rows:
            with open(a.csv, "w", newline="") as fh:
                writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
                writer.writeheader()
                writer.writerows(rows)
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
