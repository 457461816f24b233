"""Listings of the ``ykafka`` command: a table on a terminal, tab-separated full cells when piped.

A pipe, CI log or file gets one header line and one line per row, cells separated by tabs and never
shortened, so ``cut``/``awk``/``grep`` work on them. On a terminal the key columns (who and what: client id,
IP, role, state, release, ...) keep their full width; the others wrap instead of being cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

#: columns an operator searches by: never shortened, whatever the width
KEY_COLUMNS = frozenset({"app", "client", "host", "ip", "role", "state", "release", "cluster", "group", "topic",
                         "metric", "service", "level", "status", "rule", "id", "name", "address", "pid", "key",
                         "process", "scope", "operator", "action", "target"})


def cell(value: Any) -> str:
    return "-" if value is None else str(value)


def show_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None,
               console: Console | None = None, markup: bool = False) -> None:
    """Print a listing; ``markup`` lets cells carry rich markup (dropped when piped)."""
    out = console or Console()
    cells = [[Text.from_markup(c) if markup else Text(c) for c in map(cell, row)] for row in rows]
    if not out.is_terminal:
        if title:
            click.echo(f"# {title}")
        click.echo("\t".join(columns))
        for row in cells:
            click.echo("\t".join(" ".join(c.plain.split()) for c in row))
        return
    widths = [max([len(column)] + [len(r[i].plain) for r in cells]) for i, column in enumerate(columns)]
    needed = sum(w if c in KEY_COLUMNS else min(w, 8) for c, w in zip(columns, widths, strict=True))
    if needed + 3 * len(columns) + 1 > out.width:
        _records(out, columns, cells, title)
        return
    table = Table(title=title)
    for column, width in zip(columns, widths, strict=True):
        if column in KEY_COLUMNS:
            table.add_column(column, no_wrap=True, min_width=width)
        else:
            table.add_column(column, overflow="fold")
    for row in cells:
        table.add_row(*row)
    out.print(table)


def _records(out: Console, columns: Sequence[str], cells: list[list[Text]], title: str | None) -> None:
    """Too narrow for a table with whole key columns: one block of ``column  value`` lines per row."""
    label = max(len(c) for c in columns)
    for n, row in enumerate(cells, 1):
        out.print(Text(f"{title or 'row'} {n}/{len(cells)}", style="bold"))
        for column, value in zip(columns, row, strict=True):
            out.print(Text(f"  {column:<{label}}  ") + value, overflow="fold")
    if not cells:
        out.print(Text(f"{title or 'rows'}: none", style="bold"))
