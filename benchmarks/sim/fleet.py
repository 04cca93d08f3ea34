"""The nodes: each with its own disk (a folder), its own link to the store, metadata service, agent and trainer
handle; booted, lost and replaced; restored as the boot script restores them.

A node's tasks carry its tag (rank, life): a node loss kills that life's tasks (the VM is gone, and with it its
disk once replaced), a restart of its software on the same VM starts a new life on the same disk.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from templates.agent.trainfleet_agent import checkpoints
from templates.agent.trainfleet_agent.common import STEP_RE, log

from .agent import PREFIX, ScriptedMetadata, SimWatcher, TrainerHandle, agent_on, watch_args
from .clock import Clock
from .content import Contents, disk_bytes
from .shapes import CHECKSUM, StoreShape
from .store import Bucket, NodeStore
from .trainer import Job


@dataclass
class SimNode:
    rank: int
    disk: str
    life: int = 0
    alive: bool = True
    store: NodeStore | None = None
    md: ScriptedMetadata | None = None
    watcher: SimWatcher | None = None
    watch_task: object = None
    peak_disk: int = 0
    disk_now: int = 0  # at the last walk, plus what was downloaded since

    @property
    def tag(self) -> tuple[int, int]:
        return (self.rank, self.life)

    @property
    def ckpt_dir(self) -> str:
        return os.path.join(self.disk, "checkpoints")

    @property
    def run_dir(self) -> str:
        return os.path.join(self.disk, "run")


@dataclass
class Restored:
    rank: int
    step: int | None
    seconds: float
    fetched: int
    errors: list = field(default_factory=list)  # the tries that failed (the boot script retries)
    downloads: list = field(default_factory=list)
    stopped: bool = False  # the node count changed and the job cannot convert: the boot script stopped


class World:
    """One scenario: a clock, a bucket shaped like the cloud's, and the nodes."""

    def __init__(self, cloud: str, shape: StoreShape, workdir: str, keep_last: int, seed: int = 29):
        self.cloud, self.shape, self.workdir, self.keep_last = cloud, shape, workdir, keep_last
        self.clock = Clock()
        self.contents = Contents(CHECKSUM[cloud])
        self.bucket = Bucket(self.clock, shape, self.contents, seed)
        self.stores: dict[str, NodeStore] = {}
        self.lifecycle: list[float] = []  # when node 0 completed the group's lifecycle action (elapsed)
        self.heartbeats: list[float] = []  # when it recorded a heartbeat on it (clock time)
        self.nodes: dict[int, SimNode] = {}
        self.peaks: dict[int, int] = {}  # rank -> the most its disk held, over every VM that had the rank
        self.job: Job | None = None
        self.log = None
        self._disks = 0

    def run(self, fn):
        with agent_on(self.clock, self.contents, self.stores, self.lifecycle, self.heartbeats) as sink:
            self.log = sink
            return self.clock.run(fn)

    # ------------------------------------------------------------------------------------- nodes

    def boot(self, rank: int, fresh: bool = True) -> SimNode:
        """Node `rank` (re)starts: a new VM with an empty disk (`fresh`), or the same VM's software again."""
        old = self.nodes.get(rank)
        if old is not None:
            self.clock.kill(old.tag)  # whatever still ran there
        if fresh or old is None:
            if old is not None:
                shutil.rmtree(old.disk, ignore_errors=True)  # the lost VM's local NVMe
            self._disks += 1
            node = SimNode(rank, os.path.join(self.workdir, f"disk-{self._disks:03d}-rank-{rank}"))
            node.life = self._disks
        else:
            node = SimNode(rank, old.disk, old.life + 1000, peak_disk=old.peak_disk, disk_now=old.disk_now)
        os.makedirs(node.ckpt_dir, exist_ok=True)
        os.makedirs(node.run_dir, exist_ok=True)
        with open(os.path.join(node.run_dir, "node-rank"), "w") as f:
            f.write(f"{rank}\n")  # the boot script's: only rank 0 keeps the periodic cadence
        name = f"node-{rank}-life-{node.life}"
        node.store = NodeStore(self.bucket, rank, on_download=self.downloaded)
        self.stores[name] = node.store
        node.md = ScriptedMetadata(self.cloud, f"vm-{rank}")
        self.nodes[rank] = node
        return node

    def lose(self, rank: int) -> None:
        """The VM is gone: its tasks die where they are (mid-upload included), its trainer with it."""
        node = self.nodes[rank]
        node.alive = False
        self.clock.kill(node.tag)
        log("node_lost", node=rank)

    def start_agent(self, rank: int, interval_minutes: float = 0.0) -> SimWatcher:
        node = self.nodes[rank]
        args = watch_args(self.cloud, f"node-{rank}-life-{node.life}", node.ckpt_dir, node.run_dir, interval_minutes,
                          self.keep_last)  # fmt: skip
        node.watcher = SimWatcher(args, self.clock, node.md, TrainerHandle(self, rank))
        node.watch_task = self.clock.spawn(node.watcher.run, "watch", node=node.tag)
        return node.watcher

    def measure(self, rank: int) -> None:
        """The node's disk now (apparent bytes, each inode once), and its peak."""
        node = self.nodes[rank]
        node.disk_now = disk_bytes(node.ckpt_dir)
        self._peak(node)

    def downloaded(self, rank: int, size: int) -> None:
        """A download landed (a new file): the disk grew by its size (a restore deletes only once all are in)."""
        node = self.nodes[rank]
        node.disk_now += size
        self._peak(node)

    def _peak(self, node: SimNode) -> None:
        node.peak_disk = max(node.peak_disk, node.disk_now)
        self.peaks[node.rank] = max(self.peaks.get(node.rank, 0), node.disk_now)

    def launch(self, layout, run: str, step_s: float, start_step: int = 0, last_step: int | None = None) -> Job:
        self.job = Job(self, layout, run, step_s, start_step, last_step)
        self.job.start()
        return self.job

    # ------------------------------------------------------------------------------------- restore

    def boot_restore(self, rank: int, nodes: int, resize: bool = False, tries: int = 10) -> Restored:
        """What trainfleet-boot.sh's `restore` does on node `rank`: the agent's restore, again 10 s later while it
        fails (`until restore; do ... sleep 10; done`; here `tries` times), then (several nodes) delete local steps
        newer than the restored one (never committed, so not on every node)."""
        node = self.nodes[rank]
        self.measure(rank)
        t0, before = self.clock.now, self.bucket.fetched[rank]
        first = len(self.bucket.downloads)
        errors = []
        stopped = False
        for _ in range(tries):
            try:
                step = checkpoints.restore(node.store, PREFIX, node.ckpt_dir, rank, nodes, resize=resize)
                break
            except checkpoints.NodeCountChanged as e:  # restore exits 6: the boot script stops, deletes nothing
                errors.append(f"NodeCountChanged: {e}"[:300])
                step, stopped = None, True
                log("node_count_changed", node=rank, step=e.step, saved_by=e.saved_by, nodes=e.nodes)
                break
            except Exception as e:  # noqa: BLE001 - the boot script logs "restore failed; retrying"
                errors.append(f"{type(e).__name__}: {e}"[:300])
                log("restore_failed", node=rank, error=errors[-1])
                self.clock.sleep(10)
        else:
            step = None
        if nodes > 1 and len(errors) < tries and not stopped:
            for name in os.listdir(node.ckpt_dir):
                m = STEP_RE.match(name)
                if m and (step is None or int(m.group(1)) > step):
                    shutil.rmtree(os.path.join(node.ckpt_dir, name), ignore_errors=True)
        self.measure(rank)
        mine = [d for d in self.bucket.downloads[first:] if d[0] == rank]
        return Restored(rank, step, self.clock.now - t0, self.bucket.fetched[rank] - before, errors, mine, stopped)

    def restore_all(self, ranks: list[int], nodes: int, resize: bool = False) -> list[Restored]:
        """Every node restores at once (each in its own task, on its own link)."""
        out: dict[int, Restored] = {}
        tasks = []
        for r in ranks:
            tasks.append(self.clock.spawn(lambda r=r: out.__setitem__(r, self.boot_restore(r, nodes, resize)),
                                          "restore", node=self.nodes[r].tag))  # fmt: skip
        for t in tasks:
            self.clock.join(t)
        return [out[r] for r in ranks if r in out]

    def wait_for(self, predicate, timeout_s: float, poll_s: float = 1.0) -> bool:
        until = self.clock.now + timeout_s
        while not predicate():
            if self.clock.now >= until:
                return False
            self.clock.sleep(poll_s)
        return True
