"""A search sorted by task name: the names the book knows in order, each name's tasks by
creation (its per-state indexes), then the tasks without a name.

Exact without an index of its own: each name is a search by that name, read in turn
until the page is full, its walks examined ``budget`` entries or it read
``NAMES_PER_PAGE`` names (``scan_complete`` false). Its cursor names where it stopped:
``n<creation order>:<name>`` inside a name, ``n:<name>`` after all of it, ``~<creation
order>`` among the tasks without a name.
"""

from __future__ import annotations

from collections.abc import Callable

from .._console import SearchPage, SearchRow, TaskQuery, matched_counts
from ._merged import MergedPlan

__all__ = ["NAMES_PER_PAGE", "search_by_name"]

NAMES_PER_PAGE = 100
"""Names one page reads at most (a round trip each)."""

PageOf = Callable[[TaskQuery, bool], MergedPlan[SearchPage]]
"""A search in creation order (the query's ``sort`` is newest or oldest); with True,
of the tasks without a name only."""


def _start(after: str | None) -> tuple[str | None, str | None, bool]:
    """The name a page starts in (None: among the unnamed), the creation cursor inside
    it, and whether the page starts after all of that name."""
    if after is None:
        return None, None, False
    if after.startswith("~"):
        return None, after[1:], False
    head, _, name = after.partition(":")
    return name, head[1:] or None, head == "n"


def search_by_name(
    query: TaskQuery, names: list[str], page_of: PageOf, budget: int
) -> MergedPlan[SearchPage]:
    """One page of ``query`` (``sort`` ``name`` or ``-name``), from the book's ``names``."""
    descending = query.order.descending
    by_creation = query._replace(sort="newest" if descending else "oldest", after=None)
    ordered = sorted(names, reverse=descending)
    if query.name is not None:
        ordered = [name for name in ordered if name == query.name]
    name, inside, past = _start(query.after)
    in_tail = query.after is not None and query.after.startswith("~")
    if name is not None:
        later = [n for n in ordered if (n < name if descending else n > name)]
        ordered = later if past else [name, *later]
    elif in_tail:
        ordered = []
    rows: list[SearchRow] = []
    scanned, cursor, complete = 0, None, True
    for read, current in enumerate(ordered):
        if len(rows) == query.limit:
            break
        if scanned >= budget or read == NAMES_PER_PAGE:
            complete = False
            break
        after = inside if current == name and not past else None
        asked = by_creation._replace(name=current, after=after, limit=query.limit - len(rows))
        found = yield from page_of(asked, False)
        rows += found.tasks
        scanned += found.scanned
        cursor = f"n:{current}"
        if found.next_after is not None:
            cursor = f"n{found.next_after}:{current}"
            complete = found.scan_complete
            break
    else:
        cursor = None if query.name is not None else cursor  # no unnamed task has the name
        if len(rows) < query.limit and scanned < budget and query.name is None:
            after = inside if in_tail else None
            asked = by_creation._replace(after=after, limit=query.limit - len(rows))
            found = yield from page_of(asked, True)
            rows += found.tasks
            scanned += found.scanned
            complete = found.scan_complete
            cursor = None if found.next_after is None else f"~{found.next_after}"
    counted = yield from page_of(by_creation._replace(limit=1), False)
    return SearchPage(
        tasks=tuple(rows),
        totals=counted.totals,
        totals_exact=counted.totals_exact,
        next_after=cursor,
        scanned=scanned,
        scan_complete=complete,
        matched=None if query.q is None else matched_counts(rows),
    )
