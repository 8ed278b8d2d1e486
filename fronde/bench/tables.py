"""Result tables that fit the terminal: rich tables whose cells fold, and a text grid.

rich cuts a cell that does not fit to an ellipsis (a table of mode names read
``ngra…`` at 80 columns); every benchmark table folds instead. A :class:`Grid` is a
result as text cells, a Markdown page and a rich table in the terminal.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table

__all__ = ["Grid", "figure", "fitted_table"]


def figure(x: float | None, digits: int = 2) -> str:
    """``x`` to ``digits`` decimals for a table cell; ``-`` for None or NaN (not measured)."""
    return "-" if x is None or math.isnan(x) else f"{x:.{digits}f}"


def fitted_table(
    title: str, columns: Sequence[str], left: Collection[str] = (), caption: str | None = None
) -> Table:
    """A rich table whose cells fold rather than cut; ``left``: the left-justified headers."""
    tab = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for col in columns:
        tab.add_column(col, justify="left" if col in left else "right", overflow="fold")
    return tab


def _widths(natural: Sequence[int], least: Sequence[int], room: int) -> list[int] | None:
    """Column widths summing to at most ``room``, each at least its longest word.

    The room over the longest words goes to the columns in proportion to what they lack
    of their one-line width. None when every column fits, or the words alone do not.
    """
    if sum(natural) <= room or sum(least) > room:
        return None
    spare = room - sum(least)
    lack = [n - w for n, w in zip(natural, least, strict=True)]
    return [w + spare * d // (sum(lack) or 1) for w, d in zip(least, lack, strict=True)]


def _md_row(cells: Sequence[str]) -> str:
    """``| a | | b |``: a Markdown row, an empty cell as one space."""
    return "|" + "|".join(f" {c.replace(chr(10), ', ')} " if c else " " for c in cells) + "|"


@dataclass(frozen=True)
class Grid:
    """A result table as text: a title, headers, rows of cells, notes under it.

    A short row is padded with empty cells; a cell's line breaks show as ``, `` in
    Markdown. ``left``: how many leading columns hold names.
    """

    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]] = field(default_factory=list[tuple[str, ...]])
    notes: list[str] = field(default_factory=list[str])
    left: int = 1

    def _cells(self, row: tuple[str, ...]) -> tuple[str, ...]:
        """``row`` padded with empty cells to the number of columns."""
        return row + ("",) * (len(self.columns) - len(row))

    def markdown(self) -> str:
        """The page: ``# title``, a Markdown table, then the notes as paragraphs."""
        lines = [f"# {self.title}", "", _md_row(self.columns)]
        lines.append("|" + "---|" * len(self.columns))
        lines += [_md_row(self._cells(r)) for r in self.rows]
        if self.notes:
            lines += ["", *self.notes]
        return "\n".join(lines) + "\n"

    def table(self, width: int | None = None) -> Table:
        """The same as a rich table, the notes as its caption, fitted to ``width``.

        A table too wide gets widths that keep every word whole (:func:`_widths`); rich
        would narrow the widest column alone, breaking its words while others had room.
        """
        tab = fitted_table(
            self.title,
            self.columns,
            left=self.columns[: self.left],
            caption="\n".join(self.notes) or None,
        )
        rows = [self._cells(r) for r in self.rows]
        texts = [[head, *(r[k] for r in rows)] for k, head in enumerate(self.columns)]
        natural = [max(len(line) for t in col for line in t.split("\n")) for col in texts]
        least = [max((len(w) for t in col for w in t.split()), default=1) for col in texts]
        if width is not None:
            widths = _widths(natural, least, width - 3 * len(self.columns) - 1)
            for column, w in zip(tab.columns, widths or (), strict=False):
                column.width = w
        for row in rows:
            tab.add_row(*row)
        return tab

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """Print as :meth:`table` at the console's width (``console.print(grid)``)."""
        yield self.table(options.max_width)
