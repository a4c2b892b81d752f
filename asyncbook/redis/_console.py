"""The operator console's reads of a Redis book: info, search, names (its counts and
workers: ``_stats``).

The task scripts record what they read (lua/_info.lua: no extra round trip). A script
reads only keys it is given: a read whose keys come from what it reads answers ``!keys``
with them, and is sent again with their keys (``until_given``). A task's info is its
shard's plan; every other read merges the S >= 1 shards' answers into the one a single
shard holding the same tasks gives (``_merged``; a search page by the rows' positions,
``_kept``, so that the merged cursor never skips nor repeats a task).
"""

from __future__ import annotations

import functools
import heapq
import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .._checks import require_string
from .._console import (
    SearchPage,
    SearchRow,
    SortOrder,
    TaskInfo,
    TaskQuery,
    matched_counts,
    totals_of,
)
from .._models import GROUP_END_STATES, STATE_NAMES, AsyncTask
from ._args import utf8
from ._indexer import caught_up
from ._merged import MergedPlan, OnShards, every
from ._name_sort import search_by_name
from ._plan import SETTLE, Plan, ScriptCall, command, server_time
from ._replies import text_of
from ._script_args import InfoArgs, SearchArgs
from ._scripts import ScriptStatus

if TYPE_CHECKING:
    from ._namespace import Namespace
    from ._shard import Shard

__all__ = [
    "WORKER_KEEP_MS",
    "info",
    "number_of",
    "search",
    "search_page_at",
    "task_names",
    "text_or_none",
    "until_given",
]

STATES_WITH = {"runtime": ("succeeded", "failed"), "ended": GROUP_END_STATES}
"""The states a task with a runtime or an end can be in (_info.lua writes those sort
indexes at an end: a run's, or any)."""
SEARCH_SCAN_LIMIT = 10_000
"""Index entries one search call may examine (for a page, and again for its totals);
a search with ``q`` reads each entry's record: half of this for each."""
WORKER_KEEP_MS = 7 * 86_400_000
"""A worker unseen this long is forgotten (WORKER_KEEP in lua/_info.lua)."""
CHILDREN_LISTED = 100
"""Children of a task its info lists, at most."""


def text_or_none(raw: Any) -> str | None:
    """A reply's text, or None for none."""
    return None if raw is None else text_of(raw)


def until_given(call: Callable[[], ScriptCall], learn: Callable[[Any], None]) -> Plan[Any]:
    """The reply to ``call()``'s script call, after ``learn`` took in each ``!keys``
    answer (keys not given yet, of what the book holds: the rounds end)."""
    while True:
        reply = yield call()
        if not (isinstance(reply, list) and reply and text_of(reply[0]) == ScriptStatus.KEYS):
            return reply
        learn(reply)


def number_of(raw: Any) -> int | float | None:
    """A reply's number (an int where it is whole), or None for none."""
    text = text_or_none(raw)
    if text is None:
        return None
    value = float(text)
    return int(value) if value.is_integer() else value


def _info(
    task_id: str,
    fields: Sequence[Any],
    long: Sequence[Any],
    children: Sequence[Any],
    message_kept: bool = False,
) -> TaskInfo:
    created, name, queue, parent, root, group, worker, started, ended, error, tries = fields[:11]
    retry_of, retried_as, retried_by, retry_reason = fields[12:16]
    started_ms, ended_ms = number_of(started), number_of(ended)
    runtime = None
    if started_ms is not None and ended_ms is not None and ended_ms >= started_ms:
        runtime = ended_ms - started_ms
    attempts = number_of(tries)
    group_text = text_or_none(group)
    return TaskInfo(
        id=task_id,
        name=text_or_none(name),
        args_repr=text_or_none(long[0]),
        kwargs_repr=text_or_none(long[1]),
        queue=text_or_none(queue),
        parent_id=text_or_none(parent),
        root_id=text_or_none(root),
        group_id=None if group_text is None else json.loads(group_text),
        worker=text_or_none(worker),
        created_at_ms=number_of(created),
        started_at_ms=started_ms,
        ended_at_ms=ended_ms,
        runtime_ms=runtime,
        retries=None if not attempts else int(attempts) - 1,
        exception=text_or_none(error),
        traceback=text_or_none(long[2]),
        children=tuple(text for text in map(text_or_none, children) if text is not None),
        retry_of=text_or_none(retry_of),
        retried_as=text_or_none(retried_as),
        retried_by=text_or_none(retried_by),
        retry_reason=text_or_none(retry_reason),
        message_kept=message_kept,
    )


