"""The generated docs' tables (docs/configuration.md, docs/timeouts.md): one way to write a Markdown table."""

from __future__ import annotations

from typing import Iterable, List, Sequence


def cell(value: object) -> str:
    """A value as a table cell: empty for None, and a '|' escaped so that it does not end the cell."""
    return "" if value is None else str(value).replace("|", "\\|")


def table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> List[str]:
    """The lines of a table whose cells are already written (code spans, escapes) by the caller."""
    return ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)] + \
        ["| " + " | ".join(row) + " |" for row in rows]
