"""What the integration records for the console: a published task's info, a failure's
exception and traceback (kept by the book's scripts with the task, see ``RedisBook.info``)."""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping
from typing import Any

from .._console import INFO_LIMIT, TEXT_LIMIT, PublishInfo
from .._models import FailEvent, to_wire
from ._tracking import error_type_name

__all__ = ["InfoPolicy"]

REDACTED = "'***'"


class _Repr(reprlib.Repr):
    """A repr bounded in depth and length, as Celery's ``saferepr`` bounds argsrepr."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.maxstring = max(16, limit)
        self.maxother = max(16, limit)
        self.maxlevel = 4
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = 32


def _truncated(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


class InfoPolicy:
    """How much a publish records: on or off, args on or off, a length, names to mask."""

    def __init__(
        self,
        *,
        record_info: bool = True,
        record_args: bool = True,
        limit: int = INFO_LIMIT,
        redact: Iterable[str] = (),
    ) -> None:
        self.record_info = record_info
        self.record_args = record_args
        self.limit = limit
        self.redact = frozenset(name.lower() for name in redact)
        self._repr = _Repr(limit)

    def render(self, args: Any, kwargs: Any) -> tuple[str | None, str | None]:
        """args and kwargs as bounded reprs, keyword arguments named in ``redact`` masked."""
        if not self.record_args:
            return None, None
        shown_args = None
        if isinstance(args, list | tuple):
            shown_args = _truncated(self._repr.repr(tuple(args)), self.limit)
        shown_kwargs = None
        if isinstance(kwargs, Mapping):
            parts = []
            length = 0
            for key, value in kwargs.items():
                masked = isinstance(key, str) and key.lower() in self.redact
                shown = REDACTED if masked else self._repr.repr(value)
                parts.append(f"{key!r}: {shown}")
                length += len(parts[-1])
                if length > self.limit:
                    break
            shown_kwargs = _truncated("{" + ", ".join(parts) + "}", self.limit)
        return shown_args, shown_kwargs

    def publish_info(
        self,
        name: str,
        headers: Mapping[str, Any],
        body: Any,
        routing_key: Any,
        message: str | None = None,
        trace: str | None = None,
    ) -> PublishInfo | None:
        """The info of a task being published (protocol 2: ``body`` is args, kwargs, embed),
        with its kept ``message`` (``asyncbook_keep_messages``) and its publish's ``trace``
        context (``asyncbook_tracing``), if any: both are kept without the info too."""
        if not self.record_info:
            if message is None and trace is None:
                return None
            return PublishInfo(message=message, trace=trace)
        args = kwargs = None
        if isinstance(body, list | tuple) and len(body) >= 2:
            args, kwargs = self.render(body[0], body[1])

        def text(value: Any) -> str | None:
            return _truncated(value, self.limit) if isinstance(value, str) and value else None

        return PublishInfo(
            name=text(name),
            args=args,
            kwargs=kwargs,
            queue=text(routing_key),
            parent_id=text(headers.get("parent_id")),
            root_id=text(headers.get("root_id")),
            message=message,
            trace=trace,
        )

    def failure_event(self, event: FailEvent, error: Any, traceback: Any) -> Any:
        """``event`` with the exception's type and the traceback for the task's info (the
        book keeps them beside the task; its history records the event as it is)."""
        if not self.record_info:
            return event
        wire: dict[str, Any] = to_wire(event)
        if isinstance(error, BaseException):
            wire["exception"] = error_type_name(error)
        if isinstance(traceback, str) and traceback:
            # A traceback's end says most: keep its last characters.
            cut = TEXT_LIMIT - 1
            wire["traceback"] = traceback if len(traceback) <= cut else "…" + traceback[-cut:]
        return wire
