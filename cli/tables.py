"""Rich tables for people, fitted to the page (split from cli/output.py so machine output never imports Rich)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleDimensions, ConsoleOptions, Group, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from cli.output import Col, output_width


class _StdoutConsole(Console):
    """Rich's console on stdout whose width is `output_width()` at each print."""

    @property
    def size(self) -> ConsoleDimensions:  # Rich would freeze $COLUMNS at construction (import) time
        return ConsoleDimensions(output_width(), self._height or 25)

    @size.setter
    def size(self, new_size: tuple[int, int]) -> None:
        self._height = new_size[1]


def stdout_console() -> Console:
    return _StdoutConsole()


def stderr_console() -> Console:
    return Console(stderr=True, soft_wrap=True, highlight=False)


def _words(text: str) -> list[str]:
    return text.split() or [""]


def _lines(text: str) -> list[str]:
    return text.splitlines() or [""]


# Tree rows ("├─ component", "└─ component") wrap under their own text, keeping the tree's line.
_BRANCH_INDENT = {"├─ ": "│  ", "└─ ": "   "}


def _hang(cell: Text, width: int, console: Console) -> Text:
    indent = _BRANCH_INDENT.get(cell.plain[:3])
    if indent is None or cell_len(cell.plain) <= width:
        return cell
    body = cell[3:]
    lines = body.wrap(console, width - 3, overflow="fold")
    out = Text()
    for n, line in enumerate(lines):
        out.append_text(Text(("\n" + indent) if n else cell.plain[:3]) + line)
    return out


# The look: a rule under the header, no boxes, two spaces between columns (like `kubectl get`
# and `infracost breakdown`); boxes cost 3 cells a column that 80 columns cannot spare.
STYLE: dict[str, Any] = {
    "box": box.SIMPLE_HEAD,
    "show_edge": False,
    "pad_edge": False,
    "padding": (0, 1, 0, 0),
}


def _overhead(t: Table, n: int) -> int:
    """Cells a table of n columns takes besides its columns' widths: rules and padding."""
    rules = (2 if t.box and t.show_edge else 0) + (n - 1 if t.box and n else 0)
    _, right, _, left = t.padding
    return rules + n * (left + right) - (0 if t.pad_edge or not n else left + right)


