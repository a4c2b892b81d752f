"""The operator console's reads of a Redis book: info, search, workers, stats, totals.

What they read is written by the task scripts themselves (lua/_info.lua), so recording
costs no extra round trip. A script reads only keys it is given: a read whose keys come
from what it reads (the tasks an index lists, the workers seen) answers ``!keys`` with
them, and is sent again with their keys (stats: one round trip when the server's clock
agrees with this host's to within an hour; workers and search: two, more for a search
that walks more than one batch of each index). Each read is a plan (``_plan``) that
``RedisBook`` and ``AsyncRedisBook`` both run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from .._checks import require_string
from .._console import (
    RUNTIME_BUCKETS_MS,
    SearchPage,
    SearchRow,
    TaskInfo,
    TaskQuery,
    WorkerSummary,
    matched_counts,
    totals_of,
)
from .._models import GROUP_END_STATES, STATE_NAMES, AsyncTask
from ..errors import invalid
from ._args import utf8
from ._name_sort import search_by_name
from ._plan import SETTLE, Plan, ScriptCall, command, server_time
from ._replies import text_of
from ._script_args import InfoArgs, SearchArgs, WorkersArgs
from ._scripts import ScriptStatus

if TYPE_CHECKING:
    from ._shard import Shard

__all__ = [
    "STATES_WITH",
    "text_or_none",
    "until_given",
    "WORKER_KEEP_MS",
    "info",
    "search",
    "PageFound",
    "search_page_at",
    "search_row",
    "search_with",
    "task_names",
    "workers",
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
WORKERS_LISTED = 500
RUNNING_LOOKED_AT = 10_000
_HOUR_MS = 3_600_000
_BUCKETS = len(RUNTIME_BUCKETS_MS) + 1


def text_or_none(raw: Any) -> str | None:
    """A reply's text, or None for none."""
    return None if raw is None else text_of(raw)


def _lacking(reply: Any) -> bool:
    return isinstance(reply, list) and bool(reply) and text_or_none(reply[0]) == ScriptStatus.KEYS


def until_given(call: Callable[[], ScriptCall], learn: Callable[[Any], None]) -> Plan[Any]:
    """The reply to ``call()``'s script call, after ``learn`` took in each ``!keys``
    answer it gave (each names keys not given yet, of what the book holds: the rounds
    end)."""
    while True:
        reply = yield call()
        if not _lacking(reply):
            return reply
        learn(reply)


def _number(raw: Any) -> int | float | None:
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
    created, name, queue, parent, root, group, worker, started, ended, exception, attempts = fields[
        :11
    ]
    retry_of, retried_as, retried_by, retry_reason = fields[12:16]
    started_ms, ended_ms = _number(started), _number(ended)
    runtime = None
    if started_ms is not None and ended_ms is not None and ended_ms >= started_ms:
        runtime = ended_ms - started_ms
    tries = _number(attempts)
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
        created_at_ms=_number(created),
        started_at_ms=started_ms,
        ended_at_ms=ended_ms,
        runtime_ms=runtime,
        retries=None if not tries else int(tries) - 1,
        exception=text_or_none(exception),
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


def _names_containing(shard: Shard, text: str) -> Plan[list[str]]:
    """The task names the book knows that contain ``text`` (case-insensitively)."""
    wanted = text.casefold()
    return [name for name in (yield from task_names(shard)) if wanted in name.casefold()]


def search(shard: Shard, query: TaskQuery) -> Plan[SearchPage]:
    """One page of tasks matching ``query`` in its order, and the matching tasks per state."""
    yield SETTLE

    def page_of(asked: TaskQuery, unnamed: bool) -> Plan[SearchPage]:
        return _search_page(shard, asked, unnamed)

    return (yield from search_with(query.checked(), lambda: task_names(shard), page_of))


def search_with(
    query: TaskQuery,
    names: Callable[[], Plan[list[str]]],
    page_of: Callable[[TaskQuery, bool], Plan[SearchPage]],
) -> Plan[SearchPage]:
    """``search`` of a checked query, from a book's ``names`` and its ``page_of`` (a page
    not sorted by name; True: of the tasks without a name only): one shard's, or the
    pages of every shard merged (``_sharded_console``)."""
    order = query.order
    if query.state is not None and query.state not in STATES_WITH.get(order.field, STATE_NAMES):
        # No task in this state has the field: every match comes last, by creation.
        after = query.after[1:] if query.after and query.after[0] == "~" else None
        by_creation = query._replace(sort="-created" if order.descending else "created")
        page = yield from page_of(by_creation._replace(after=after), False)
        tail = None if page.next_after is None else "~" + page.next_after
        return page.model_copy(update={"next_after": tail})
    if order.field != "name":
        return (yield from page_of(query, False))
    return (yield from search_by_name(query, (yield from names()), page_of, SEARCH_SCAN_LIMIT))


