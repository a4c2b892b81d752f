"""What ``asyncbook ls`` prints for scripts: a page as JSON, its rows as JSON Lines, or
its rows as CSV (with spreadsheet formulas defused)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from .._console import SearchPage, SearchRow
from .._models import to_wire
from .._watch import task_summary

__all__ = [
    "CSV_COLUMNS",
    "csv_text",
    "jsonl_text",
    "number_cell",
    "page_body",
    "row_body",
    "safe_cell",
]

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

_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a cell as a formula (OWASP, CSV injection)."""


def row_body(row: SearchRow) -> dict[str, Any]:
    """One row of ``ls`` for scripts: the task's fields (no history) and its ``info``."""
    return {**task_summary(row.task), "info": to_wire(row.info)}


def page_body(page: SearchPage) -> dict[str, Any]:
    """A page of ``ls --json``: the same keys whatever the filters."""
    return {
        "tasks": [row_body(row) for row in page.tasks],
        "totals": page.totals,
        "totalsExact": page.totals_exact,
        "nextAfter": page.next_after,
    }


def jsonl_text(rows: Sequence[SearchRow]) -> str:
    """The rows of ``ls --jsonl``: one JSON object a line, as ``--json``'s ``tasks``."""
    return "".join(json.dumps(row_body(row), ensure_ascii=False) + "\n" for row in rows)


def safe_cell(value: str) -> str:
    """``value`` with a ``'`` in front when a spreadsheet would take it for a formula."""
    return "'" + value if value.startswith(_FORMULA_STARTS) else value


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


def _csv_row(row: SearchRow) -> list[str]:
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


def csv_text(rows: Sequence[SearchRow]) -> str:
    """The rows of ``ls --csv`` under a header of ``CSV_COLUMNS`` (RFC 4180, CRLF)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    writer.writerows(_csv_row(row) for row in rows)
    return out.getvalue()
