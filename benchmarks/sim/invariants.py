"""What must hold on every run, checked from the record (the bucket's, the registry's, the disks'), not from what the
agent says about itself.

(1) every committed MANIFEST lists, per part, entries whose stored identities all come from one save (run,
    attempt) of that step, saved by that part's node under that name;
(2) every file a restore leaves in step-N/ holds the committed entry's bytes for its name;
(3) at the same node count no node downloads another node's ZeRO shard (checkpoints.ZERO_SHARD_RE under another
    node-<j>/);
(4) a notice whose deadline covers the modelled save and upload of the noticed node's part ends with the step
    it asked for durable (scenarios.notice checks it, with the model's figure beside it).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from templates.agent.trainfleet_agent.checkpoints import ZERO_SHARD_RE, local_files
from templates.agent.trainfleet_agent.common import step_name

from .agent import PREFIX


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


ONE_SAVE = "(1) a committed step is one save"
COMMITTED_BYTES = "(2) a restore holds the committed bytes"
OWN_SHARDS = "(3) no node fetches another node's shard"
FITS_DURABLE = "(4) a notice that fits ends durable"
NODE_COUNT_STOPS = "a changed node count without elastic stops the job, never restarts it (#2)"
RESTORES_AFTER_COMMIT = "a relaunch restores the step just saved, not the one before (#8)"
NO_TEMP_LEFT = "no temp folder outlives a restore (#7)"
RELEASED_AT_DONE = "a finished job's nodes are released at once, not at the hook's timeout (#11)"


def one_save_per_manifest(world) -> Check:
    bad, count = [], 0
    for _at, manifest in world.bucket.manifests:
        count += 1
        saves = set()
        for part in manifest["parts"]:
            for e in part["files"]:
                who = world.contents.of_token(e["checksum"])
                if who is None or (who.step, who.node, who.path) != (manifest["step"], part["node"], e["path"]):
                    bad.append(f"step {manifest['step']} node {part['node']} {e['path']}: holds {who}")
                    continue
                saves.add(who.save)
        if len(saves) > 1:
            bad.append(f"step {manifest['step']} mixes saves {sorted(saves)} (run, step, attempt)")
    return Check(ONE_SAVE, not bad, "; ".join(bad[:3]) if bad else f"{count} manifest(s), each one save")


def committed_manifest(world, step: int) -> dict | None:
    obj = world.bucket.objects.get(f"{PREFIX}/{step_name(step)}/MANIFEST.json")
    return json.loads(obj.data) if obj is not None and obj.data else None


def restore_holds_committed(world, restored, whole: bool) -> list[str]:
    """Problems with what one node's restore left (empty: none)."""
    if restored.step is None:
        return []
    node = world.nodes[restored.rank]
    manifest = committed_manifest(world, restored.step)
    if manifest is None:
        return [f"node {restored.rank}: step {restored.step} restored but no manifest in the bucket"]
    entries: dict[str, dict] = {}
    for part in sorted(manifest["parts"], key=lambda p: p["node"] != restored.rank):  # its own part first
        for e in part["files"]:
            entries.setdefault(e["path"], e)
    bad = []
    for rel, full in local_files(os.path.join(node.ckpt_dir, step_name(restored.step))):
        entry = entries.get(rel)
        held = world.contents.identity(full)
        want = world.contents.of_token(entry["checksum"]) if entry else None
        if entry is None or held != want or os.path.getsize(full) != entry["size"]:
            bad.append(f"node {restored.rank} step {restored.step} {rel}: holds {held}, committed {want}")
    return bad


def restores_hold_committed(world, results, whole: bool) -> Check:
    bad = [p for r in results for p in restore_holds_committed(world, r, whole)]
    ok_count = sum(1 for r in results if r.step is not None)
    return Check(COMMITTED_BYTES, not bad, "; ".join(bad[:3]) if bad else f"{ok_count} restore(s)")


def no_foreign_shards(results) -> Check:
    bad = []
    for r in results:
        for _node, key, _size in r.downloads:
            parts = key.split("/")  # run/step-N/node-j/path...
            if len(parts) >= 4 and parts[2].startswith("node-"):
                owner, path = int(parts[2][5:]), "/".join(parts[3:])
                if owner != r.rank and ZERO_SHARD_RE.search(path):
                    bad.append(f"node {r.rank} fetched node {owner}'s {path}")
    return Check(OWN_SHARDS, not bad, "; ".join(bad[:3]) if bad else f"{sum(len(r.downloads) for r in results)} downloads")


def latest_only_forward(world) -> Check:
    steps = [s for _t, s in world.bucket.latest]
    ok = all(a <= b for a, b in zip(steps, steps[1:], strict=False))
    return Check("LATEST only moves forward", ok, f"LATEST written {len(steps)} time(s)")
