"""Price a stack at a git ref with that commit's OWN program and pricing (`trainfleet diff --base REF`).

The base side of a diff against a git ref must be what the base commit would have cost: its stack file,
but also its `infra/` program and its `cli/preview/` pricing. So the ref is checked out in a detached git
worktree in a temporary folder (`git worktree add --detach`), the stack file's text there is the one
`git show REF:path` gave (symlinks followed as git stored them), and a small entry point imports the base's
own `cli.preview.engine.estimate_stack` in a subprocess whose cwd and PYTHONPATH are the worktree, so its
`cli` and `infra` packages win over the installed (head) ones. It writes the estimate as JSON (the shape of
`Estimate.to_json`, plus each resource's inputs for "changed inputs" and unrounded cost lines), which is
read back with `Estimate.from_json`. The worktree is always removed (`git worktree remove --force`, then
`git worktree prune`), on error too.

A base that cannot price itself (no trainfleet code at that commit, an older trainfleet without that entry,
an import error, a program exception, a timeout) yields None and a one-line reason: the caller then prices
the base stack text with the head program, as before, and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cli.preview.model import Estimate

# Where the code lives relative to the project (this file is <code root>/cli/preview/at_ref.py).
ENGINE = "cli/preview/engine.py"
TIMEOUT_S = 600.0
MAX_REASON_CHARS = 240

# Run by the base's Python with cwd = PYTHONPATH = the base's code root. argv: code root, stack file,
# usage file ("" for none), output file. Exit 0 and the JSON in the output file, or exit 3 and one line
# on stderr. Uses only what every trainfleet with `preview` has had: estimate_stack(stack, usage_file),
# Estimate.to_json(), dataclass resources and cost components.
_ENTRY = r"""
import dataclasses, json, sys
from pathlib import Path
root, stack, usage, out = sys.argv[1:5]
try:
    import cli, infra
    for pkg in (cli, infra):
        where = Path(getattr(pkg, "__file__", None) or "/").resolve()
        if not where.is_relative_to(Path(root).resolve()):
            raise ImportError(f"{pkg.__name__} is imported from {where.parent}, not from the base commit")
    from cli.preview.engine import estimate_stack
    est = estimate_stack(stack, Path(usage) if usage else None)
    doc = est.to_json()
    doc["elapsed_s"] = est.elapsed_s
    for row, priced in zip(doc["resources"], est.resources):
        row["inputs"] = priced.resource.inputs
        row["components"] = [dataclasses.asdict(c) for c in priced.components]
    Path(out).write_text(json.dumps(doc, default=str))
except BaseException as exc:
    text = " ".join(str(exc).split())[:300]
    sys.stderr.write(f"{type(exc).__name__}: {text}\n" if text else f"{type(exc).__name__}\n")
    sys.exit(3)
"""


class BaseRun:
    """The base program's run, started in the background; `estimate()` waits for it."""

    def __init__(self, ref: str) -> None:
        self.ref = ref
        self.reason = ""  # why there is no estimate, when there is none
        self._proc: subprocess.Popen[str] | None = None
        self._out: Path | None = None
        self._done: Estimate | None = None

    def _fail(self, reason: str) -> None:
        self.reason = " ".join(reason.split())[:MAX_REASON_CHARS] or "unknown error"

    def estimate(self) -> Estimate | None:
        """The base commit's estimate, or None (see `reason`)."""
        if self._proc is None or self._out is None:
            return self._done
        proc, self._proc = self._proc, None
        try:
            _, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            self._fail(f"it ran past {TIMEOUT_S:.0f} s")
            return None
        if proc.returncode != 0:
            lines = [line for line in (err or "").splitlines() if line.strip()]
            self._fail(lines[-1] if lines else f"exit status {proc.returncode}")
            return None
        try:
            self._done = Estimate.from_json(json.loads(self._out.read_text()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            self._fail(f"its output could not be read ({type(exc).__name__}: {exc})")
            return None
        return self._done

    def _stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.communicate()
        self._proc = None


def _git(top: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=top, capture_output=True, text=True)


def _code_root(top: Path, stack_file: Path) -> str | None:
    """Where the trainfleet code sits in the repository (relative to its top), or None when this
    repository does not hold the code (only the stacks): the folder of the running `cli` package when it
    is inside the repository, else the Pulumi project's folder."""
    from infra.stack_file import find_project_root

    running = Path(__file__).resolve().parent.parent.parent
    for folder in (running, find_project_root(stack_file.parent if stack_file.parent.exists() else None)):
        if folder is None:
            continue
        try:
            return folder.resolve().relative_to(top).as_posix()
        except ValueError:
            continue
    return None


@contextmanager
def base_program(ref: str, stack_file: Path, text: str, usage_file: Path | None = None) -> Iterator[BaseRun]:
    """Start pricing `stack_file` (whose text at `ref` is `text`) with `ref`'s own program, in the
    background; the worktree is removed when the block ends. `run.estimate()` is None when the base's code
    cannot price it, with `run.reason` saying why in one line."""
    run = BaseRun(ref)
    folder = stack_file.parent if stack_file.parent.exists() else Path.cwd()
    top_proc = _git(folder, "rev-parse", "--show-toplevel")
    if top_proc.returncode != 0:
        run._fail("not inside a git repository")
        yield run
        return
    top = Path(top_proc.stdout.strip()).resolve()
    here = folder.resolve() / stack_file.name
    code = _code_root(top, here)
    try:
        stack_rel = here.relative_to(top).as_posix()
    except ValueError:
        stack_rel = None
    engine = f"{code}/{ENGINE}" if code not in (None, "", ".") else ENGINE
    if code is None or stack_rel is None or _git(top, "cat-file", "-e", f"{ref}:{engine}").returncode != 0:
        run._fail(f"{ref} has no trainfleet code ({engine})")
        yield run
        return
    tmp = Path(tempfile.mkdtemp(prefix="trainfleet-base-"))
    tree = tmp / "tree"
    try:
        added = _git(
            top, "-c", "core.hooksPath=/dev/null", "worktree", "add", "--detach", "--quiet", str(tree), ref
        )
        if added.returncode != 0:
            lines = [line for line in added.stderr.splitlines() if line.strip()] or ["unknown error"]
            run._fail(f"git worktree add failed: {lines[-1].removeprefix('fatal: ')}")
            yield run
            return
        # The stack file as `git show` read it (a symlink is followed as git stored it at the ref).
        target = tree / stack_rel
        if target.is_symlink() or target.exists():
            target.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        root = (tree / code).resolve() if code not in ("", ".") else tree.resolve()
        run._out = tmp / "estimate.json"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH", "")) if p)
        env.pop("PYTHONHOME", None)
        usage = str(usage_file.resolve()) if usage_file is not None else ""
        try:
            run._proc = subprocess.Popen(
                [sys.executable, "-c", _ENTRY, str(root), str(target), usage, str(run._out)],
                cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        except OSError as exc:
            run._fail(f"cannot start {sys.executable}: {exc}")
        yield run
    finally:
        run._stop()
        _git(top, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(tmp, ignore_errors=True)
        _git(top, "worktree", "prune")


__all__ = ["BaseRun", "base_program"]
