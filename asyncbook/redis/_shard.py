"""``Shard``: one shard of a namespace as this process knows it, which every plan is
built from."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from .._book import EventInput
from .._checks import require_integer, require_optional_string, require_string
from .._machine import coerce_event
from .._models import ProgressEvent
from ..errors import AsyncBookError, invalid
from ._args import event_args, failure_json, utf8
from ._facts import FactBook
from ._keys import KeySchema
from ._script_args import AT_DEADLINE, NO_EVENT, TAKEN, ApplyArgs

__all__ = ["Shard"]


class Shard:
    """One shard of a namespace: its settings and key schema, and what this process
    learned of it for its next calls (each attribute says what)."""

    def __init__(
        self,
        namespace: str,
        retention_versions: int,
        retention: timedelta | None,
        shard: tuple[int, int] = (0, 1),
        home_of: Callable[[str], str] = str,
    ) -> None:
        self.keys = KeySchema(namespace, *shard)
        self.home_of = home_of  # whose id a callback id derives from: ``marker``
        self.namespace = namespace
        self.retention_versions = require_integer(retention_versions, "retention_versions")
        if retention is not None and (
            not isinstance(retention, timedelta) or retention <= timedelta(0)
        ):
            raise invalid("retention must be a positive timedelta or None", field="retention")
        self.retention_ms = (
            "" if retention is None else str(math.ceil(retention / timedelta(milliseconds=1)))
        )
        """Whole milliseconds as script text; '' keeps ended tasks forever."""
        self.audit_entries = 10_000
        """About how many entries the namespace's audit log keeps (``_audit``)."""
        k = self.keys
        self.apply_keys = [
            k.deadlines,
            k.outbox,
            k.index_changes,
            k.counters,
            k.stalls,
            k.group_outbox,
        ]
        """apply.lua's KEYS 4..9: the book-wide keys every event may touch."""
        self.facts = FactBook(self.keys, lambda: time.time() * 1000)
        """What the book learned of its tasks' records, for the scripts' info blocks."""
        self.server_checked = False
        """True once ``check_server`` passed (it checks, and warns, once per book)."""
        self.stream_groups: set[tuple[str, str]] = set()
        """(stream, consumer group) pairs known to exist (``_outbox``)."""
        self.prune_from: dict[str, str] = {}
        """Where the next prune resumes, per index (``_batches.prune``)."""

    def marker(self, task_id: str, callback: str) -> str:
        """apply.lua's ``callback_given`` for ``callback`` on ``task_id`` (docs/redis.md)."""
        home = self.home_of(callback)  # <home>:<r> -> :<r>, <x>:<home>:<r> -> <x>::<r>
        at = callback.find(home + ":")
        field = callback[:at] + callback[at + len(home) :]
        own, size = at == 0 or 1 < at == callback.find(":") + 1, len(field)
        if self.keys.shard_total > 1 or not own or size > 64 or not field.isascii():
            return "1"
        return "h" + field if home == task_id else f"x{size:02d}{field}{self.keys.task(home)}"

    def apply_call(
        self,
        task_id: Any,
        event: EventInput | None,
        callback_id: Any,
        full_task: bool | str = True,
        *,
        only_if_stalled: bool | str = False,
        taken: bool = False,
    ) -> tuple[list[str], ApplyArgs, AsyncBookError | None]:
        """apply.lua's KEYS and ARGV for one event (None: expire at the deadline), and the
        shape error found in Python; ``taken``: the callback id is another task's (a
        sharded namespace's claim)."""
        task_id = utf8(require_string(task_id, "taskId"), "taskId")
        callback = require_optional_string(callback_id, "callbackId")
        k = self.keys
        cursor = ""
        if event is None:
            slots, shape_error = AT_DEADLINE, None
        else:
            try:  # a shape error is raised if the script gets that far
                parsed, shape_error = coerce_event(event), None
            except AsyncBookError as error:
                parsed, shape_error = None, error
            slots = NO_EVENT
            if isinstance(parsed, ProgressEvent):
                cursor = utf8(parsed.cursor, "event.cursor")
            if parsed is not None:
                try:
                    slots = event_args(parsed)
                except AsyncBookError as error:
                    shape_error = error
        keys = [
            k.task(task_id),
            k.history(task_id),
            k.callback(utf8(callback, "callbackId")) if callback is not None else k.callback(""),
            *self.apply_keys,
        ]
        failure = ""
        if isinstance(event, Mapping) and event.get("type") == "fail":
            failure = failure_json(event.get("exception"), event.get("traceback"))
        args = ApplyArgs(
            task_id=task_id,
            failure=failure,
            callback_given=callback is not None
            and (TAKEN if taken else self.marker(task_id, callback)),
            event_valid=shape_error is None,
            event=slots,
            retention_ms=self.retention_ms,
            changes_channel=k.changes_channel,
            with_history=full_task,
            only_if_stalled=only_if_stalled,
            cursor=cursor,
        )
        return keys, args, shape_error
