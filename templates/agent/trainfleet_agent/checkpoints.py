"""Checkpoint commit and restore: files, MANIFEST.json, LATEST, pruning, manifest checks."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time

from .common import STEP_RE, log, step_name
from .http_client import run_parallel
from .stores import ObjectStore


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
    data = store.get_bytes(_key(prefix, "LATEST"))
    if not data:
        return None
    # Not UTF-8 (e.g. UTF-16 from Windows PowerShell's `>`): unreadable, like a missing LATEST, so
    # restore falls back to the newest verified step and the next commit rewrites it.
    m = STEP_RE.match(data.decode(errors="replace").strip())
    return int(m.group(1)) if m else None


def upload_step(store: ObjectStore, prefix: str, ckpt_dir: str, step: int, keep_last: int = 0) -> dict:
    """Files, then MANIFEST.json, then LATEST (only forward), then prune. Returns the manifest."""
    t0 = time.time()
    root = os.path.join(ckpt_dir, step_name(step))
    files = []
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            full = os.path.join(dirpath, n)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            files.append((rel, full))
    files.sort()
    log("upload_start", step=step, files=len(files))

    def one(rel, full):
        size = os.path.getsize(full)
        checksum = store.put_file(_key(prefix, step_name(step), rel), full)
        return {"path": rel, "size": size, "checksum": checksum}

    # files in parallel (each large one also uploads its parts in parallel)
    entries = run_parallel([(lambda r=rel, f=full: one(r, f)) for rel, full in files], store.concurrency)
    manifest = {"step": step, "files": entries, "created": time.time(), "host": socket.gethostname()}
    store.put_bytes(_key(prefix, step_name(step), "MANIFEST.json"), json.dumps(manifest, indent=1).encode())
    current = read_latest(store, prefix)
    if current is None or step >= current:
        store.put_bytes(_key(prefix, "LATEST"), step_name(step).encode())
        latest = step
    else:
        latest = current
    total = sum(e["size"] for e in entries)
    log("durable", step=step, latest=latest, bytes=total, seconds=round(time.time() - t0, 3))
    if keep_last and keep_last > 0:
        try:
            prune(store, prefix, keep_last, latest)
        except Exception as e:  # noqa: BLE001
            log("prune_failed", error=str(e)[:300])
    return manifest


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


def manifest_problem(manifest) -> str | None:
    """Why a parsed MANIFEST.json cannot be trusted, or None: a dict whose "files" is a list of entries with a
    safe relative path, a non-negative integer size and a sha256, each path once."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        return "not an object with a list of files"
    seen = set()
    for e in manifest["files"]:
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
    return None


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
    for e in manifest.get("files", []):
        if listing.get(_key(prefix, step_name(step), e["path"])) != e["size"]:
            log("manifest_mismatch", step=step, path=e["path"])
            return None
    return manifest


def restore(store: ObjectStore, prefix: str, dest: str) -> int | None:
    """Restore the newest verified checkpoint into dest/step-N (COMPLETE written last). None if nothing."""
    for name in os.listdir(dest):
        if name.startswith(".restore-step-"):  # left by a restore that was killed
            shutil.rmtree(os.path.join(dest, name), ignore_errors=True)
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
        final = os.path.join(dest, step_name(step))
        if os.path.isfile(os.path.join(final, "COMPLETE")):
            log("restore_present", step=step)
            return step
        tmp = os.path.join(dest, f".restore-{step_name(step)}-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        ok = True
        for e in manifest["files"]:
            if e["path"] == "COMPLETE":
                continue
            out = os.path.join(tmp, *e["path"].split("/"))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            # Checked again where it lands, once its folders exist: never outside the step's own temp folder
            # (verify_manifest checked the text; this checks the filesystem, links included).
            if not os.path.realpath(out).startswith(os.path.realpath(tmp) + os.sep):
                log("restore_skip", step=step, reason="path leaves the destination", path=e["path"][:80])
                ok = False
                break
            if not store.download(_key(prefix, step_name(step), e["path"]), out, entry_checksum(e)):
                log("restore_skip", step=step, reason="checksum mismatch", path=e["path"])
                ok = False
                break
        if not ok:
            shutil.rmtree(tmp, ignore_errors=True)
            continue
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        open(os.path.join(final, "COMPLETE"), "w").close()
        log("restored", step=step, files=len(manifest["files"]))
        return step
    return None


