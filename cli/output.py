"""Shared output helpers: JSON for machines, Rich tables for people, one-line errors on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console()
err_console = Console(stderr=True, soft_wrap=True, highlight=False)


def print_json(data: Any) -> None:
    """Plain JSON on stdout (no Rich markup or wrapping, so it always parses)."""
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]], **kwargs: Any) -> Table:
    """A Rich table; numeric-looking columns are right-aligned by the caller passing `justify`."""
    justify = kwargs.pop("justify", {})
    t = Table(title=title, title_justify="left", **kwargs)
    for column in columns:
        t.add_column(column, justify=justify.get(column, "left"), overflow="fold")
    for row in rows:
        t.add_row(*("" if v is None else str(v) for v in row))
    return t


def money(value: float | None, digits: int = 2) -> str:
    return "unknown" if value is None else f"${value:,.{digits}f}"


def error_line(message: str) -> None:
    err_console.print(f"error: {message}", markup=False)
