"""What the console's commands share: times and durations as options (``--since``,
``--until``, ``--window``, ``--within``) and for people, and the book's refusal of a field as
a usage error naming its option.

Times are printed in UTC. ``--since``/``--until`` take a duration back from now (``90s``,
``10m``, ``2h``, ``1d``), ms since the epoch, or an ISO 8601 time (UTC unless it names an
offset); ``--window``/``--within`` a duration.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import click

from .._times import parse_duration, parse_moment
from ..errors import AsyncBookError

__all__ = [
    "duration_option",
    "moment",
    "naming_options",
    "now_ms",
    "span",
    "when",
    "when_option",
]

_OPTION_OF_FIELD = {
    "name": "--name",
    "state": "--state",
    "worker": "--worker",
    "q": "--q",
    "since_ms": "--since",
    "until_ms": "--until",
    "sort": "--sort",
    "limit": "--limit",
    "after": "--after",
    "window_ms": "--window",
    "within_ms": "--within",
    "actor": "--actor",
}


def now_ms() -> int:
    """This host's clock, in ms since the epoch."""
    return int(time.time() * 1000)


def duration_option(minimum_ms: int, maximum_ms: int) -> Callable[..., int | None]:
    """An option callback reading a duration (``90s``, ``10m``, ``2h``, ``1d``, ``500ms``)
    as ms, from ``minimum_ms`` to ``maximum_ms``; anything else is a usage error."""

    def convert(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
        if value is None:
            return None
        try:
            found = parse_duration(value, "duration")
        except AsyncBookError:
            raise click.BadParameter(
                f"{value!r} is not a duration such as 90s, 10m, 2h or 1d"
            ) from None
        if not minimum_ms <= found <= maximum_ms:
            low, high = span(minimum_ms), span(maximum_ms)
            raise click.BadParameter(f"{value!r} is not from {low} to {high}")
        return found

    return convert


def when_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """An option callback reading a time as ms since the epoch: a duration back from now
    (``10m``, ``2h``, ``1d``), ms since the epoch, or ISO 8601 (UTC without an offset)."""
    if value is None:
        return None
    try:
        return parse_moment(value, "time", now_ms())
    except AsyncBookError:
        raise click.BadParameter(
            f"{value!r} is not a time: use a duration back from now (10m, 2h, 1d), "
            "ms since the epoch, or an ISO 8601 time after 1970"
        ) from None


@contextmanager
def naming_options() -> Iterator[None]:
    """The book's refusal of a field, as a usage error naming the option (exit 2)."""
    try:
        yield
    except AsyncBookError as error:
        option = _OPTION_OF_FIELD.get(error.field or "")
        if option is None:
            raise
        message = error.message.removeprefix("async-task: ")
        raise click.BadParameter(message, param_hint=f"'{option}'") from None


def when(ms: float | None) -> str:
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def moment(ms: float) -> str:
    """A time to the ms, ISO 8601 in UTC: ``2026-12-04T20:42:19.123Z``."""
    at = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return at.replace("+00:00", "Z")


def span(ms: float | None) -> str:
    """A duration for people: 350 ms, 4.2 s, 3m 05s, 2h 10m, 1d 3h (zero parts left out)."""
    if ms is None:
        return ""
    if ms < 1_000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(int(ms // 1000), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days}d {hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h {minutes:02d}m" if minutes else f"{hours}h"
    return f"{minutes}m {seconds:02d}s" if seconds else f"{minutes}m"