def info(shard: Shard, task_id: str) -> Plan[TaskInfo | None]:
    """The task's info, or None when the book does not hold it."""
    yield SETTLE
    task_id = utf8(require_string(task_id, "taskId"), "taskId")
    k = shard.keys
    reply = yield ScriptCall(
        "info",
        [k.task(task_id), k.info(task_id), k.children(task_id), k.message(task_id)],
        InfoArgs(children_listed=CHILDREN_LISTED).argv(),
    )
    if not reply:
        return None
    fields, long, children, kept = reply
    return _info(task_id, fields, long, children, kept == 1)


def search(ns: Namespace, query: TaskQuery) -> MergedPlan[SearchPage]:
    """One page of tasks matching ``query`` in its order, and the matching tasks per state
    (every shard's page merged, ``_merged_page``), read once the indexes caught up (a
    bounded number of batches: the page says how far behind they stayed)."""
    query = query.checked()
    lag = yield from caught_up(ns.shards)
    page = yield from _search(ns, query)
    return page.model_copy(update={"index_lag": lag})


def _search(ns: Namespace, query: TaskQuery) -> MergedPlan[SearchPage]:
    order = query.order
    page_of = functools.partial(_merged_page, ns)
    if query.state is not None and query.state not in STATES_WITH.get(order.field, STATE_NAMES):
        # No task in this state has the field: every match comes last, by creation.
        after = query.after[1:] if query.after and query.after[0] == "~" else None
        by_creation = query._replace(sort="-created" if order.descending else "created")
        page = yield from page_of(by_creation._replace(after=after), False)
        tail = None if page.next_after is None else "~" + page.next_after
        return page.model_copy(update={"next_after": tail})
    if order.field != "name":
        return (yield from page_of(query, False))
    names = yield from task_names(ns)
    return (yield from search_by_name(query, names, page_of, SEARCH_SCAN_LIMIT))


def _merged_page(ns: Namespace, query: TaskQuery, unnamed: bool) -> MergedPlan[SearchPage]:
    """Each shard's page of ``query`` (``unnamed``: of the tasks without a name only),
    merged (``_kept``). Of several shards each first reads a short page: its share of the
    first entries (``_by_positions``, ``_shares``), else twice its even share and 2; if
    their merge is not a full page, the shards whose short page was cut read it in full."""
    shards = ns.shards
    even = min(query.limit, 2 * ns.share(query.limit) + 2)
    if ns.count > 1 and _by_positions(query, unnamed):
        firsts: list[_Entries] = yield every(shards, lambda each: _first_entries(each, query, even))
        limits, ahead = _shares(query, firsts, even)
    else:
        limits, ahead = [even] * len(shards), [[] for _ in shards]
    found: list[PageFound] = yield OnShards(
        tuple(
            search_page_at(each, query._replace(limit=limit), unnamed, ids)
            for each, limit, ids in zip(shards, limits, ahead, strict=True)
        )
    )
    cut = tuple(
        index
        for index, (each, limit) in enumerate(zip(found, limits, strict=True))
        if limit < query.limit and each.page.next_after is not None and len(each.rows) >= limit
    )
    kept = _kept(query, found)
    if cut and len(kept[0]) < query.limit:
        again = yield OnShards(tuple(search_page_at(shards[i], query, unnamed) for i in cut), cut)
        for index, each in zip(cut, again, strict=True):
            found[index] = each
        kept = _kept(query, found)
    rows, next_after, complete = kept
    pages = [each.page for each in found]
    taken: list[SearchRow] = []
    for _key, _position, (task_json, fields, matched_by, _) in rows:  # only the rows kept
        task = AsyncTask.model_validate_json(task_json)
        info = _info(task.id, fields, (None, None, None), ())
        taken.append(SearchRow(task=task, info=info, matched_by=text_or_none(matched_by) or None))
    return SearchPage(
        tasks=tuple(taken),
        totals={state: sum(page.totals.get(state, 0) for page in pages) for state in STATE_NAMES},
        totals_exact=all(page.totals_exact for page in pages),
        next_after=next_after,
        scanned=sum(page.scanned for page in pages),
        scan_complete=complete,
        matched=None if query.q is None else matched_counts(taken),
    )