class FitTable:
    """A Rich table that fits the width it is printed at without breaking a word.

    Every column is at least as wide as the longest word in its header and the longest
    whitespace-free token in its cells, so headers wrap between words ("interruption / loss", never
    "interru / ption") and identifiers (instance types, regions, zones, paths, URNs, money) never
    wrap at all; free text wraps at spaces. When those minimums do not fit, low-value columns
    (highest `Col.drop`) are left out and named under the table ("--wide adds: ..."). Only when even
    the columns that are never dropped do not fit does Rich shorten cells with an ellipsis.
    With wide=True every column is shown at its natural width, even past the page (like
    `kubectl get -o wide`); print it with `crop=False`.
    Cells and titles are plain text (data may hold [brackets]); pass rich Text for styling.
    """

    def __init__(self, title: str | None, columns: Sequence[Col], rows: list[list[Text]],
                 *, wide: bool = False, **table_kwargs: Any) -> None:  # fmt: skip
        self.title, self.columns, self.rows, self.wide = title, list(columns), rows, wide
        self.table_kwargs = {**STYLE, **table_kwargs}

    def _overhead(self, n: int) -> int:
        return _overhead(Table(**self.table_kwargs), n)

    @staticmethod
    def _plain(cell: Text) -> str:
        return cell.plain

    def _bounds(self, index: int) -> tuple[int, int]:
        """(least width that breaks no word, natural width) of column `index`, padding excluded."""
        col = self.columns[index]
        texts = [self._plain(row[index]) for row in self.rows]
        least = max(cell_len(w) for w in _words(col.header))
        natural = max(cell_len(line) for line in _lines(col.header))
        for text in texts:
            hang = 3 if text[:3] in _BRANCH_INDENT else 0
            least = max([least, *(hang + cell_len(w) for w in _words(text))])
            natural = max([natural, *(cell_len(line) for line in _lines(text))])
        return least, natural

    def layout(self, width: int) -> tuple[list[int], list[int] | None, list[int]]:
        """(shown column indexes, their widths or None when nothing fits, hidden column indexes)."""
        shown = [i for i, c in enumerate(self.columns) if self.wide or not c.wide]
        bounds = {i: self._bounds(i) for i in shown}

        def least(cols: list[int], natural: int = 0) -> int:
            # a `wrap` column asks for its natural width only up to ~45% of the page before
            # other columns give way; past that its text wraps at spaces
            wanted = (max(bounds[i][0], min(bounds[i][1], width * 45 // 100)) if natural and self.columns[i].wrap
                      else bounds[i][natural] for i in cols)  # fmt: skip
            return sum(wanted) + self._overhead(len(cols))

        if self.wide:
            return shown, [bounds[i][1] for i in shown], []
        droppable = sorted((i for i in shown if self.columns[i].drop > 0),
                           key=lambda i: (self.columns[i].drop, i), reverse=True)  # fmt: skip
        # One line per row reads fastest: drop low-value columns until the rest fit unwrapped (or
        # none is left to drop; then text wraps at spaces), and take back any that still fit.
        dropped = []
        while least(shown, 1) > width and droppable:
            dropped.append(droppable.pop(0))
            shown.remove(dropped[-1])
        for i in reversed(dropped):
            if least(sorted([*shown, i]), 1) <= width:
                shown = sorted([*shown, i])
        hidden = [i for i, c in enumerate(self.columns) if i not in shown]
        if least(shown) > width:
            return shown, None, hidden
        return shown, _allocate([bounds[i] for i in shown], width - self._overhead(len(shown))), hidden

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        shown, widths, hidden = self.layout(width)
        if self.title:
            yield Text(self.title, style="table.title")
        t = Table(**self.table_kwargs)
        for n, i in enumerate(shown):
            col = self.columns[i]
            if widths is not None:
                t.add_column(col.header, justify=col.justify, width=widths[n], overflow="fold")  # type: ignore[arg-type]
            else:  # last resort: text wraps at spaces, a word too long for its column ends in "…"
                ident = all(len(_words(self._plain(row[i]))) == 1 for row in self.rows)
                t.add_column(col.header, justify=col.justify, no_wrap=ident, overflow="ellipsis")  # type: ignore[arg-type]
        if widths is not None and self.wide:
            t.width = sum(widths) + self._overhead(len(widths))
        for row in self.rows:
            if widths is None:
                t.add_row(*(row[i] for i in shown))
            else:
                t.add_row(*(_hang(row[i], widths[n], console) for n, i in enumerate(shown)))
        yield t
        if hidden:
            yield Text(f"--wide adds: {', '.join(self.columns[i].header for i in hidden)}", style="dim")

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        shown, widths, _ = self.layout(options.max_width)
        total = sum(widths) + self._overhead(len(widths)) if widths else options.max_width
        return Measurement(min(total, options.max_width), min(total, options.max_width))


def _allocate(bounds: list[tuple[int, int]], room: int) -> list[int]:
    """Widths between each column's least and natural width, spare room shared by what they lack."""
    widths = [least for least, _ in bounds]
    spare = room - sum(widths)
    lacks = [natural - least for least, natural in bounds]
    if spare >= sum(lacks):
        return [natural for _, natural in bounds]
    total = sum(lacks)
    for i, lack in enumerate(lacks):
        widths[i] += spare * lack // total
    spare = room - sum(widths)
    for i in sorted(range(len(bounds)), key=lambda i: bounds[i][1] - widths[i], reverse=True):
        if spare <= 0:
            break
        if widths[i] < bounds[i][1]:
            widths[i] += 1
            spare -= 1
    return widths


def table(title: str | None, columns: Sequence[str | Col], rows: Iterable[Sequence[Any]], *,
          wide: bool = False, justify: dict[str, str] | None = None, **kwargs: Any) -> FitTable:  # fmt: skip
    """A table for people that fits the page without breaking words (see FitTable).

    `columns` are headers or `Col`s; `justify` maps a plain header to "right" for numbers.
    None cells print empty; other cells print as plain text, never as Rich markup (a name or a
    reason may hold "[secret]").
    """
    justify = justify or {}
    cols = [c if isinstance(c, Col) else Col(c, justify.get(c, "left")) for c in columns]
    cells = [[v if isinstance(v, Text) else Text("" if v is None else str(v)) for v in row] for row in rows]
    return FitTable(title, cols, cells, wide=wide, **kwargs)


def footnotes_renderable(notes: dict[str, int], heading: str | None) -> Group:
    """Each note once, its text wrapped at spaces under itself (a hanging indent)."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    for text, n in notes.items():
        grid.add_row(Text(f"[{n}]"), Text(text))
    parts: list[Any] = [Text(heading, style="dim")] if heading and notes else []
    return Group(*parts, grid) if notes else Group()
