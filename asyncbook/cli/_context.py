"""What every ``asyncbook`` command shares: the group's settings (and the book they
name), exit codes, error handling, JSON and rich output."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn

import click
from click.decorators import FC
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._models import AsyncTask
from ..errors import AsyncBookError, BookUnavailableError, UnknownTaskError
from ..redis import BROKER_SETTING, DEFAULT_REDIS_URL, MAX_SHARDS, RedisBook, stored_shards
from ._terminal import TerminalConsole, echo, json_text

__all__ = [
    "EXIT_NOT_FOUND",
    "EXIT_USAGE",
    "GroupOptions",
    "book_errors",
    "emit_json",
    "fail",
    "json_option",
    "shards_option",
    "rich_console",
    "task_or_exit",
]

EXIT_NOT_FOUND = 1
EXIT_USAGE = 2


@dataclass
class GroupOptions:
    """What the group's options say; the book is built on first use."""

    redis_url: str = DEFAULT_REDIS_URL
    namespace: str = "asyncbook"
    shards: int | None = None
    """The namespace's shard count (--shards); None: the count stored in Redis."""
    _book: RedisBook | None = field(default=None, repr=False)

    @property
    def book(self) -> RedisBook:
        """The book at ``redis_url`` under ``namespace``: of ``shards`` shards, else of
        the count the namespace stored (``stored_shards``: one GET, at first use)."""
        if self._book is not None:
            return self._book
        try:
            book = RedisBook.from_url(self.redis_url, namespace=self.namespace)
        except AsyncBookError as error:
            raise click.BadParameter(error.message, param_hint="--redis-url") from None
        shards = self.shards
        if shards is None:
            try:
                shards = stored_shards(book.client, self.namespace)
            except RedisError:
                return book  # Redis unreachable: its first call says so (not kept)
        if shards != 1:
            book = RedisBook(book.client, namespace=self.namespace, shards=shards)
        self._book = book
        return book


def fail(message: str, code: int = EXIT_NOT_FOUND) -> NoReturn:
    """Print ``Error: message`` on stderr (escaped: it may quote stored text) and exit
    with ``code``."""
    echo(f"Error: {message}", err=True)
    sys.exit(code)


@contextmanager
def book_errors() -> Iterator[None]:
    """Map the book's errors to exit codes: unknown task 1, bad input 2, Redis down 1."""
    try:
        yield
    except UnknownTaskError as error:
        fail(f"no task {error.task_id!r}", EXIT_NOT_FOUND)
    except BookUnavailableError as error:
        fail(f"cannot reach Redis: {error.__cause__ or error}", EXIT_NOT_FOUND)
    except AsyncBookError as error:
        fail(error.message, EXIT_USAGE)
    except (RedisConnectionError, RedisTimeoutError) as error:
        fail(f"cannot reach Redis: {error}", EXIT_NOT_FOUND)


def emit_json(data: Any) -> None:
    """Print ``data`` as one line of JSON (UTF-8 as is, what a terminal would act on as
    ``\\u`` escapes: ``json_text``)."""
    click.echo(json_text(data))


def rich_console() -> TerminalConsole:
    """A rich console for tables: soft-wrapped, every string escaped, no markup, emoji
    codes or guessed highlights (``TerminalConsole``)."""
    return TerminalConsole(soft_wrap=True)


def broker_option(use: str) -> Callable[[FC], FC]:
    """The ``--broker`` option (env ``ASYNCBOOK_BROKER_URL``) of a command that reads or
    sends to the Celery broker; ``use`` says what this command does with it."""

    def decorate(command: FC) -> FC:
        return click.option(
            "--broker",
            "broker_url",
            envvar=BROKER_SETTING,
            default=None,
            metavar="URL",
            help=f"The Celery broker (redis://, rediss://, unix:// or amqp://): {use} "
            f"(env {BROKER_SETTING}).",
        )(command)

    return decorate


def shards_option(command: FC) -> FC:
    """The ``--shards`` option (env ``ASYNCBOOK_SHARDS``) of the command group."""
    return click.option(
        "--shards",
        envvar="ASYNCBOOK_SHARDS",
        type=click.IntRange(1, MAX_SHARDS),
        default=None,
        help="The namespace's shard count (env ASYNCBOOK_SHARDS); default: the count the "
        "namespace stored at its first use (1 when none is).",
    )(command)


def json_option(command: FC) -> FC:
    """The ``--json`` flag of a command."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(command)


def task_or_exit(settings: GroupOptions, task_id: str) -> AsyncTask:
    """The task, or exit 1 naming it when the book does not hold it."""
    with book_errors():
        task = settings.book.get(task_id)
    if task is None:
        fail(f"no task {task_id!r}")
    return task
