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