class PageFound(NamedTuple):
    """A page as search.lua answers it, its rows not read yet (a merge of several
    shards' pages reads only the rows it keeps)."""

    rows: list[tuple[str, Any]]
    """Each row's position (the cursor of a page ending with it) and its reply."""
    page: SearchPage
    """The page without its rows (``tasks`` empty, ``matched`` None)."""


def search_page_at(
    shard: Shard, query: TaskQuery, unnamed: bool, ids_ahead: Sequence[str] = ()
) -> Plan[PageFound]:
    """A shard's page of a checked query not sorted by name (``unnamed``: of the tasks
    without a name only), each row with its position (``_kept``), not read yet.
    ``ids_ahead``: ids the walk is expected to meet, whose keys the first call gives."""
    yield SETTLE
    names: list[str] = []
    if query.q is not None:
        wanted = query.q.casefold()
        names = [name for name in (yield from _names(shard)) if wanted in name.casefold()]
    # A text scan reads each task's info: the page's walk and the totals' share the budget.
    budget = SEARCH_SCAN_LIMIT if query.q is None else SEARCH_SCAN_LIMIT // 2
    ids: list[str] = list(dict.fromkeys(ids_ahead))  # grows by each ``!keys`` answer
    call = functools.partial(_search_call, shard, query, unnamed, ids, names, budget)

    def learn(reply: Any) -> None:
        ids[:] = dict.fromkeys([*ids, *map(text_of, reply[1:])])

    reply = yield from until_given(call, learn)
    rows, next_cursor, flat_totals, exact, scanned, complete = reply
    states, counts = flat_totals[::2], flat_totals[1::2]
    page = SearchPage(
        tasks=(),
        totals=totals_of({text_of(s): int(n) for s, n in zip(states, counts, strict=True)}),
        totals_exact=text_or_none(exact) == "1",
        next_after=text_or_none(next_cursor) or None,
        scanned=int(scanned),
        scan_complete=text_or_none(complete) == "1",
    )
    return PageFound([(text_or_none(row[3]) or "", row) for row in rows], page)


def _search_call(
    shard: Shard,
    query: TaskQuery,
    unnamed: bool,
    ids: Sequence[str],
    names: Sequence[str],
    budget: int,
    peek: bool = False,
) -> ScriptCall:
    """search.lua's call for a shard's page of ``query``, the keys of ``ids`` given."""
    order = query.order
    k = shard.keys
    if query.worker is not None:
        keys = [k.worker_tasks(query.worker)]
    elif query.name is not None:
        keys = k.name_indexes(query.name)
    else:
        keys = k.state_indexes
    keyed = order.field != "created"
    if keyed:
        keys = [k.sort_index(order.field), *keys]
    filters = (query.worker, query.q, query.since_ms, query.until_ms)
    args = SearchArgs(
        json.dumps(ids, ensure_ascii=False),
        "desc" if order.descending else "asc",
        query.limit,
        query.after or "",
        query.state or "",
        query.name or "",
        query.q or "",
        query.since_ms,
        query.until_ms,
        budget,
        "count" if any(each is not None for each in filters) else "card",
        json.dumps(names, ensure_ascii=False),
        query.q is not None,
        query.worker or "",
        order.field if keyed else "",
        unnamed,
        peek,
    )
    triples = [key for id in ids for key in (k.task(id), k.history(id), k.info(id))]
    return ScriptCall("search", [*keys, *triples], args.argv())


def _by_positions(query: TaskQuery, unnamed: bool) -> bool:
    """Whether a shard's page walks its state indexes in creation order taking every entry:
    where the page's rows fall follows from the indexes' first entries."""
    plain = query.q is None and query.worker is None and not unnamed
    return plain and query.order.field == "created" and query.since_ms is query.until_ms is None


_Entries = list[tuple[int, str]]
"""A shard's first entries of its page's walk: (creation order, id)."""


