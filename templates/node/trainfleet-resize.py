"""trainfleet-resize: make the restored checkpoint loadable at this launch's node count, and write its ds_config.

Run by trainfleet-boot.sh with the training venv's python (the pinned DeepSpeed), after `restore` and before
every launch:

    trainfleet-resize.py --ckpt-dir DIR --ds-config /etc/trainfleet/ds_config.json --out RUN/ds_config.json \
        --nodes N --slots S

1. The newest complete step in DIR is what the job resumes from. If its COMPLETE says it was saved by another
   node count (`nodes`) and it holds ZeRO shards, it is converted with DeepSpeed's own converter
   (`python -m deepspeed.checkpoint.ds_to_universal --inject_missing_state`) into DeepSpeed's universal format,
   which loads at any data-parallel size: into a temp folder inside DIR, COMPLETE (`"universal": true`) written
   last, then swapped in. Without ZeRO shards (ZeRO-0) the checkpoint already loads at any size.
2. The ds_config for this launch: the stack's, with `gradient_accumulation_steps` = train_batch_size /
   (micro batch x data-parallel ranks), so the global batch (and the learning-rate schedule's tokens per step)
   never changes, and `checkpoint.load_universal` when the step is universal. Written atomically.
3. One JSON line on stdout for the boot script's run events: step, from_nodes, to_nodes, converted, bytes,
   seconds, grad_accum.

Exit 0 ok; 2 when the node count cannot keep the global batch (one line naming the counts); 1 when the
conversion fails (DeepSpeed's output is on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

STEP_DIR = re.compile(r"step-(\d{8})")
ZERO_SHARD = "zero_pp_rank_"


def fail(code: int, message: str) -> None:
    print(f"trainfleet-resize: {message}", file=sys.stderr)
    sys.exit(code)


def marker(folder: Path) -> dict | None:
    try:
        text = (folder / "COMPLETE").read_text()
    except OSError:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def newest_complete(ckpt_dir: Path) -> tuple[Path, dict] | None:
    found = []
    for folder in ckpt_dir.glob("step-*"):
        m = STEP_DIR.fullmatch(folder.name)
        done = marker(folder) if m else None
        if done is not None:
            found.append((int(m.group(1)), folder, done))
    if not found:
        return None
    _, folder, done = max(found, key=lambda t: t[0])
    return folder, done


def size_of(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def convert(folder: Path, done: dict) -> None:
    """Replace `folder` by its universal-format conversion, COMPLETE last; nothing outside its parent."""
    work = folder.parent / f".convert-{folder.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    out = work / folder.name  # DeepSpeed writes `latest_universal` beside the output folder: inside `work`
    workers = str(max(1, min(8, os.cpu_count() or 1)))
    cmd = [
        sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal",
        "--input_folder", str(folder), "--output_folder", str(out),
        "--num_extract_workers", workers, "--num_merge_workers", workers,
        "--inject_missing_state",  # a model that is not Megatron's carries no universal_checkpoint_info
    ]  # fmt: skip
    try:
        # DeepSpeed's progress goes to stderr: stdout carries only this script's one JSON line.
        result = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr, check=False)
        if result.returncode != 0:
            fail(1, f"DeepSpeed's ds_to_universal failed on {folder} (exit {result.returncode})")
        converted = {**done, "universal": True, "restored": True, "whole": False}
        (out / "COMPLETE.tmp").write_text(json.dumps(converted) + "\n")
        os.replace(out / "COMPLETE.tmp", out / "COMPLETE")
        old = folder.parent / f".replaced-{folder.name}-{os.getpid()}"
        os.replace(folder, old)
        os.replace(out, folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def data_parallel(config: dict, ranks: int) -> int:
    tp = int((config.get("tensor_parallel") or {}).get("autotp_size") or 1)
    stages = (config.get("pipeline") or {}).get("stages", 1)
    return ranks // (tp * (stages if isinstance(stages, int) else 1))


def launch_config(base: dict, nodes: int, slots: int, universal: bool) -> dict:
    config = json.loads(json.dumps(base))
    micro, batch = config["train_micro_batch_size_per_gpu"], config["train_batch_size"]
    dp = data_parallel(config, nodes * slots)
    if dp < 1 or batch % (micro * dp):
        fail(2, f"train_batch_size {batch} is not micro batch {micro} x a whole accumulation on {dp} data-"
                f"parallel rank(s) ({nodes} node(s) x {slots}); elastic sizes come from the stack's rule "
                "(infra/elastic.py): redeploy the stack so the node gets them")  # fmt: skip
    config["gradient_accumulation_steps"] = batch // (micro * dp)
    checkpoint = dict(config.get("checkpoint") or {})
    checkpoint.pop("load_universal", None)
    if universal:
        checkpoint["load_universal"] = True
    if checkpoint:
        config["checkpoint"] = checkpoint
    else:
        config.pop("checkpoint", None)
    return config


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--ckpt-dir", required=True, type=Path)
    p.add_argument("--ds-config", required=True, type=Path, help="the stack's ds_config.json")
    p.add_argument("--out", required=True, type=Path, help="the ds_config this launch reads")
    p.add_argument("--nodes", required=True, type=int, help="the node count of this launch")
    p.add_argument("--slots", required=True, type=int, help="ranks per node")
    a = p.parse_args()
    if a.nodes < 1 or a.slots < 1:
        fail(2, f"--nodes {a.nodes} and --slots {a.slots} must be at least 1")
    try:
        base = json.loads(a.ds_config.read_text())
    except (OSError, ValueError) as e:
        fail(2, f"cannot read the stack's ds_config {a.ds_config}: {e}")
    newest = newest_complete(a.ckpt_dir) if a.ckpt_dir.is_dir() else None
    event = {"step": None, "from_nodes": None, "to_nodes": a.nodes, "converted": False, "bytes": 0, "seconds": 0.0}
    universal = False
    if newest is not None:
        folder, done = newest
        saved_by = done.get("nodes", 1)
        event.update(step=int(folder.name.removeprefix("step-")), from_nodes=saved_by)
        universal = bool(done.get("universal"))
        shards = any(ZERO_SHARD in p.name for p in folder.rglob("*"))
        if not universal and saved_by != a.nodes and shards:
            t0 = time.time()
            event["bytes"] = size_of(folder)
            convert(folder, done)
            event.update(converted=True, seconds=round(time.time() - t0, 3))
            universal = True
    config = launch_config(base, a.nodes, a.slots, universal)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(a.out, json.dumps(config, indent=2) + "\n")
    event.update(grad_accum=config["gradient_accumulation_steps"], universal=universal)
    print(json.dumps(event), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
