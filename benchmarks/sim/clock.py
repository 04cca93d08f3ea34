"""A virtual clock that runs real threads one at a time, in virtual-time order: a discrete-event scheduler.

The agent is ordinary blocking code (threads, `time.sleep`, `time.time`). Each piece of it runs here as a task:
a real thread that runs only while it holds the baton. A task gives the baton up when it sleeps (or waits for
another task); the clock then jumps to the earliest wake-up and hands the baton to that task. So hours of
virtual time cost only the CPU the code itself uses, the order of events is the same on every run (no real
timing enters), and no lock is ever contended (only one task runs at a time).

The one rule: a task may block only through the clock (sleep, join, run_parallel). A real blocking call (a
contended flock, a socket, `threading.Event.wait`) would stop the whole simulation; the watchdog in `run` then
says which task is stuck.
"""

from __future__ import annotations

import _thread
import heapq
import itertools
import sys
import threading
import time as _real_time
import traceback

EPOCH = 1_800_000_000.0  # virtual time starts at a plausible wall-clock time (2027-01-15): logs and deadlines read well


class NodeKilled(BaseException):
    """Raised inside every task of a lost node. A BaseException, so the agent's `except Exception` handlers (which
    keep a real agent alive through errors) do not swallow the node's death."""


class Deadlock(RuntimeError):
    pass


_INHERIT = object()


class Task:
    """One thread of simulated code. `node` tags it (inherited by the tasks it spawns) so a node loss can kill
    all of that node's tasks at once."""

    def __init__(self, clock: Clock, fn, name: str, node):
        self.clock, self.fn, self.name, self.node = clock, fn, name, node
        self.go = _thread.allocate_lock()
        self.go.acquire()  # released by the clock when it is this task's turn
        self.done = self.killed = False
        self.result = self.error = None
        self.waiters: list[Task] = []
        self.wake = 0  # which heap entry may resume it: older entries are stale
        self.thread = threading.Thread(target=self._main, name=f"sim:{name}", daemon=True)

    def is_alive(self) -> bool:
        return not self.done

    def _main(self) -> None:
        self.go.acquire()
        clock = self.clock
        try:
            if self.killed:
                raise NodeKilled(self.node)
            self.result = self.fn()
        except NodeKilled:
            self.killed = True
        except BaseException as e:  # noqa: BLE001 - kept for whoever joins, and listed in clock.errors
            self.error = e
            clock.errors.append((self.name, "".join(traceback.format_exception(e))))
        finally:
            self.done = True
            clock._live.discard(self)
            for w in self.waiters:
                clock._ready(w)
            self.waiters.clear()
            if self is clock.main:
                clock.kill_all()  # the scenario is over: every agent loop unwinds
            clock._pass()


