"""Group streams: one group's summary, and its members as they change, to many watchers.

The change feed names a member's group (``groupId``). A watcher costs nothing while its
group is quiet. When a member of a watched group changes, the hub notes the member and
runs one round for the group: it looks the changed members up (their summaries, no
history) and then the group's counters (one O(1) call), and hands every watcher of the
group the same bytes: a ``member`` event per changed member (``id:`` its version), then a
``group`` event with the summary, and ``end`` once the group has ended. Rounds for one
group never overlap: changes that arrive meanwhile are collected and served by one more
round, so a burst of changes costs a few rounds, not one per change.

A new watcher is sent the summary at once. There is no resume: a reconnecting client
starts over and gets the summary again (member events are not replayed; the page
reloads the member list when its stream opens). When the feed reconnects, changes may
have been missed: every watched group is looked up again and its watchers are sent a
``resync`` event first.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from .._book import AsyncBook
from .._models import AsyncTask, GroupSummary, to_wire
from .._watch import task_summary
from ..errors import AsyncBookError, DamagedRecordError, UnknownTaskError
from ._feed import Change
from ._lookups import Batch, Lookups, StreamWatcher
from ._reader import Reader
from ._sse import MAX_CURSOR, format_event

__all__ = ["GROUP_MEMBERS", "MEMBERS_PER_ROUND", "GroupHub", "GroupWatcher", "UnknownGroupError"]

log = logging.getLogger(__name__)

GROUP_MEMBERS = 100
"""Members ``GET /api/groups/<id>`` lists unless ``?limit=`` says otherwise."""

MEMBERS_PER_ROUND = 100
"""Changed members looked up in one round at most; the rest wait for the next round."""
END_SWEEP = 1000
"""Members read once a group has ended, so its streams get their last versions first."""
WATCHER_BACKLOG = 10_000
"""Unread batches a watcher may hold before its stream is closed (its client starts over)."""


class GroupWatcher(StreamWatcher):
    """One group stream client (its ``key`` the group id)."""


class UnknownGroupError(AsyncBookError):
    """The book holds no group with that id (the API answers 404)."""

    def __init__(self, group_id: str) -> None:
        super().__init__("not-found", f"no group {group_id!r}", field="groupId")
        self.args = (group_id,)
        self.group_id = group_id


@dataclass(eq=False)
class _Watched:
    """A group with watchers: what changed since, and what was sent."""

    changed: dict[str, int] = field(default_factory=dict)
    """Members announced since the last round: id -> the newest version announced."""
    sent: dict[str, int] = field(default_factory=dict)
    """Members sent so far: id -> the version sent (bounded by the group's size)."""
    summary: dict[str, Any] | None = None
    """The last summary sent, on the wire."""
    resync: bool = False


@dataclass(frozen=True)
class Round:
    """What one round found: the summary (None: no such group), the changed members, and
    when the group has ended, its first members (their last versions)."""

    summary: GroupSummary | None
    changed: list[AsyncTask]
    last: list[AsyncTask]


async def look_up(book: Reader, group_id: str, member_ids: list[str], sweep: bool) -> Round:
    """The changed members (without history), then the group's summary: one round.

    Members first, so the summary is at least as new as the members sent before it. A
    member the book no longer holds (or holds damaged) is left out. With ``sweep``, an
    ended group's first ``END_SWEEP`` members are read too: changes still on their way
    through the feed would come after ``end``, so the last ones are sent before it.
    """
    changed: list[AsyncTask] = []
    for member_id in member_ids:
        try:
            # A cursor past every version answers "caught-up": the task, no history, O(1).
            changed.append((await book.resume(member_id, MAX_CURSOR, full_task=False)).task)
        except (UnknownTaskError, DamagedRecordError) as error:
            log.warning("group %r: skipping member %r (%s)", group_id, member_id, error)
    summary = await book.group(group_id)
    last: list[AsyncTask] = []
    if sweep and summary is not None and summary.ended:
        last = await book.group_members(group_id, END_SWEEP)
    return Round(summary, changed, last)


class GroupHub(Lookups[GroupWatcher]):
    """Group watchers, fed from the book when the change feed says a member moved."""

    noun = "group "

    def __init__(self, book: AsyncBook | Reader) -> None:
        super().__init__(book)
        self._groups: dict[str, _Watched] = {}
        self.lookups = 0
        """Rounds run (each: the changed members, then the group's counters)."""

    def watch(self, group_id: str) -> GroupWatcher:
        """Register a stream client; its first batch (the summary) follows."""
        self._groups.setdefault(group_id, _Watched())
        return self.add(GroupWatcher(key=group_id))

    def forget(self, group_id: str) -> None:
        del self._groups[group_id]

    def on_change(self, change: Change) -> None:
        """A member of a watched group changed: note it, and run a round unless one runs."""
        if change.group_id is None:
            return
        group = self._groups.get(change.group_id)
        if group is None or change.version <= group.sent.get(change.task_id, -1):
            return
        group.changed[change.task_id] = max(change.version, group.changed.get(change.task_id, -1))
        self.schedule(change.group_id)

    def on_reset(self) -> None:
        """The feed (re)connected: changes may have been missed, look every group up."""
        for group_id, group in self._groups.items():
            group.resync = True
            self.schedule(group_id)

    async def close(self) -> None:
        """End every stream (without ``end``: the groups go on) and stop pending rounds."""
        self.close_streams()

    async def deliver(self, group_id: str) -> None:
        group = self._groups.get(group_id)
        if group is None:
            return
        pending = dict(list(group.changed.items())[:MEMBERS_PER_ROUND])
        for member_id in pending:
            del group.changed[member_id]
        if group.changed:
            self.again(group_id)  # more than one round's worth: the rest next round
        resync, group.resync = group.resync, False
        sweep = any(not watcher.fresh for watcher in self.watchers_of(group_id))
        self.lookups += 1
        try:
            found = await look_up(self.book, group_id, list(pending), sweep)
        except BaseException:
            # Not served: ask again next round (unless the group is no longer watched).
            if self._groups.get(group_id) is group:
                for member_id, version in pending.items():
                    newest = max(version, group.changed.get(member_id, -1))
                    group.changed[member_id] = newest
                group.resync = group.resync or resync
            raise
        if self._groups.get(group_id) is not group:
            return  # every watcher left meanwhile
        if found.summary is None:
            raise UnknownGroupError(group_id)
        self._serve(group_id, group, found.summary, found.changed + found.last, resync)

    def _serve(
        self,
        group_id: str,
        group: _Watched,
        summary: GroupSummary,
        tasks: list[AsyncTask],
        resync: bool,
    ) -> None:
        members = b""
        for task in tasks:
            if task.version <= group.sent.get(task.id, -1):
                continue  # sent already (a later change looked it up at the same version)
            group.sent[task.id] = task.version
            members += format_event("member", task_summary(task), task.version)
        wire = to_wire(summary)
        moved = bool(members) or resync or summary.ended or wire != group.summary
        group.summary = wire
        head = format_event("resync", {}) if resync else b""
        tail = format_event("group", wire)
        if summary.ended:
            ending = {"groupId": summary.group_id, "total": summary.total, "counts": summary.counts}
            tail += format_event("end", ending)
        # Watchers that were sent the summary before share the same bytes; one that was sent
        # nothing yet starts with the summary, sent even when nothing moved (the members it
        # lacks are the page's to load: GET /api/groups/<id>).
        shared = Batch(payload=head + members + tail, end=summary.ended) if moved else None
        first = Batch(payload=tail, end=summary.ended)
        for watcher in list(self.watchers_of(group_id)):
            if watcher.fresh:
                watcher.fresh = False
                self.send(watcher, first, WATCHER_BACKLOG)
            elif shared is not None:
                self.send(watcher, shared, WATCHER_BACKLOG)
