"""What ``asyncbook ls`` prints for scripts: a page as JSON, its rows as JSON Lines, or
its rows as CSV (``asyncbook._task_csv``, shared with the status server)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._console import SearchPage, SearchRow
from .._models import to_wire
from .._watch import task_summary
from ._terminal import json_text

__all__ = ["jsonl_text", "page_body", "row_body"]


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
    """The rows of ``ls --jsonl``: one JSON object a line, as ``--json``'s ``tasks``
    (``json_text``: nothing a terminal acts on)."""
    return "".join(json_text(row_body(row)) + "\n" for row in rows)
