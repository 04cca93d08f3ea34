"""Checkpoint commit and restore: files, MANIFEST.json, LATEST, pruning, manifest checks."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import socket
import time

from .checkpoint_names import LAYER_RE, SHARD_MP_RE, ZERO_SHARD_RE
from .common import STEP_RE, log, step_name
from .http_client import run_parallel
from .stores import Checksum, ObjectStore


def complete_steps(ckpt_dir: str) -> list[int]:
    """Steps whose directory holds COMPLETE, ascending."""
    out = []
    try:
        names = os.listdir(ckpt_dir)
    except FileNotFoundError:
        return out
    for name in names:
        m = STEP_RE.match(name)
        if m and os.path.isfile(os.path.join(ckpt_dir, name, "COMPLETE")):
            out.append(int(m.group(1)))
    return sorted(out)


def _key(prefix: str, *rest: str) -> str:
    p = prefix.strip("/")
    return "/".join([p, *rest]) if p else "/".join(rest)


def read_latest(store: ObjectStore, prefix: str) -> int | None:
    return _latest_step(store.get_bytes(_key(prefix, "LATEST")))


def _latest_step(data: bytes | None) -> int | None:
    if not data:
        return None
    # Not UTF-8 (e.g. UTF-16 from Windows PowerShell's `>`): unreadable, like a missing LATEST, so
    # restore falls back to the newest verified step and the next commit rewrites it.
    m = STEP_RE.match(data.decode(errors="replace").strip())
    return int(m.group(1)) if m else None


def advance_latest(store: ObjectStore, prefix: str, step: int) -> int:
    """Move LATEST to `step` if that is forward; returns LATEST's step after. A conditional write: two committers
    (the agent and the boot script's `sync`, an old node 0 and a new one after a membership change) each read LATEST
    before writing it, and the slower one moved it backward (issue 29 #15). The loser of a race reads again."""
    key = _key(prefix, "LATEST")
    for _ in range(20):
        data, version = store.get_versioned(key)
        current = _latest_step(data)
        if current is not None and current >= step:
            return current
        if store.put_if(key, step_name(step).encode(), version):
            return step
        log("latest_race", step=step, read=current)
    raise RuntimeError(f"LATEST kept changing under 20 conditional writes of step {step}")


# ------------------------------------------------------------------------------------------- commit
# Every node uploads its own part of a step (the files its ranks wrote) under step-N/node-<R>/ and then
# step-N/node-<R>/PART.json; node rank 0 writes step-N/MANIFEST.json once every part is there and verifies,
# then LATEST (only forward). A step is never "latest" before every node's part is durable.

PART_FILE = "PART.json"


def node_dir(node: int) -> str:
    return f"node-{node}"


def local_marker(final: str) -> dict | None:
    """The COMPLETE marker of a step folder as a dict; None if the folder is not complete."""
    try:
        with open(os.path.join(final, "COMPLETE"), "rb") as f:
            data = f.read()
    except OSError:
        return None
    try:
        marker = json.loads(data)  # bytes: a COMPLETE that is not UTF-8 is a ValueError here too
    except ValueError:
        return {}
    return marker if isinstance(marker, dict) else {}


def step_part(ckpt_dir: str, step: int) -> dict:
    """What the trainer wrote into step-N/COMPLETE: which node rank of how many nodes saved this part, which save
    it is (`save`, or None from a trainer that does not say), and whether it was restored (not saved) here. A
    COMPLETE that is empty or not JSON: one node, rank 0."""
    doc = local_marker(os.path.join(ckpt_dir, step_name(step))) or {}

    def count(key, default):
        v = doc.get(key, default)
        return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else default

    nodes = max(1, count("nodes", 1))
    save = doc.get("save")  # the same on every node for one save (train.py: the launch's id and the step)
    return {"node_rank": min(count("node_rank", 0), nodes - 1), "nodes": nodes, "restored": doc.get("restored") is True,
            "save": save if isinstance(save, str) and save else None}  # fmt: skip


def local_files(root: str) -> list[tuple[str, str]]:
    """(relative path, full path) of every file under a local step folder but COMPLETE, sorted."""
    files = []
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel != "COMPLETE":
                files.append((rel, full))
    return sorted(files)


def upload_part(store: ObjectStore, prefix: str, ckpt_dir: str, step: int) -> dict:
    """This node's files of `step` under step-N/node-R/ (in parallel, each verified by the store), then its
    PART.json. Returns the part: {"step", "node", "nodes", "files": [{"path", "size", "checksum"}]}."""
    t0 = time.time()
    who = step_part(ckpt_dir, step)
    node = who["node_rank"]
    files = local_files(os.path.join(ckpt_dir, step_name(step)))
    log("upload_start", step=step, node=node, nodes=who["nodes"], files=len(files))

    def one(rel, full):
        st = os.stat(full)
        checksum = store.put_file(_key(prefix, step_name(step), node_dir(node), rel), full)
        # mtime_ns: which save these bytes are (same_bytes): a later run saving this step again writes new files
        return {"path": rel, "size": st.st_size, "checksum": checksum, "mtime_ns": st.st_mtime_ns}

    # files in parallel (each large one also uploads its parts in parallel), the largest first: node 0's part holds
    # the whole 16-bit model in one file under ZeRO-1/2, the last to finish when it starts last (the scale sim)
    files.sort(key=lambda rf: -os.path.getsize(rf[1]))
    entries = run_parallel([(lambda r=rel, f=full: one(r, f)) for rel, full in files], store.concurrency)
    part = {"step": step, "node": node, "nodes": who["nodes"], "files": entries, "created": time.time(),
            "host": socket.gethostname(), **({"save": who["save"]} if who["save"] else {})}  # fmt: skip
    store.put_bytes(_key(prefix, step_name(step), node_dir(node), PART_FILE), json.dumps(part, indent=1).encode())
    total = sum(e["size"] for e in entries)
    log("part_durable", step=step, node=node, bytes=total, seconds=round(time.time() - t0, 3))
    return part


@contextlib.contextmanager
def upload_lock(ckpt_dir: str, step: int):
    """One upload of a step's part at a time on this node: the agent's watch loop and the boot script's `sync`
    both upload the newest step, and without this both sent the same part at once (issue 29 #8). The second
    waits here, then finds the part durable (part_in_bucket) and sends nothing. The lock is the step folder's own
    (flock on a directory): no lock file to clean up, and the kernel releases it if the holder dies."""
    fd = os.open(os.path.join(ckpt_dir, step_name(step)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def ensure_part(store: ObjectStore, prefix: str, ckpt_dir: str, step: int) -> bool:
    """This node's part of `step` durable in the bucket: uploaded unless PART.json already lists these very files.
    True when this call uploaded it."""
    with upload_lock(ckpt_dir, step):
        node = step_part(ckpt_dir, step)["node_rank"]
        if part_in_bucket(store, prefix, ckpt_dir, step, node):
            return False
        # Another save's PART.json of this step (a run whose commit never came) goes first: while these files go
        # up, node 0 must not find it and commit it beside this save's other parts (issue 29 #1).
        store.delete(_key(prefix, step_name(step), node_dir(node), PART_FILE))
        upload_part(store, prefix, ckpt_dir, step)
        return True


def part_in_bucket(store: ObjectStore, prefix: str, ckpt_dir: str, step: int, node: int) -> bool:
    """This node's part of `step` is durable already: its PART.json verifies and lists exactly the local files,
    these very files (size and mtime: a retried `sync`, the boot script's sync after the agent's). A part another
    run uploaded for the same step, whose commit never came, has the names and sizes but not the mtimes: it is
    uploaded again, never mixed into a commit of this run's other parts (issue 29 #1)."""
    listing = store.list(_key(prefix, step_name(step), node_dir(node), ""))
    part = read_part(store, prefix, step, node, listing)
    if part is None:
        return False
    local = {rel: _size_mtime(full) for rel, full in local_files(os.path.join(ckpt_dir, step_name(step)))}
    return local == {e["path"]: (e["size"], e.get("mtime_ns")) for e in part["files"]}


def _size_mtime(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def same_bytes(path: str, entry: dict) -> bool:
    """The local file holds a manifest entry's bytes: the file that was uploaded, or restored from it (size and
    mtime_ns the entry's), else its checksum computed here. Size alone would take another run's save of the same
    step, with the same names and sizes, for the committed one (issue 29 #1)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_size != entry["size"]:
        return False
    if entry.get("mtime_ns") == st.st_mtime_ns:
        return True
    token = entry_checksum(entry)
    if token is None:
        return False
    running = Checksum(token.partition(":")[0])
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            running.update(chunk)
    return running.token() == token


def read_part(store: ObjectStore, prefix: str, step: int, node: int, listing: dict[str, int],
              save: str | None = None) -> dict | None:  # fmt: skip
    """Node `node`'s PART.json for `step` if it is there, well formed, of save `save` (when given), and every file
    it lists is in the bucket with its size; else None."""
    data = store.get_bytes(_key(prefix, step_name(step), node_dir(node), PART_FILE))
    if not data:
        return None
    try:
        part = json.loads(data)
    except ValueError:
        return None
    problem = manifest_problem(part)
    if problem is None and (part.get("step"), part.get("node")) != (step, node):
        problem = "names another step or node"
    if problem is not None:
        log("part_malformed", step=step, node=node, problem=problem)
        return None
    if save is not None and part.get("save") != save:
        return None  # another save of this step (an earlier run's, whose commit never came): not this one's part
    for e in part["files"]:
        if listing.get(_key(prefix, step_name(step), node_dir(node), e["path"])) != e["size"]:
            return None
    return part


def commit(store: ObjectStore, prefix: str, step: int, nodes: int, keep_last: int = 0,
           save: str | None = None) -> dict | None:  # fmt: skip
    """Node rank 0: if every node's part of `step` from save `save` (node 0's own; None: a trainer that names no
    save) is durable, write MANIFEST.json, then LATEST (only forward), then prune. Returns the manifest, or None
    while a part is missing (nothing written)."""
    listing = store.list(_key(prefix, step_name(step), ""))
    parts = []
    for node in range(nodes):
        part = read_part(store, prefix, step, node, listing, save)
        if part is None:
            return None
        parts.append({"node": node, "files": part["files"]})
    if not stored_checksums_agree(store, prefix, step, parts):
        return None
    manifest = {"step": step, "nodes": nodes, "parts": parts, "created": time.time(), "host": socket.gethostname()}
    store.put_bytes(_key(prefix, step_name(step), "MANIFEST.json"), json.dumps(manifest, indent=1).encode())
    latest = advance_latest(store, prefix, step)
    total = sum(e["size"] for p in parts for e in p["files"])
    log("durable", step=step, latest=latest, nodes=nodes, bytes=total)
    if keep_last and keep_last > 0:
        try:
            prune(store, prefix, keep_last, latest)
        except Exception as e:  # noqa: BLE001
            log("prune_failed", error=str(e)[:300])
    return manifest


def stored_checksums_agree(store: ObjectStore, prefix: str, step: int, parts: list[dict]) -> bool:
    """Every file's checksum as the store itself keeps it (not as the node's PART.json says) is the one the
    manifest will carry: a part whose objects were replaced after its node declared them (another node writing
    over them, a node's bug) is not committed. Where the store keeps no checksum (an Azure blob built from
    blocks) the node's own token stands; restore checks every download against it either way."""
    objects = [(p["node"], e) for p in parts for e in p["files"]]

    def check(node, entry):
        stored = store.stored_checksum(object_key(prefix, step, node, entry["path"]))
        return None if stored is None or stored == entry_checksum(entry) else (node, entry["path"], stored)

    wrong = [w for w in run_parallel([(lambda n=n, e=e: check(n, e)) for n, e in objects], store.concurrency) if w]
    for node, path, stored in wrong[:5]:
        log("part_checksum_mismatch", step=step, node=node, path=path, stored=stored)
    return not wrong


def upload_step(
    store: ObjectStore, prefix: str, ckpt_dir: str, step: int, keep_last: int = 0, commit_wait_s: float = 0.0
) -> dict | None:
    """Upload this node's part of `step`; on the node that saved as rank 0, also commit it, waiting up to
    `commit_wait_s` for the other nodes' parts; every other node waits as long for that commit. Returns the step's
    manifest once committed, else None. A part already durable in the bucket (same files) is not uploaded again. Local steps older than the newest `keep_last`
    are then removed from disk."""
    who = step_part(ckpt_dir, step)
    if who["restored"]:
        log("sync_skip", step=step, reason="restored from the bucket, already committed there")
        return None
    ensure_part(store, prefix, ckpt_dir, step)
    until = time.time() + commit_wait_s
    while True:
        if who["node_rank"] == 0:
            result = commit(store, prefix, step, who["nodes"], keep_last, who["save"])
        else:
            # Wait for node 0's commit too: a node that restores before it takes the previous step and deletes
            # its own newer one, while node 0 resumes from this step (issue 29 #8).
            result = committed_manifest(store, prefix, step)
        if result is not None or time.time() >= until:
            break
        time.sleep(0.2)
    if result is None:
        log("commit_waiting", step=step, nodes=who["nodes"], reason="a node's part is not durable yet")
    prune_local(ckpt_dir, keep_last)
    return result


def committed_manifest(store: ObjectStore, prefix: str, step: int) -> dict | None:
    """`step`'s manifest once node 0 has committed it (MANIFEST.json there and verifying, LATEST at or past it)."""
    latest = read_latest(store, prefix)
    if latest is None or latest < step:
        return None
    return verify_manifest(store, prefix, step)


def prune_local(ckpt_dir: str, keep_last: int) -> list[int]:
    """Remove local complete steps older than the newest `keep_last` (the newest always stays): at ~180 GB a
    checkpoint, a node's disk would otherwise fill within hours."""
    if not keep_last or keep_last < 1:
        return []
    doomed = complete_steps(ckpt_dir)[:-keep_last]
    for step in doomed:
        root = os.path.join(ckpt_dir, step_name(step))
        # COMPLETE first, so a half-removed folder is never taken for a checkpoint
        try:
            os.remove(os.path.join(root, "COMPLETE"))
        except OSError:
            pass
        shutil.rmtree(root, ignore_errors=True)
    if doomed:
        log("pruned_local", steps=doomed)
    return doomed


def bucket_steps(listing: dict[str, int], prefix: str) -> dict[int, dict[str, int]]:
    """{step: {relative path: size}} from a listing of the prefix."""
    base = _key(prefix, "")
    out: dict[int, dict[str, int]] = {}
    for k, size in listing.items():
        if not k.startswith(base):
            continue
        head, _, rest = k[len(base) :].partition("/")
        m = STEP_RE.match(head)
        if m and rest:
            out.setdefault(int(m.group(1)), {})[rest] = size
    return out


def prune(store: ObjectStore, prefix: str, keep_last: int, latest: int) -> list[int]:
    """Delete steps older than the newest `keep_last` complete ones at or below LATEST; never LATEST's."""
    steps = bucket_steps(store.list(_key(prefix, "")), prefix)
    complete = sorted((s for s, f in steps.items() if "MANIFEST.json" in f and s <= latest), reverse=True)
    keep = set(complete[:keep_last]) | {latest}
    oldest_kept = min(keep)
    doomed = [s for s in steps if s not in keep and s < oldest_kept]
    for s in sorted(doomed):
        # manifest first, so a half-deleted step is never mistaken for a complete one
        names = sorted(steps[s], key=lambda n: n != "MANIFEST.json")
        for n in names:
            store.delete(_key(prefix, step_name(s), n))
    if doomed:
        log("pruned", steps=sorted(doomed), kept=sorted(keep))
    return doomed


# A checksum token: "<algorithm>:<value>", as the object store computed and checked it (stores.py).
CHECKSUM_RE = re.compile(r"(sha256:[0-9a-f]{64}|crc32c:[A-Za-z0-9+/]{6}==|crc64nvme:[A-Za-z0-9+/]{11}=|md5:[A-Za-z0-9+/]{22}==)")


def entry_checksum(entry: dict) -> str | None:
    """The entry's checksum token; manifests written before tokens carry a bare "sha256"."""
    if "checksum" in entry:
        return entry["checksum"] if isinstance(entry["checksum"], str) else None
    sha = entry.get("sha256")
    return "sha256:" + sha if isinstance(sha, str) else None


def safe_relative_path(path) -> bool:
    """A manifest path restore may write: relative, '/'-separated, no '..', '.', empty parts, backslashes or
    control characters. Anything else could place a file outside the destination (as root, at boot)."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path:
        return False
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def files_problem(files) -> str | None:
    """Why a manifest's list of files cannot be trusted, or None: entries with a safe relative path, a
    non-negative integer size and a checksum token, each path once."""
    if not isinstance(files, list):
        return "not an object with a list of files"
    seen = set()
    for e in files:
        if not isinstance(e, dict):
            return "an entry is not an object"
        path, size, checksum = e.get("path"), e.get("size"), entry_checksum(e)
        if not safe_relative_path(path):
            return f"unsafe path {str(path)[:80]!r}"
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            return f"bad size for {path!r}"
        if checksum is None or not CHECKSUM_RE.fullmatch(checksum):
            return f"bad checksum for {path!r}"
        if path in seen:
            return f"{path!r} listed twice"
        seen.add(path)
    return file_holding_another(seen)


def file_holding_another(paths: set[str]) -> str | None:
    """A path that is also the folder of another (`a` and `a/b`): no step folder can hold both, and restoring one
    would fail on the other instead of falling back to an older step."""
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in paths:
                return f"{'/'.join(parts[:i])!r} is a file and the folder of {path!r}"
    return None


def manifest_problem(manifest) -> str | None:
    """Why a parsed MANIFEST.json (or PART.json) cannot be trusted, or None. A manifest is an object with
    either "files" (one node's part, or a checkpoint from before parts) or "nodes" and "parts", one per node
    rank in order, each with its "files"."""
    if not isinstance(manifest, dict):
        return "not an object with a list of files"
    if "parts" not in manifest:
        return files_problem(manifest.get("files"))
    nodes, parts = manifest.get("nodes"), manifest.get("parts")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        return "bad node count"
    if not isinstance(parts, list) or len(parts) != nodes:
        return "not one part per node"
    for node, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("node") != node:
            return f"part {node} is not node {node}'s"
        problem = files_problem(part.get("files"))
        if problem is not None:
            return f"node {node}: {problem}"
    # A node's step folder holds its own part and files of the others (needed_files): one tree for all of them.
    return file_holding_another({e["path"] for part in parts for e in part["files"]})


def manifest_objects(manifest: dict) -> list[tuple[int | None, dict]]:
    """(node, entry) for every file of a manifest; node None for a checkpoint from before parts."""
    if "parts" not in manifest:
        return [(None, e) for e in manifest["files"]]
    return [(p["node"], e) for p in manifest["parts"] for e in p["files"]]


def object_key(prefix: str, step: int, node: int | None, path: str) -> str:
    if node is None:
        return _key(prefix, step_name(step), path)
    return _key(prefix, step_name(step), node_dir(node), path)


def verify_manifest(store: ObjectStore, prefix: str, step: int, listing: dict | None = None) -> dict | None:
    data = store.get_bytes(_key(prefix, step_name(step), "MANIFEST.json"))
    if not data:
        return None
    try:
        manifest = json.loads(data)
    except ValueError:
        return None
    problem = manifest_problem(manifest)
    if problem is not None:
        log("manifest_malformed", step=step, problem=problem)
        return None
    if listing is None:
        listing = store.list(_key(prefix, step_name(step), ""))
    for node, e in manifest_objects(manifest):
        if listing.get(object_key(prefix, step, node, e["path"])) != e["size"]:
            log("manifest_mismatch", step=step, node=node, path=e["path"])
            return None
    return manifest


def _stage_layers(objects: list[tuple[int | None, dict]], node_rank: int) -> set[str] | None:
    """The layer indices this node's ranks load, or None when the checkpoint does not say (no pipeline layer files,
    or no ZeRO shards naming model-parallel ranks): then every layer file is fetched, as before."""
    mps_of: dict[int | None, set[str]] = {}  # node -> the model-parallel ranks of its shards
    writers: dict[int | None, set[str]] = {}  # node -> the model-parallel ranks it wrote data-parallel rank 0 of
    layers_of: dict[int | None, set[str]] = {}
    for n, e in objects:
        if m := SHARD_MP_RE.search(e["path"]):
            mps_of.setdefault(n, set()).add(m.group(4))
            if m.group(3) == "0":
                writers.setdefault(n, set()).add(m.group(4))
        elif m := LAYER_RE.search(e["path"]):
            layers_of.setdefault(n, set()).add(m.group(2))
    own = mps_of.get(node_rank)
    if not layers_of or not own:
        return None
    return {idx for n, layers in layers_of.items() if writers.get(n, set()) & own for idx in layers}


def needed_files(manifest: dict, node_rank: int) -> list[tuple[int | None, dict]]:
    """What node `node_rank` must have locally to resume: (node, entry), each local path once."""
    objects = manifest_objects(manifest)
    own = [(n, e) for n, e in objects if n is None or n == node_rank]
    have = {e["path"] for _, e in own}
    layers = _stage_layers(objects, node_rank)

    def loaded_here(path: str) -> bool:
        if ZERO_SHARD_RE.search(path):
            return False
        layer = LAYER_RE.search(path)
        return layer is None or layers is None or layer.group(2) in layers

    shared = [(n, e) for n, e in objects if n not in (None, node_rank) and loaded_here(e["path"])]
    out = list(own)
    for n, e in shared:
        if e["path"] not in have:
            have.add(e["path"])
            out.append((n, e))
    return [(n, e) for n, e in out if e["path"] != "COMPLETE"]


def _local_size(final: str, rel: str) -> int | None:
    """The size of a regular file (not a link) at `rel` in a local step folder, or None."""
    path = os.path.join(final, *rel.split("/"))
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    return os.path.getsize(path)


def _holds(final: str, entry: dict) -> bool:
    """A regular file (not a link) of a local step folder holds the entry's bytes (same_bytes)."""
    rel = entry["path"]
    return _local_size(final, rel) is not None and same_bytes(os.path.join(final, *rel.split("/")), entry)


def _local_copy(final: str, rel: str, out: str) -> bool:
    """Reuse a file this node already has for the same step (its own part, or an earlier restore), one the
    caller found holds the entry's bytes in a folder marked COMPLETE: linked into the temp folder."""
    try:
        os.link(os.path.join(final, *rel.split("/")), out)
        return True
    except OSError:
        return False


class NodeCountChanged(Exception):
    """The newest committed checkpoint was saved by another node count, and this job cannot convert it."""

    def __init__(self, step: int, saved_by: int, nodes: int):
        self.step, self.saved_by, self.nodes = step, saved_by, nodes
        super().__init__(
            f"the newest checkpoint, step {step}, was saved by {saved_by} node(s) and this job has {nodes}: resuming "
            f"would throw that training away. Deploy the stack with {saved_by} node(s) again, or set "
            f"checkpoint.elastic (min_nodes at most {nodes}) so the job converts the checkpoint to {nodes} node(s)"
        )


def restore(
    store: ObjectStore, prefix: str, dest: str, node_rank: int = 0, nodes: int | None = None, resize: bool = False
) -> int | None:
    """Make dest/step-N hold what node `node_rank` of `nodes` needs to resume from the newest verified step
    (COMPLETE written last): its own part and the files every rank loads, fetched in parallel and verified,
    reusing what it already has. None if nothing can be restored.

    A step saved by another node count cannot be loaded part by part: without `resize` that is NodeCountChanged
    (never a silent fall back to an older step); with it (elastic recovery) every part is fetched, for the node to convert the whole checkpoint to DeepSpeed's
    universal format and load it at its new data-parallel size (templates/node/trainfleet-resize.py)."""
    for name in os.listdir(dest):
        # What a killed process left (restore runs before the trainer and the conversion start, never beside
        # them): a restore's temp folder, the trainer's save in progress (train.py `.tmp/step-N`), a conversion's
        # work folder (trainfleet-resize.py `.convert-<step>-<pid>`). Each can hold a whole part (issue 29 #7).
        if name.startswith((".restore-step-", ".convert-")) or name == ".tmp":
            shutil.rmtree(os.path.join(dest, name), ignore_errors=True)
            log("stale_removed", path=name)
    listing = store.list(_key(prefix, ""))
    candidates = sorted(bucket_steps(listing, prefix), reverse=True)
    latest = read_latest(store, prefix)
    if latest is not None:
        candidates = [latest] + [s for s in candidates if s < latest]
    for step in candidates:
        manifest = verify_manifest(store, prefix, step, listing)
        if manifest is None:
            log("restore_skip", step=step, reason="manifest missing or does not verify")
            continue
        saved_by = manifest.get("nodes", 1)
        other_count = "parts" in manifest and (node_rank >= saved_by or (nodes is not None and nodes != saved_by))
        if other_count and not resize:
            # Skipping it would resume an older step, or step 0 (every step was saved at that count): weeks of
            # training silently lost (issue 29 #2). The job stops instead and says why.
            raise NodeCountChanged(step, saved_by, nodes or node_rank + 1)
        if _restore_step(store, prefix, dest, step, manifest, node_rank, saved_by, whole=other_count):
            return step
    return None


def _restore_step(store, prefix, dest, step, manifest, node_rank, nodes, whole=False) -> bool:
    final = os.path.join(dest, step_name(step))
    needed = manifest_objects(manifest) if whole else needed_files(manifest, node_rank)
    needed = [(n, e) for n, e in needed if e["path"] != "COMPLETE"]
    marker = local_marker(final)
    complete = marker is not None  # only a complete folder's files are reused
    if whole and complete and marker.get("universal"):  # converted here already: loadable at any size
        log("restore_present", step=step, universal=True)
        return True
    # Each local file checked once (a check may hash a whole file), for both the question below and the reuse.
    held = [complete and _holds(final, e) for _, e in needed]
    if complete and all(held):
        log("restore_present", step=step)
        return True
    tmp = os.path.join(dest, f".restore-{step_name(step)}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    fetch = []
    for (node, e), reuse in zip(needed, held, strict=True):
        out = os.path.join(tmp, *e["path"].split("/"))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        # Checked again where it lands, once its folders exist: never outside the step's own temp folder
        # (verify_manifest checked the text; this checks the filesystem, links included).
        if not os.path.realpath(out).startswith(os.path.realpath(tmp) + os.sep):
            log("restore_skip", step=step, reason="path leaves the destination", path=e["path"][:80])
            shutil.rmtree(tmp, ignore_errors=True)
            return False
        if not (reuse and _local_copy(final, e["path"], out)):
            fetch.append((object_key(prefix, step, node, e["path"]), out, e))

    def one(key, out, e):
        if not store.download(key, out, entry_checksum(e)):
            return e["path"]
        if isinstance(e.get("mtime_ns"), int):  # these bytes are the entry's: same_bytes knows them again
            os.utime(out, ns=(os.stat(out).st_atime_ns, e["mtime_ns"]))
        return None

    t0 = time.time()
    bad = [p for p in run_parallel([(lambda k=k, o=o, e=e: one(k, o, e)) for k, o, e in fetch], store.concurrency) if p]
    if bad:
        log("restore_skip", step=step, reason="checksum mismatch", path=bad[0])
        shutil.rmtree(tmp, ignore_errors=True)
        return False
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    # `nodes`: the node count that saved the step; `whole`: every part is here (to convert to another count).
    marker = {"step": step, "node_rank": node_rank, "nodes": nodes, "restored": True, "whole": whole}
    with open(os.path.join(final, "COMPLETE"), "w") as f:
        json.dump(marker, f)
    fetched = sum(e["size"] for _, _, e in fetch)
    log("restored", step=step, node=node_rank, files=len(needed), fetched_files=len(fetch), fetched_bytes=fetched,
        seconds=round(time.time() - t0, 3), whole=whole, saved_by=nodes)  # fmt: skip
    return True