class Clock:
    def __init__(self, start: float = EPOCH):
        self.start = start
        self.now = start
        self._heap: list = []
        self._seq = itertools.count()
        self.current: Task | None = None
        self.main: Task | None = None
        self._live: set[Task] = set()
        self._idle = _thread.allocate_lock()
        self._idle.acquire()
        self.switches = 0
        self.errors: list[tuple[str, str]] = []

    # ------------------------------------------------------------------------------------- what tasks call

    def time(self) -> float:
        return self.now

    def elapsed(self) -> float:
        return self.now - self.start

    def sleep(self, seconds: float) -> None:
        me = self._me()
        self._ready(me, self.now + max(0.0, float(seconds)))
        self._block(me)

    def spawn(self, fn, name: str = "task", node=_INHERIT) -> Task:
        if node is _INHERIT:
            node = self.current.node if self.current is not None else None
        task = Task(self, fn, name, node)
        self._live.add(task)
        task.thread.start()  # it waits for the baton
        self._ready(task)
        return task

    def join(self, task: Task):
        """Wait for `task`; its result, or its error raised here (like a future's result())."""
        me = self._me()
        while not task.done:
            task.waiters.append(me)
            self._block(me)
        if task.error is not None:
            raise task.error
        return task.result

    def run_parallel(self, fns: list, workers: int) -> list:
        """trainfleet_agent.http_client.run_parallel on the clock: results in order; every call runs, then the
        first error (in order) is raised."""
        if workers <= 1 or len(fns) <= 1:
            return [fn() for fn in fns]
        results, errors = [None] * len(fns), [None] * len(fns)
        todo = iter(range(len(fns)))  # shared by the workers: safe, one task runs at a time

        def worker():
            for i in todo:
                try:
                    results[i] = fns[i]()
                except Exception as e:  # noqa: BLE001 - raised below, in order, like the real one
                    errors[i] = e

        tasks = [self.spawn(worker, f"{self.current.name}/worker") for _ in range(min(workers, len(fns)))]
        for t in tasks:
            self.join(t)
        for e in errors:
            if e is not None:
                raise e
        return results

    def kill(self, node) -> None:
        """A node is lost: each of its tasks raises NodeKilled the next time it runs (woken now to do so)."""
        for t in list(self._live):
            if t.node == node and not t.killed:
                t.killed = True
                if t is not self.current:
                    self._ready(t)

    def kill_all(self) -> None:
        for t in list(self._live):
            if t is not self.main:
                t.killed = True
                if t is not self.current:
                    self._ready(t)

    # ------------------------------------------------------------------------------------- the driver

    def run(self, fn, watchdog_s: float = 120.0):
        """Run `fn` as the main task until it returns (then every other task is killed and unwinds). Called from
        a thread that is not a task. A task stuck in a real blocking call for `watchdog_s` real seconds ends the
        run with its stack."""
        self.main = self.spawn(fn, "main", node=None)
        self._pass()
        seen = -1
        while not self._idle.acquire(timeout=watchdog_s):
            if self.switches == seen:
                raise RuntimeError(f"simulation stuck in a real blocking call:\n{self._stacks()}")
            seen = self.switches
        if not self.main.done:
            stuck = sorted(t.name for t in self._live)
            raise Deadlock(f"no task is due and the main task waits: {stuck[:20]}")
        if self.main.error is not None:
            raise self.main.error
        return self.main.result

    # ------------------------------------------------------------------------------------- the baton

    def _me(self) -> Task:
        me = self.current
        if me is None or me.thread is not threading.current_thread():
            raise RuntimeError("the virtual clock was used outside a simulation task")
        return me

    def _ready(self, task: Task, at: float | None = None) -> None:
        task.wake += 1
        heapq.heappush(self._heap, (self.now if at is None else at, next(self._seq), task.wake, task))

    def _block(self, me: Task) -> None:
        self._pass()
        me.go.acquire()
        if me.killed:
            raise NodeKilled(me.node)

    def _pass(self) -> None:
        """Hand the baton to the task due first (the clock moves to its time); with none due, wake `run`."""
        while self._heap:
            at, _, wake, task = heapq.heappop(self._heap)
            if wake != task.wake or task.done:
                continue  # stale: woken another way since
            self.now = max(self.now, at)
            self.current = task
            self.switches += 1
            task.go.release()
            return
        self.current = None
        self._idle.release()

    def _stacks(self) -> str:
        frames = sys._current_frames()
        cur = self.current
        if cur is None or cur.thread.ident not in frames:
            return "(no current task)"
        return f"task {cur.name}:\n" + "".join(traceback.format_stack(frames[cur.thread.ident]))


class VirtualTime:
    """What the agent modules see as `time` during a run: the clock's time and sleep, the rest of the module as is."""

    def __init__(self, clock: Clock):
        self._clock = clock

    def time(self) -> float:
        return self._clock.now

    def time_ns(self) -> int:
        return int(self._clock.now * 1e9)

    monotonic = perf_counter = time

    def sleep(self, seconds: float) -> None:
        self._clock.sleep(seconds)

    def __getattr__(self, name):
        return getattr(_real_time, name)
