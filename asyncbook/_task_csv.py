"""Tasks as CSV, the rows of a search: what ``asyncbook ls --csv`` prints and
``GET /api/search.csv`` downloads (stdlib ``csv``, RFC 4180; cells a spreadsheet would
run as a formula are led by ``'``)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from datetime import UTC, datetime

from ._console import SearchRow

__all__ = ["CSV_COLUMNS", "csv_row", "csv_text", "number_cell", "safe_cell"]

CSV_COLUMNS = (
    "id",
    "name",
    "state",
    "created",
    "started",
    "ended",
    "runtime",
    "attempts",
    "worker",
    "queue",
    "error",
)
"""The columns of ``ls --csv``, in order."""

_FORMULA_STARTS = ("=", "+", "-", "@")
"""What makes a spreadsheet read a cell as a formula (OWASP, CSV injection)."""
_BLANK_STARTS = ("\t", "\r", "\n")
"""Leading characters a spreadsheet may drop before it reads the rest as a formula."""
_SKIPPED = "".join(chr(code) for code in range(0x21)) + "\x7f\x85\xa0\u2028\u2029\ufeff"
"""Whitespace and control characters skipped to find a cell's first visible character."""


def safe_cell(value: str) -> str:
    """``value`` with a ``'`` in front when a spreadsheet would take it for a formula:
    it starts with ``= + - @``, or with a tab, CR or newline, or its first character
    after any leading whitespace or control characters is one of ``= + - @``."""
    risky = value.startswith(_BLANK_STARTS) or value.lstrip(_SKIPPED).startswith(_FORMULA_STARTS)
    return "'" + value if risky else value


def _iso(ms: float | None) -> str:
    if ms is None:
        return ""
    moment = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return moment.replace("+00:00", "Z")


def number_cell(value: float | None) -> str:
    """A number as a CSV cell, every digit kept: ``1234567``, ``2.5``; None is empty."""
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def csv_row(row: SearchRow) -> list[str]:
    """One task as the cells of ``CSV_COLUMNS``, formulas defused."""
    task, info = row.task, row.info
    values = [
        task.id,
        info.name or "",
        task.state.value,
        _iso(info.created_at_ms),
        _iso(info.started_at_ms),
        _iso(info.ended_at_ms),
        number_cell(info.runtime_ms),
        str(task.attempts),
        info.worker or "",
        info.queue or "",
        task.error or info.exception or "",
    ]
    return [safe_cell(value) for value in values]


def csv_text(rows: Iterable[SearchRow], *, header: bool = True) -> str:
    """The rows as CSV (RFC 4180, CRLF), under a header of ``CSV_COLUMNS`` unless
    ``header`` is False (a later part of one download)."""
    out = io.StringIO()
    writer = csv.writer(out)
    if header:
        writer.writerow(CSV_COLUMNS)
    writer.writerows(csv_row(row) for row in rows)
    return out.getvalue()