class PageFound(NamedTuple):
    """A page as search.lua answers it, its rows not read yet (a merge of several
    shards' pages reads only the rows it keeps: ``search_row``)."""

    rows: list[tuple[str, Any]]
    """Each row's position (the cursor of a page ending with it) and its reply."""
    page: SearchPage
    """The page without its rows (``tasks`` empty, ``matched`` None)."""


def search_row(reply: Any) -> SearchRow:
    """One row of search.lua's reply: the task, its info and how ``q`` matched it."""
    task_json, fields, matched_by, _position = reply
    task = AsyncTask.model_validate_json(task_json)
    info = _info(task.id, fields, (None, None, None), ())
    return SearchRow(task=task, info=info, matched_by=text_or_none(matched_by) or None)


def _search_page(shard: Shard, query: TaskQuery, unnamed: bool) -> Plan[SearchPage]:
    """``search`` of a checked query not sorted by name (``unnamed``: of the tasks
    without a name only)."""
    found = yield from search_page_at(shard, query, unnamed)
    rows = tuple(search_row(reply) for _position, reply in found.rows)
    matched = None if query.q is None else matched_counts(rows)
    return found.page.model_copy(update={"tasks": rows, "matched": matched})


def search_page_at(
    shard: Shard, query: TaskQuery, unnamed: bool, ids_ahead: Sequence[str] = ()
) -> Plan[PageFound]:
    """``_search_page``, its rows not read yet, each with its position (pages of several
    shards merge by it). ``ids_ahead``: ids the walk is expected to meet, whose keys the
    first call gives (a sharded page read where its walk begins)."""
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
    scanning = query.worker is not None or query.q is not None
    scanning = scanning or query.since_ms is not None or query.until_ms is not None
    names = [] if query.q is None else (yield from _names_containing(shard, query.q))
    # A text scan reads each task's info: the page's walk and the totals' share the budget.
    budget = SEARCH_SCAN_LIMIT if query.q is None else SEARCH_SCAN_LIMIT // 2
    ids: list[str] = list(dict.fromkeys(ids_ahead))

    def call() -> ScriptCall:
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
            "count" if scanning else "card",
            json.dumps(names, ensure_ascii=False),
            query.q is not None,
            query.worker or "",
            order.field if keyed else "",
            unnamed,
        )
        triples = [key for id in ids for key in (k.task(id), k.history(id), k.info(id))]
        return ScriptCall("search", [*keys, *triples], args.argv())

    def learn(reply: Any) -> None:
        known = set(ids)
        ids.extend(id for id in dict.fromkeys(map(text_of, reply[1:])) if id not in known)

    reply = yield from until_given(call, learn)
    rows, next_cursor, flat_totals, exact, scanned, complete = reply
    counts = {
        text_or_none(flat_totals[i]) or "": int(flat_totals[i + 1])
        for i in range(0, len(flat_totals), 2)
    }
    page = SearchPage(
        tasks=(),
        totals=totals_of(counts),
        totals_exact=text_or_none(exact) == "1",
        next_after=text_or_none(next_cursor) or None,
        scanned=int(scanned),
        scan_complete=text_or_none(complete) == "1",
    )
    return PageFound([(text_or_none(row[3]) or "", row) for row in rows], page)


def workers(shard: Shard, within_ms: int, now_ms: int | None = None) -> Plan[list[WorkerSummary]]:
    """Workers seen in the last ``within_ms``, most recently seen first."""
    if type(within_ms) is not int or within_ms <= 0:
        raise invalid("within_ms must be a whole number of ms > 0", field="within_ms")
    now = (yield from server_time()) if now_ms is None else now_ms
    k = shard.keys
    ids: list[str] = []
    names: list[str] = []

    def call() -> ScriptCall:
        keys = [k.workers, k.state_index("running")]
        keys += [k.task(id) for id in ids] + [k.worker_counts(name) for name in names]
        args = WorkersArgs(
            now - within_ms,
            WORKERS_LISTED,
            RUNNING_LOOKED_AT,
            json.dumps(ids, ensure_ascii=False),
            json.dumps(names, ensure_ascii=False),
        )
        return ScriptCall("workers", keys, args.argv())

    def learn(reply: Any) -> None:
        ids.extend(map(text_of, reply[1]))
        names.extend(map(text_of, reply[2]))

    reply = yield from until_given(call, learn)
    found = []
    for name, seen, counts, running in reply:
        started, succeeded, failed = (int(_number(count) or 0) for count in counts)
        found.append(
            WorkerSummary(
                name=text_or_none(name) or "",
                last_seen_ms=_number(seen) or 0,
                running=tuple(sorted(text for text in map(text_or_none, running) if text)),
                started=started,
                succeeded=succeeded,
                failed=failed,
            )
        )
    return found


def task_names(shard: Shard, within_ms: int | None = None) -> Plan[list[str]]:
    """Task names created within ``within_ms`` (every name the book knows: None), sorted."""
    low: int | str = "-inf"
    if within_ms is not None:
        low = (yield from server_time()) - within_ms
    names = yield command("zrangebyscore", shard.keys.names, low, "+inf")
    return sorted(text for text in map(text_or_none, names) if text)
