"""``script_beside``: a caller's Lua run with a ``RedisBook``'s events in one script call,
when the caller's client talks to the book's own Redis server (asyncbook's Celery result
backend writes Celery's meta so, atomically with the book's events)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Protocol

from redis.cluster import RedisCluster

from .._book import EventInput, ScriptedWrite
from ._scripts import BookScript, ScriptedEvents

__all__ = ["BesideScript", "ScriptingBook", "same_server", "script_beside"]


class ScriptingBook(Protocol):
    """What ``BesideScript`` uses of a ``RedisBook``."""

    client: Any
    retention: timedelta | None

    def events_script(self, source: str) -> BookScript:
        """``source`` with the task helpers and ``apply_event`` in front of it."""
        ...

    def apply_in_script(
        self,
        task_id: str,
        items: Sequence[tuple[EventInput | None, str | None]],
        script: BookScript,
        key: str,
        args: Sequence[str],
        *,
        name: str | None = None,
        group_id: str | None = None,
    ) -> ScriptedEvents:
        """Events of one task and the caller's own Lua around them, in one script call."""
        ...


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


class BesideScript:
    """``source`` registered as an events script of ``book`` (``RedisBook.events_script``)."""

    def __init__(self, book: ScriptingBook, source: str) -> None:
        self.book = book
        self.script: BookScript = book.events_script(source)

    @property
    def retention(self) -> timedelta | None:
        """The book's retention of ended tasks."""
        return self.book.retention

    def apply(self, write: ScriptedWrite) -> ScriptedEvents:
        """``RedisBook.apply_in_script`` of ``write`` with this script."""
        task_id, items, key, args, name, group_id = write
        return self.book.apply_in_script(
            task_id, items, self.script, key, args, name=name, group_id=group_id
        )


def script_beside(book: ScriptingBook, client: object, source: str) -> BesideScript | None:
    """``source`` beside ``book``'s events when ``client`` is on the book's server."""
    return BesideScript(book, source) if same_server(book.client, client) else None
