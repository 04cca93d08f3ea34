"""What published spot traces say about getting N nodes and losing them together.

A trace (SkyPilot's spot-traces, the data of "Can't Be Late", NSDI '24) is the number of instances held at each
tick, `gap_s` apart: an availability trace asks for up to N instances every tick and counts what it got; a
preemption trace keeps N running, relaunches what was taken, and counts what runs. From them:

  acquire_wait_s(counts, gap_s, n)   the mean time from a tick until the trace first holds >= n: what a job that
                                     asks for n nodes at a random moment waits (ticks with no later success are
                                     left out: the trace ended before telling)
  at_once_share(counts, n)           the share of those ticks that hold >= n themselves: a first try's odds
  held_share_while_waiting(counts, n) the mean share of the n nodes held while waiting for all n: what bills
  losses_from_full(counts)           each drop from the trace's full count: how many nodes one tick took
  recovery_waits_s(counts, gap_s, n) after a drop below n, the time until >= n again

cli/planner/capacity.py states the constants these give on the vendored traces
(tests/fixtures/skypilot_spot_traces/PROVENANCE.md); tests/test_capacity_traces.py recomputes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Trace:
    name: str  # the trace's path under the vendored folder
    kind: str  # "availability" or "preemption"
    gap_s: float
    counts: tuple[int, ...]

    @property
    def full(self) -> int:
        return max(self.counts)

    @property
    def days(self) -> float:
        return len(self.counts) * self.gap_s / 86400


def load_trace(path: Path, root: Path) -> Trace:
    doc = json.loads(path.read_text())
    name = path.relative_to(root).as_posix()
    return Trace(name, name.split("/", 1)[0], float(doc["metadata"]["gap_seconds"]), tuple(doc["data"]))


def load_traces(root: Path) -> list[Trace]:
    return [load_trace(p, root) for p in sorted(root.glob("*/*-node/*/*.json"))]


def _waiting_ticks(counts: tuple[int, ...], n: int) -> list[tuple[int, int]]:
    """(tick, ticks until the trace next holds >= n) for every tick that has such a later tick."""
    out, next_ok = [], None
    for i in range(len(counts) - 1, -1, -1):
        if counts[i] >= n:
            next_ok = i
        if next_ok is not None:
            out.append((i, next_ok - i))
    return out


def acquire_wait_s(counts: tuple[int, ...], gap_s: float, n: int) -> float:
    ticks = _waiting_ticks(counts, n)
    return sum(wait for _, wait in ticks) * gap_s / len(ticks)


def at_once_share(counts: tuple[int, ...], n: int) -> float:
    ticks = _waiting_ticks(counts, n)
    return sum(wait == 0 for _, wait in ticks) / len(ticks)


def held_share_while_waiting(counts: tuple[int, ...], n: int) -> float:
    waiting = [counts[i] / n for i, wait in _waiting_ticks(counts, n) if wait > 0]
    return sum(waiting) / len(waiting) if waiting else 0.0


def losses_from_full(counts: tuple[int, ...]) -> list[int]:
    full = max(counts)
    return [a - b for a, b in zip(counts, counts[1:], strict=False) if a == full and b < a]


def recovery_waits_s(counts: tuple[int, ...], gap_s: float, n: int) -> list[float]:
    """After each fall from >= n to below n, the seconds until >= n again (a fall never recovered is left out)."""
    waits, i = [], 1
    while i < len(counts):
        if counts[i - 1] >= n > counts[i]:
            j = i
            while j < len(counts) and counts[j] < n:
                j += 1
            if j < len(counts):
                waits.append((j - i) * gap_s)
            i = j
        else:
            i += 1
    return waits
