"""The training job across its nodes, as templates/train.py runs it, with DeepSpeed's files as sparse files.

Every step takes `step_s`. At each step boundary every rank agrees on the requests (any node's checkpoint or stop
request counts for all: train.py `Requests.agreed`). A save (train.py `save`): each node writes its own ranks'
files (infra/checkpoint_layout.py: DeepSpeed 0.19's names and sizes) into `.tmp/step-N`, taking its part's bytes
/ LOCAL_SAVE_GBPS; a barrier waits for the slowest node; then every node renames the folder to step-N and writes
COMPLETE ({"step", "node_rank", "nodes", "save"}) last, and the checkpoint requests are cleared. A stop exits after its
checkpoint. A job given its last step saves there and ends (train.py's final checkpoint, then DONE). The job is
collective: once any of its nodes is lost it crashes at the next step boundary or save barrier, writing nothing
more.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

from infra.checkpoint_io import LOCAL_SAVE_GBPS
from infra.checkpoint_layout import CheckpointLayout
from templates.agent.trainfleet_agent.common import step_name

from .content import Identity


@dataclass
class Save:
    step: int
    attempt: int
    start: float  # virtual seconds since the scenario began
    end: float
    stop: bool  # the checkpoint before an exit


def save_s(layout: CheckpointLayout) -> float:
    """The trainer's blocking save: the largest part at the local save rate (the barrier waits for it)."""
    return max(layout.saved_bytes) / (LOCAL_SAVE_GBPS * 1e9)


class Job:
    def __init__(self, fleet, layout: CheckpointLayout, run: str, step_s: float, start_step: int = 0,
                 last_step: int | None = None):  # fmt: skip
        self.fleet, self.layout, self.run, self.step_s = fleet, layout, run, step_s
        self.last_step = last_step
        self.done: int | None = None  # the last step, once its checkpoint is saved (train.py writes DONE)
        self.clock, self.contents = fleet.clock, fleet.contents
        self.nodes = layout.nodes
        self.step = start_step
        self.running = False
        self.state = "new"
        self.wants_checkpoint = [False] * self.nodes
        self.wants_stop = [False] * self.nodes
        self.saves: list[Save] = []
        self.parts = [layout.part(n) for n in range(self.nodes)]
        self.task = None

    def start(self) -> None:
        self.running, self.state = True, "training"
        self.task = self.clock.spawn(self._run, f"job:{self.run}", node=None)

    def request(self, rank: int, exit_after: bool) -> None:
        self.wants_checkpoint[rank] = True
        self.wants_stop[rank] = self.wants_stop[rank] or exit_after

    def broken(self) -> bool:
        return any(not self.fleet.nodes[r].alive for r in range(self.nodes))

    def _run(self) -> None:
        try:
            while True:
                self.clock.sleep(self.step_s)
                if self.broken():
                    self.state = "crashed"
                    return
                self.step += 1
                if self.last_step is not None and self.step >= self.last_step:
                    if self._save(False):
                        self.done, self.state = self.step, "done"
                    return
                stop = any(self.wants_stop)
                if any(self.wants_checkpoint) or stop:
                    if not self._save(stop):
                        self.state = "crashed"
                        return
                    self.wants_checkpoint = [False] * self.nodes
                if stop:
                    self.state = "stopped"
                    return
        finally:
            self.running = False

    def _save(self, stop: bool) -> bool:
        step, start = self.step, self.clock.elapsed()
        attempt = self.contents.new_save(self.run, step)
        temps = []
        for rank in range(self.nodes):
            node = self.fleet.nodes[rank]
            tmp = os.path.join(node.ckpt_dir, ".tmp", step_name(step))
            shutil.rmtree(tmp, ignore_errors=True)
            for f in self.parts[rank]:
                identity = Identity(self.run, step, attempt, rank, f.path)
                self.contents.create(os.path.join(tmp, *f.path.split("/")), f.size, identity)
            temps.append(tmp)
            self.fleet.measure(rank)
        self.clock.sleep(save_s(self.layout))
        if self.broken():
            return False
        for rank, tmp in enumerate(temps):
            final = os.path.join(self.fleet.nodes[rank].ckpt_dir, step_name(step))
            shutil.rmtree(final, ignore_errors=True)
            os.replace(tmp, final)
            # "save": the same on every node for one save, as train.py writes it (its launch id and the step)
            marker = {"step": step, "node_rank": rank, "nodes": self.nodes, "run": self.run,
                      "save": f"{self.run}:{step}:{attempt}"}  # fmt: skip
            with open(os.path.join(final, "COMPLETE.tmp"), "w") as f:
                json.dump(marker, f)
            os.replace(os.path.join(final, "COMPLETE.tmp"), os.path.join(final, "COMPLETE"))
        self.saves.append(Save(step, attempt, start, self.clock.elapsed(), stop))
        return True
