"""A mutation score: plant plausible bugs ("mutants") one at a time and count how many the tests catch.

    .venv/bin/python benchmarks/mutation.py [--module NAME ...] [--mutant ID ...] [--list] [--jobs N]

The mutants live in benchmarks/mutations/<module>.py, one table per module users bet on. Each mutant is
a file, an exact snippet of it (which must occur exactly once), its replacement, the bug in user terms,
and the tests to run. Per module this prints killed / total and the share, then each survivor (file,
line, bug) so someone can write the test that is missing.

How a run stays honest:
- Everything happens in private copies of the repository (temp dirs, without .venv, .git and caches);
  the working tree is never written. pytest runs there with the repo's .venv python, `-x -q -p
  no:cacheprovider`, PYTHONPATH and --rootdir on the copy, and no bytecode written (a same-size mutant
  written within the same second as another could otherwise run from a stale .pyc).
- Before any mutant, an import check asserts each mutated file imports from the copy, a canary (the
  file raising on import) must be killed, and the unmutated copy must pass the selected tests: if it
  does not, the run stops, since no mutant could be scored against failing tests.
- A snippet that no longer occurs is STALE and an ambiguous one (two or more matches) is AMBIGUOUS:
  both are listed loudly, never counted, and make the exit status 1.
- A mutant that makes the tests run past the timeout is killed by timeout (its process group is
  ended), counted as killed but reported apart.

Not run by CI (it is slow): a BEFORE/AFTER measure for people writing tests. --root/--tables/--python
let tests/test_benchmarks_mutation.py run the tool on a throwaway module.
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import runpy
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLES = Path(__file__).resolve().parent / "mutations"
# Never copied: the virtualenv and VCS are large and read-only to us; caches would leak stale state.
NOT_COPIED = (
    ".venv",
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    ".ruff_cache",
    "*.egg-info",
    ".benchmarks",
    "stacks/*.bak-*",
)
PYTEST_ARGS = ("-x", "-q", "-p", "no:cacheprovider")
CANARY = 'raise RuntimeError("mutation canary: this copy of the file is the one the tests import")\n'

# What became of a mutant (upper case: needs someone's attention)
KILLED = "killed"  # a selected test failed
TIMEOUT = "timeout"  # the tests ran past the timeout: killed, reported apart
SURVIVED = "SURVIVED"  # every selected test passed: a test is missing
ERROR = "ERROR"  # pytest itself failed (usage, internal error): not scored
STALE = "STALE"  # the snippet is no longer in the file: not scored
AMBIGUOUS = "AMBIGUOUS"  # the snippet occurs more than once: not scored


class MutationError(Exception):
    """The run cannot be trusted (bad table, failing baseline, canary survived): stop with this message."""


@dataclass(frozen=True)
class Mutant:
    id: str  # "<module>#<n>"
    module: str
    file: str  # relative to the repository root
    original: str
    replacement: str
    bug: str  # one line, in user terms
    tests: tuple[str, ...]
    k: str | None = None

    @property
    def selection(self) -> tuple[tuple[str, ...], str | None]:
        return self.tests, self.k


@dataclass
class Result:
    mutant: Mutant
    outcome: str
    line: int | None = None
    seconds: float = 0.0
    detail: str = ""  # the failing test that killed it, or why it could not run


# ---- tables -------------------------------------------------------------------------------------


def load_tables(tables: Path) -> list[Mutant]:
    """Every mutant in tables/*.py: MODULE, TESTS, optional K, and MUTANTS (dicts: file, original,
    replacement, bug, optional tests and k overriding the module's)."""
    mutants: list[Mutant] = []
    for path in sorted(tables.glob("*.py")):
        if path.name.startswith("_"):
            continue
        table = runpy.run_path(str(path))
        module = table.get("MODULE") or path.stem
        for n, spec in enumerate(table["MUTANTS"], 1):
            where = f"{path.name} mutant {n}"
            missing = {"file", "original", "replacement", "bug"} - spec.keys()
            if missing:
                raise MutationError(f"{where}: missing {', '.join(sorted(missing))}")
            if spec["original"] == spec["replacement"]:
                raise MutationError(f"{where}: the replacement equals the original (not a mutant)")
            if "\n" in spec["bug"].strip():
                raise MutationError(f"{where}: the bug must be described in one line")
            tests = tuple(spec.get("tests") or table["TESTS"])
            mutants.append(
                Mutant(
                    f"{module}#{n}",
                    module,
                    spec["file"],
                    spec["original"],
                    spec["replacement"],
                    spec["bug"].strip(),
                    tests,
                    spec.get("k", table.get("K")),
                )
            )
    return mutants


def locate(source: str, snippet: str) -> tuple[str, int | None]:
    """(OK | STALE | AMBIGUOUS, line number of the one match)."""
    count = source.count(snippet)
    if count == 0:
        return STALE, None
    if count > 1:
        return AMBIGUOUS, None
    return "OK", source[: source.index(snippet)].count("\n") + 1


# ---- the private copy ---------------------------------------------------------------------------


@dataclass
class Copy:
    """One private copy of the repository, with the pristine text of every file a mutant touches."""

    root: Path
    python: str
    pristine: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
        env.update(PYTHONPATH=str(self.root), PYTHONDONTWRITEBYTECODE="1")
        return env

    def write(self, rel: str, text: str) -> None:
        (self.root / rel).write_text(text)

    def restore(self, rel: str) -> None:
        self.write(rel, self.pristine[rel])

    def pytest(self, tests: tuple[str, ...], k: str | None, timeout: float) -> tuple[int | None, str, float]:
        """(exit code or None on timeout, output, seconds).

        pytest runs in its own process group, ended afterwards whatever happened, so a server a test left
        behind (or a hung test) never outlives its run. Output goes to a file, not a pipe: a leftover
        process holding the pipe open would make a finished run look like a hang."""
        cmd = [self.python, "-m", "pytest", *PYTEST_ARGS, "--rootdir", str(self.root), *tests]
        if k:
            cmd += ["-k", k]
        start = time.monotonic()
        with tempfile.TemporaryFile("w+") as log:
            proc = subprocess.Popen(
                cmd,
                cwd=self.root,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                code: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                end_group(proc)
            log.seek(0)
            return code, log.read(), time.monotonic() - start


def end_group(proc: subprocess.Popen) -> None:
    """Kill the process group this tool started for one pytest run (and reap its leader)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def make_copy(src: Path, parent: Path, python: str, files: set[str]) -> Copy:
    dest = parent / src.name
    shutil.copytree(src, dest, symlinks=True, ignore=_ignore(src))
    # tests read ../shared/data beside the checkout: the copy sees the same folder
    shared = src.parent / "shared"
    if shared.is_dir() and not (parent / "shared").exists():
        (parent / "shared").symlink_to(shared)
    copy = Copy(dest, python)
    for rel in files:
        path = dest / rel
        if path.is_file():
            copy.pristine[rel] = path.read_text()
    return copy


def _ignore(src: Path):
    plain = shutil.ignore_patterns(*[p for p in NOT_COPIED if "/" not in p])
    nested = [p.split("/", 1) for p in NOT_COPIED if "/" in p]

    def ignore(folder: str, names: list[str]) -> set[str]:
        out = set(plain(folder, names))
        rel = Path(folder).relative_to(src).as_posix()
        for parent, pattern in nested:
            if rel == parent:
                out |= set(shutil.ignore_patterns(pattern)(folder, names))
        return out

    return ignore


# Tests run as root on these machines and some write to /dev/full: a mutant in the atomic-write code once
# replaced /dev/full with a regular file. Each run is followed by this check, which stops everything.
DEVICES = ("/dev/null", "/dev/full", "/dev/zero", "/dev/urandom")


def device_state() -> dict[str, tuple[int, int] | None]:
    def state(path: str) -> tuple[int, int] | None:
        try:
            st = os.lstat(path)
        except OSError:
            return None
        return (stat.S_IFMT(st.st_mode), st.st_rdev)

    return {path: state(path) for path in DEVICES}


def check_devices(before: dict[str, tuple[int, int] | None], what: str) -> None:
    after = device_state()
    broken = [p for p in DEVICES if after[p] != before[p]]
    if broken:
        raise MutationError(
            f"{what} changed {', '.join(broken)} (no longer the device it was): stop and restore it, "
            "e.g. `rm /dev/full && mknod -m 666 /dev/full c 1 7`; then drop or rework that mutant"
        )


def module_name(rel: str) -> str:
    return rel.removesuffix(".py").replace("/", ".")


def check_imports(copy: Copy, files: list[str]) -> None:
    """Each mutated file, imported the way the tests import it, must resolve inside the copy (an editable
    install of the package points at the working tree, and PYTHONPATH must win over it)."""
    probe = (
        "import importlib.util, sys\n"
        "for name in sys.argv[1:]:\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    print(spec.origin if spec else None)\n"
    )
    names = [module_name(f) for f in files]
    proc = subprocess.run(
        [copy.python, "-c", probe, *names],
        cwd=copy.root,
        env=copy.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    origins = proc.stdout.splitlines()
    if proc.returncode != 0 or len(origins) != len(files):
        raise MutationError(f"import check failed in the copy: {proc.stderr.strip()[-500:]}")
    for rel, origin in zip(files, origins, strict=True):
        if origin == "None" or Path(origin).resolve() != (copy.root / rel).resolve():
            raise MutationError(
                f"{module_name(rel)} imports from {origin}, not from the copy {copy.root / rel}"
            )


def first_failure(output: str) -> str:
    """The test that failed (pytest's short summary), for the report."""
    m = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", output, re.M)
    if m:
        return m.group(1)
    m = re.search(r"^(E\s+.*)$", output, re.M)
    return m.group(1).strip() if m else output.strip().splitlines()[-1] if output.strip() else ""


# ---- running ------------------------------------------------------------------------------------


def run_mutant(copy: Copy, m: Mutant, timeout: float) -> Result:
    text = copy.pristine.get(m.file)
    if text is None:
        return Result(m, STALE, detail=f"{m.file} does not exist")
    status, line = locate(text, m.original)
    if status != "OK":
        return Result(m, status, detail=f"snippet {m.original!r} occurs {text.count(m.original)} times")
    copy.write(m.file, text.replace(m.original, m.replacement, 1))
    try:
        code, out, seconds = copy.pytest(m.tests, m.k, timeout)
    finally:
        copy.restore(m.file)
    if code is None:
        return Result(m, TIMEOUT, line, seconds, f"tests ran past {timeout:.0f} s")
    if code == 0:
        return Result(m, SURVIVED, line, seconds)
    if code in (1, 2):  # tests failed, or collection/import failed
        return Result(m, KILLED, line, seconds, first_failure(out))
    return Result(m, ERROR, line, seconds, f"pytest exit {code}: {out.strip()[-300:]}")


def prepare(copy: Copy, mutants: list[Mutant], log, devices: dict) -> dict[tuple, float]:
    """Import check, canaries, unmutated baseline. Returns each test selection's baseline seconds."""
    files = sorted({m.file for m in mutants if m.file in copy.pristine and m.file.endswith(".py")})
    check_imports(copy, files)
    selections: dict[tuple, float] = {}
    for sel in dict.fromkeys(m.selection for m in mutants):
        code, out, seconds = copy.pytest(*sel, timeout=3600)
        check_devices(devices, "the unmutated tests")
        if code != 0:
            raise MutationError(
                f"the unmutated copy fails its tests ({' '.join(sel[0])}{' -k ' + sel[1] if sel[1] else ''}, "
                f"pytest exit {code}): fix them before scoring mutants.\n{out.strip()[-2000:]}"
            )
        selections[sel] = seconds
        log(
            f"baseline passes in {seconds:.1f} s: {' '.join(sel[0])}{' -k ' + repr(sel[1]) if sel[1] else ''}"
        )
    for rel in files:
        sel = next(m.selection for m in mutants if m.file == rel)
        copy.write(rel, CANARY + copy.pristine[rel])
        try:
            code, out, _ = copy.pytest(*sel, timeout=max(60.0, 3 * selections[sel]))
        finally:
            copy.restore(rel)
        check_devices(devices, f"the canary in {rel}")
        if code == 0:
            raise MutationError(
                f"canary survived: the tests of {rel} do not import the copy's file; "
                "mutants there could never be killed"
            )
        log(f"canary killed: {rel}")
    return selections


def run_all(
    mutants: list[Mutant], *, root: Path, python: str, jobs: int, timeout: float | None, log=print
) -> list[Result]:
    """Score every mutant in `jobs` private copies of `root`; the copies are deleted afterwards."""
    files = {m.file for m in mutants}
    with tempfile.TemporaryDirectory(prefix="trainfleet-mutation-") as tmp:
        copies = [make_copy(root, Path(tmp) / f"copy{i}", python, files) for i in range(max(1, jobs))]
        devices = device_state()
        baseline = prepare(copies[0], mutants, log, devices)
        todo: queue.Queue[tuple[int, Mutant]] = queue.Queue()
        for item in enumerate(mutants):
            todo.put(item)
        results: dict[int, Result] = {}
        errors: list[BaseException] = []  # the first one stops every worker and the run
        lock = threading.Lock()

        def worker(copy: Copy) -> None:
            while not errors:
                try:
                    n, m = todo.get_nowait()
                except queue.Empty:
                    return
                limit = timeout if timeout is not None else 3 * baseline[m.selection] + 60
                try:
                    r = run_mutant(copy, m, limit)
                    check_devices(devices, f"mutant {m.id} ({m.bug})")
                except BaseException as exc:  # noqa: BLE001 - handed to the main thread below
                    errors.append(exc)
                    return
                with lock:
                    results[n] = r
                    log(progress_line(r, len(results), len(mutants)))

        threads = [threading.Thread(target=worker, args=(c,)) for c in copies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        # the copies must come back pristine: a worker that failed to restore would taint later mutants
        for c in copies:
            for rel, text in c.pristine.items():
                assert (c.root / rel).read_text() == text, f"{rel} not restored in {c.root}"
        return [results[n] for n in range(len(mutants))]


def progress_line(r: Result, done: int, total: int) -> str:
    where = f"{r.mutant.file}:{r.line}" if r.line else r.mutant.file
    extra = f" ({r.detail})" if r.detail else ""
    return f"[{done}/{total}] {r.outcome:9} {r.mutant.id:24} {where}  {r.mutant.bug}{extra}  {r.seconds:.1f}s"


def report(results: list[Result]) -> tuple[str, bool]:
    """The per-module score and survivors; and whether every table entry was usable."""
    lines: list[str] = []
    clean = True
    for module in dict.fromkeys(r.mutant.module for r in results):
        rs = [r for r in results if r.mutant.module == module]
        scored = [r for r in rs if r.outcome in (KILLED, TIMEOUT, SURVIVED)]
        killed = [r for r in scored if r.outcome in (KILLED, TIMEOUT)]
        timeouts = sum(r.outcome == TIMEOUT for r in rs)
        share = f"{100 * len(killed) / len(scored):.0f}%" if scored else "n/a"
        unusable = [r for r in rs if r.outcome not in (KILLED, TIMEOUT, SURVIVED)]
        tail = f", {timeouts} by timeout" if timeouts else ""
        tail += f"; {len(unusable)} not scored (stale, ambiguous or error)" if unusable else ""
        lines.append(f"{module}: killed {len(killed)}/{len(scored)} ({share}){tail}")
        for r in rs:
            if r.outcome == SURVIVED:
                lines.append(f"  survivor  {r.mutant.file}:{r.line}  {r.mutant.bug}  [{r.mutant.id}]")
        for r in unusable:
            clean = False
            lines.append(f"  {r.outcome:9} {r.mutant.file}  {r.mutant.bug}  [{r.mutant.id}] {r.detail}")
    return "\n".join(lines), clean


def check_snippets(mutants: list[Mutant], root: Path) -> list[Result]:
    """--list: where each mutant's snippet is in the working tree (read only), STALE/AMBIGUOUS flagged."""
    out = []
    for m in mutants:
        path = root / m.file
        if not path.is_file():
            out.append(Result(m, STALE, detail=f"{m.file} does not exist"))
            continue
        status, line = locate(path.read_text(), m.original)
        out.append(Result(m, status, line))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--module", action="append", help="only this module's table (repeatable)")
    p.add_argument(
        "--mutant", action="append", help="only this mutant, e.g. planner-optimizer#3 (repeatable)"
    )
    p.add_argument(
        "--list", action="store_true", help="list the mutants and check their snippets; run nothing"
    )
    p.add_argument("--jobs", type=int, default=1, help="mutants run in parallel copies (default 1)")
    p.add_argument("--timeout", type=float, help="seconds per mutant (default: 3 x the unmutated run + 60)")
    p.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    p.add_argument("--tables", type=Path, default=TABLES, help=argparse.SUPPRESS)
    p.add_argument("--python", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    root = args.root.resolve()
    venv_python = root / ".venv" / "bin" / "python"
    python = args.python or (str(venv_python) if venv_python.exists() else sys.executable)
    try:
        mutants = load_tables(args.tables)
        modules = sorted({m.module for m in mutants})
        if args.module:
            unknown = set(args.module) - set(modules)
            if unknown:
                raise MutationError(
                    f"no table for {', '.join(sorted(unknown))}; modules: {', '.join(modules)}"
                )
            mutants = [m for m in mutants if m.module in args.module]
        if args.mutant:
            unknown = set(args.mutant) - {m.id for m in mutants}
            if unknown:
                raise MutationError(f"no mutant {', '.join(sorted(unknown))}")
            mutants = [m for m in mutants if m.id in args.mutant]
        if args.list:
            results = check_snippets(mutants, root)
            for r in results:
                where = f"{r.mutant.file}:{r.line}" if r.line else r.mutant.file
                flag = "" if r.outcome == "OK" else f"  <-- {r.outcome}"
                print(f"{r.mutant.id:24} {where:40} {r.mutant.bug}{flag}")
            bad = [r for r in results if r.outcome != "OK"]
            print(
                f"{len(mutants)} mutants in {len({m.module for m in mutants})} modules; {len(bad)} stale or ambiguous"
            )
            return 1 if bad else 0
        results = run_all(mutants, root=root, python=python, jobs=args.jobs, timeout=args.timeout)
    except MutationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text, clean = report(results)
    print("\n" + text)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
