"""``GET /api/search.csv``: a search's tasks as a CSV download, the columns and the
formula-escaping of ``asyncbook ls --csv`` (``asyncbook._task_csv``).

The search's parameters are ``/api/search``'s; ``limit`` bounds the download (at most
``CSV_ROWS_LIMIT`` rows), read from the book a page of ``MAX_PAGE`` at a time. When the
search holds more, ``X-Next-After`` carries the cursor to pass as ``after`` for the rest.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from .._checks import MAX_PAGE
from .._console import SearchRow
from .._task_csv import csv_text
from ..errors import invalid
from ._console_api import search_query
from ._reader import Reader
from ._sse import parse_count

__all__ = ["CSV_ROWS_LIMIT", "NEXT_AFTER_HEADER", "SEARCH_CSV_PATH", "CsvExport"]

SEARCH_CSV_PATH = "/api/search.csv"
CSV_ROWS_LIMIT = 10_000
"""Most rows one download holds (ten pages of the search)."""
NEXT_AFTER_HEADER = "X-Next-After"
"""The cursor of the rows past this download (absent on the last one)."""
CSV_FILENAME = "asyncbook-tasks.csv"


def _rows_limit(text: str | None) -> int:
    if text in (None, ""):
        return CSV_ROWS_LIMIT
    limit = parse_count(text, "limit")
    if not 1 <= limit <= CSV_ROWS_LIMIT:
        raise invalid(f"limit must be from 1 to {CSV_ROWS_LIMIT}", field="limit")
    return limit


class CsvExport:
    """The CSV download over one book (a ``ConsoleBook``, read awaited)."""

    def __init__(self, book: Reader) -> None:
        self.book = book

    async def search_csv(self, request: Request) -> Response:
        params = dict(request.query_params)
        limit = _rows_limit(params.pop("limit", None))
        query = search_query(params, int(time.time() * 1000))
        rows: list[SearchRow] = []
        after = query.after
        while len(rows) < limit:
            size = min(MAX_PAGE, limit - len(rows))
            page = await self.book.search(query._replace(limit=size, after=after))
            rows += page.tasks
            after = page.next_after
            if after is None:
                break
        headers = {
            "Content-Disposition": f'attachment; filename="{CSV_FILENAME}"',
            "Cache-Control": "no-store",
        }
        if after is not None:
            headers[NEXT_AFTER_HEADER] = after
        return Response(csv_text(rows), media_type="text/csv; charset=utf-8", headers=headers)