def _first_entries(shard: Shard, query: TaskQuery, count: int) -> Plan[_Entries]:
    """The first ``count`` entries of a shard's walk for ``query`` (after its cursor, in
    its order, over the indexes it walks); one script call, no rows read."""
    yield SETTLE
    asked = query._replace(limit=count - 1)
    reply = yield _search_call(shard, asked, False, [], [], count, peek=True)
    assert text_of(reply[0]) == ScriptStatus.AT
    return [(int(reply[i + 1]), text_of(reply[i])) for i in range(1, len(reply), 2)]


def _shares(
    query: TaskQuery, firsts: Sequence[_Entries], count: int
) -> tuple[list[int], list[list[str]]]:
    """Each shard's page length, and the ids its walk is expected to meet, from the first
    ``count`` entries of each shard's walk: one row past its share of the merged first
    ``limit + 1`` entries (a whole page if all ``count`` fall inside those)."""
    sign = -1 if query.order.descending else 1
    entries = sorted(
        (sign * order, shard, task_id)
        for shard, first in enumerate(firsts)
        for order, task_id in first
    )
    taken = Counter(shard for _order, shard, _id in entries[: query.limit + 1])
    full = [len(first) >= count and taken[shard] >= count for shard, first in enumerate(firsts)]
    limits = [query.limit if full[i] else min(query.limit, taken[i] + 1) for i in range(len(full))]
    ahead: list[list[str]] = [[] for _ in firsts]
    for _order, shard, task_id in entries:  # one pass: a namespace may have 1,024 shards
        if len(ahead[shard]) <= limits[shard]:
            ahead[shard].append(task_id)
    return limits, ahead


def _position_key(order: SortOrder) -> Callable[[str], tuple[Any, ...]]:
    """Where a position (a cursor search.lua gives) falls in the page's order, as a key
    that sorts ascending: a creation order (an integer), or ``<value>:<id>`` by value, then
    by id as Redis orders a sorted set's members (bytes; descending: each negated, a longer
    id first), then ``~<creation order>`` (the tasks without the value)."""
    sign = -1 if order.descending else 1
    if order.field == "created":
        return lambda position: (sign * int(position),)

    def key(position: str) -> tuple[Any, ...]:
        if position.startswith("~"):
            return (1, sign * int(position[1:]))
        value, _, task_id = position.partition(":")
        raw = task_id.encode("utf-8", "surrogatepass")
        return (0, sign * float(value), (*(-byte for byte in raw), 1) if order.descending else raw)

    return key


def _kept(
    query: TaskQuery, found: Sequence[PageFound]
) -> tuple[list[tuple[tuple[Any, ...], str, Any]], str | None, bool]:
    """What a merged page keeps of the shards' pages, none of it read yet: the first
    ``query.limit`` rows in order (key, position, reply) up to the first position some
    shard cannot see past (its ``next_after``); its cursor; whether its scan was complete."""
    key = _position_key(query.order)
    pages = [each.page for each in found]
    complete = all(page.scan_complete for page in pages if page.next_after is None)
    ends = [(key(page.next_after), page) for page in pages if page.next_after is not None]
    bound = min(ends, key=lambda end: end[0], default=None)
    runs = ([(key(at), at, reply) for at, reply in each.rows] for each in found)
    rows = list(heapq.merge(*runs, key=lambda entry: entry[0]))
    if bound is not None:
        rows = [row for row in rows if row[0] <= bound[0]]
    if len(rows) > query.limit:
        rows = rows[: query.limit]
        next_after: str | None = rows[-1][1]
    elif bound is not None:
        next_after, complete = bound[1].next_after, complete and bound[1].scan_complete
    else:
        next_after = None
    return rows, next_after, complete


def task_names(ns: Namespace, within_ms: int | None = None) -> MergedPlan[list[str]]:
    """Task names the book has seen (created within ``within_ms``), sorted."""
    yield from caught_up(ns.shards)
    found = yield every(ns.shards, lambda shard: _names(shard, within_ms))
    return sorted({name for names in found for name in names})


def _names(shard: Shard, within_ms: int | None = None) -> Plan[list[str]]:
    """A shard's task names created within ``within_ms`` (None: every one), sorted."""
    yield SETTLE
    low: int | str = "-inf"
    if within_ms is not None:
        low = (yield from server_time()) - within_ms
    names = yield command("zrangebyscore", shard.keys.names, low, "+inf")
    return sorted(text for text in map(text_or_none, names) if text)
