"""How ``install`` builds the integration: reading the book builds nothing more."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery

from asyncbook import MemoryBook
from asyncbook.celery import book_of, install, uninstall
from asyncbook.celery._settings import Settings


def test_reading_a_given_book_reads_no_settings_and_builds_no_writer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []
    real = Settings.from_conf.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Settings], conf: Any) -> Settings:
        reads.append(1)
        settings: Settings = real(cls, conf)
        return settings

    monkeypatch.setattr(Settings, "from_conf", classmethod(counted))
    app = Celery("construction", broker="memory://", set_as_current=False)
    app.conf.asyncbook_flush_delay = "soon"  # does not read: the recorder could not be built
    book = MemoryBook()
    install(app, book)
    try:
        assert book_of(app) is book
        assert reads == []
    finally:
        uninstall(app)


def test_every_handler_of_every_part_is_connected() -> None:
    """Parts whose handlers share a name (``on_worker_init``: the startup check, one run
    per task and the cancels' ring) are each connected to their signal: a signal keeps
    one receiver per dispatch id, and the id was the handler's bare name."""
    import weakref

    from celery import signals

    from asyncbook.celery import installed

    app = Celery("handlers", broker="memory://")
    install(app, MemoryBook())
    try:
        integration = installed(app)
        assert integration is not None
        wanted = [h for s, h in integration._handlers() if s is signals.worker_init]
        assert len(wanted) >= 3
        connected = [
            ref() if isinstance(ref, weakref.ReferenceType) else ref
            for _key, ref in signals.worker_init.receivers
        ]
        for handler in wanted:
            assert handler in connected, handler.__qualname__
    finally:
        uninstall(app)
