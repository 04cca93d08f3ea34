"""Sparse checkpoint files, and which bytes each one stands for.

A simulated file has its real size and no data (a sparse file: `truncate`). What it would hold is its identity:
which run saved it, for which step, in which save attempt, on which node, under which name. The registry maps
each file (by inode, so hard links and renames keep it) to its identity; the store keeps the identity of what
it stored, and a download registers the stored identity for the new file. The invariants compare identities.

The checksum token of a file is a real checksum (the cloud's algorithm, stores.Checksum) of a short canonical
text of its identity, as if that text were the file's content. So the agent's checks work unchanged: a manifest
entry's token matches a download of the same save and no other, and `checkpoints.same_bytes`, which hashes a
local file whose mtime is not the entry's, reads that canonical text through `open` (see `open_for_agent`)
instead of hundreds of GB of holes.
"""

from __future__ import annotations

import builtins
import io
import os
from collections import Counter
from dataclasses import dataclass

from templates.agent.trainfleet_agent.stores import Checksum


@dataclass(frozen=True, slots=True)
class Identity:
    run: str
    step: int
    attempt: int  # the how-many-th save of this step (across runs)
    node: int  # the node rank that saved it
    path: str

    @property
    def save(self) -> tuple[str, int, int]:
        """One save of one step by the whole job."""
        return self.run, self.step, self.attempt

    def content(self) -> bytes:
        return f"{self.run}/step-{self.step}/attempt-{self.attempt}/node-{self.node}/{self.path}".encode()


class Contents:
    def __init__(self, algorithm: str):
        self.algorithm = algorithm
        self._by_inode: dict[tuple[int, int], Identity] = {}
        self._by_token: dict[str, Identity] = {}
        self._attempts: Counter = Counter()

    def new_save(self, run: str, step: int) -> int:
        """The attempt number of a new save of `step` (1 for the first, 2 when it is saved again...)."""
        self._attempts[step] += 1
        return self._attempts[step]

    def create(self, path: str, size: int, identity: Identity) -> None:
        """A sparse file of `size` bytes at `path` that holds `identity`'s bytes."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with builtins.open(path, "wb") as f:
            f.truncate(size)
        self.register(path, identity)

    def register(self, path: str, identity: Identity) -> None:
        st = os.stat(path)
        self._by_inode[(st.st_dev, st.st_ino)] = identity

    def identity(self, path: str) -> Identity | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        return self._by_inode.get((st.st_dev, st.st_ino))

    def token(self, identity: Identity) -> str:
        running = Checksum(self.algorithm)
        running.update(identity.content())
        token = running.token()
        other = self._by_token.setdefault(token, identity)
        if other != identity:  # a 4-byte CRC32C can collide: then the invariants could not tell saves apart
            raise RuntimeError(f"checksum collision between {other} and {identity}")
        return token

    def of_token(self, token: str) -> Identity | None:
        return self._by_token.get(token)

    def open_for_agent(self, path, mode="r", *args, **kwargs):
        """`open` as checkpoints.py sees it: a data file of the simulation read in binary reads as its identity's
        canonical text (the "content" its checksum token is of); every other file opens as usual. A COMPLETE
        marker is never a data file (its inode may be one a deleted data file had)."""
        if "r" in mode and "b" in mode and "+" not in mode and os.path.basename(str(path)) != "COMPLETE":
            identity = self.identity(path)
            if identity is not None:
                return io.BytesIO(identity.content())
        return builtins.open(path, mode, *args, **kwargs)


def disk_bytes(root: str) -> int:
    """Bytes the files under `root` would occupy were they not sparse: apparent sizes, each inode once (a restore
    hard-links the files it reuses)."""
    seen, total = set(), 0
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            try:
                st = os.lstat(os.path.join(dirpath, n))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total
