"""Shared output helpers: JSON for machines, Rich tables for people, one-line errors on stderr.

Rich is imported only when something is printed for people (cli/tables.py): `--json` and `--help` never load it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Group

    from cli.tables import FitTable


def output_width() -> int:
    """Columns for human output, read at print time (not import time), so $COLUMNS set later applies.

    $COLUMNS wins when set (Rich's rule). Else the terminal's width, looked up on stdout, stdin and
    stderr the way Rich does (so `trainfleet plan | less` in a terminal still fits the terminal). Else
    (CI logs, files, pipes with no terminal at all) 80: Rich's own default. We keep 80 rather than
    guess a wider page because CI log viewers and pagers show long lines wrapped or cut; tables fit
    80 by showing the columns that matter (see `table`), and `--wide` prints every column at its
    natural width the way `kubectl get -o wide` does.
    """
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    for stream in (sys.stdout, sys.stdin, sys.stderr):
        try:
            width = os.get_terminal_size(stream.fileno()).columns
        except (AttributeError, ValueError, OSError):
            continue
        if width > 0:
            return width
    return 80


class _Lazy:
    """A Rich console made on first use (cli/tables.py), so output that never uses it never imports Rich."""

    def __init__(self, make: Callable[[], Any]) -> None:
        object.__setattr__(self, "_make", make)
        object.__setattr__(self, "_made", None)

    def rich(self) -> Any:
        """The Rich console itself, for Rich objects that take one (Progress(console=...))."""
        made = self._made
        if made is None:
            made = self._make()
            object.__setattr__(self, "_made", made)
        return made

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich(), name)

    def __enter__(self) -> Any:
        return self.rich().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.rich().__exit__(*exc)


def _stdout_console() -> Any:
    from cli.tables import stdout_console

    return stdout_console()


def _stderr_console() -> Any:
    from cli.tables import stderr_console

    return stderr_console()


console: Any = _Lazy(_stdout_console)
err_console: Any = _Lazy(_stderr_console)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no Rich markup or wrapping, so it always parses).

    NaN and Infinity are not JSON: a figure that is not finite is refused with one line naming where it
    is, instead of printing output that strict parsers reject."""
    try:
        text = json.dumps(data, indent=2, default=str, allow_nan=False)
    except ValueError:
        import math

        from infra.errors import TrainfleetError

        def where(value: Any, path: str) -> str | None:
            if isinstance(value, float) and not math.isfinite(value):
                return path or "the value"
            items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(
                value, (list, tuple)) else ()  # fmt: skip
            for key, item in items:
                found = where(item, f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}".lstrip("."))
                if found:
                    return found
            return None

        raise TrainfleetError(
            f"the JSON output would hold a number that is not finite (NaN or Infinity) at {where(data, '')}; "
            "an input is out of range, or this is a trainfleet bug: please report the command you ran"
        ) from None
    sys.stdout.write(text + "\n")


@dataclass(frozen=True)
class Col:
    """A table column. `drop`: 0 = always shown; when the table does not fit the width, the column
    with the highest `drop` goes first (ties: the rightmost). `wide`: only with --wide. `wrap`: long
    text that may wrap at spaces rather than cost another column its place (detail lines)."""

    header: str
    justify: str = "left"
    drop: int = 0
    wide: bool = False
    wrap: bool = False


def table(title: str | None, columns: Sequence[str | Col], rows: Iterable[Sequence[Any]], *,
          wide: bool = False, justify: dict[str, str] | None = None, **kwargs: Any) -> FitTable:  # fmt: skip
    """A table for people that fits the page without breaking words (cli/tables.py `table`)."""
    from cli.tables import table as fitted

    return fitted(title, columns, rows, wide=wide, justify=justify, **kwargs)


class Footnotes:
    """Long provenance as numbered notes under a table: `ref(text)` gives "[n]", the same n for the
    same text; `renderable()` lists each once (the way `infracost breakdown` keeps rows short)."""

    def __init__(self) -> None:
        self.notes: dict[str, int] = {}

    def ref(self, text: str) -> str:
        if not text:
            return ""
        return f"[{self.notes.setdefault(text, len(self.notes) + 1)}]"

    def renderable(self, heading: str | None = None) -> Group:
        """Each note once, its text wrapped at spaces under itself (a hanging indent)."""
        from cli.tables import footnotes_renderable

        return footnotes_renderable(self.notes, heading)


WideOpt = Annotated[
    bool, typer.Option("--wide", help="Show every column (long lines); by default tables fit the page.")
]


def show(*renderables: Any, wide: bool = False) -> None:
    """Print human output; with --wide, tables keep their natural width past the page (no cropping)."""
    console.print(*renderables, crop=not wide)


def money(value: float | None, digits: int = 2) -> str:
    return "unknown" if value is None else f"${value:,.{digits}f}"


def error_line(message: str) -> None:
    err_console.print(f"error: {message}", markup=False)
