"""``RedisBook.script_beside``: a caller's Lua run with the book's events in one script
call, when the caller's client talks to the book's own Redis server (asyncbook's Celery
result backend writes Celery's meta so, atomically with the book's events)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from redis.cluster import RedisCluster

from .._book import ScriptedWrite
from ._scripts import BookScript, ScriptedEvents

__all__ = ["BesideScript", "same_server"]


def _address(client: Any) -> tuple[Any, ...]:
    """Where a client's commands go: host, port, db and socket path (behind Sentinel,
    the master it names now)."""
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if hasattr(pool, "get_master_address"):
        host, port = pool.get_master_address()
        return (host, port, kwargs.get("db") or 0, None)
    return (kwargs.get("host"), kwargs.get("port"), kwargs.get("db") or 0, kwargs.get("path"))


def same_server(book_client: Any, client: Any) -> bool:
    """True if both clients send their commands to one server and db (a book on a
    Cluster never: its keys spread over many)."""
    if isinstance(book_client, RedisCluster):
        return False
    return _address(book_client) == _address(client)


@dataclass(frozen=True, slots=True)
class BesideScript:
    """A caller's script, registered as an events script of a book, and the book's
    ``apply_in_script``, which runs it with a task's events."""

    apply_in_script: Callable[..., ScriptedEvents]
    script: BookScript
    retention: timedelta | None
    """The book's retention of ended tasks."""

    def apply(self, write: ScriptedWrite) -> ScriptedEvents:
        """The write's events and the script, in one call."""
        task_id, items, key, args, name, group_id = write
        return self.apply_in_script(
            task_id, items, self.script, key, args, name=name, group_id=group_id
        )
