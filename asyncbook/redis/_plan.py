"""A book operation as a plan: the Redis calls it makes and how it reads their replies.

A plan is a generator that yields requests (a script call, a command, a pipeline of
commands, or ``SETTLE``) and is sent each reply; what it returns is the operation's
answer. It does no I/O itself, so ``RedisBook`` (redis-py) and ``AsyncRedisBook``
(``redis.asyncio``) run the same plans and answer alike: ``run`` and ``run_async`` are
the only code that differs. An error a request meets is thrown into the plan, which may
catch it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ._scripts import BookScript

__all__ = [
    "SETTLE",
    "Command",
    "Pipeline",
    "Plan",
    "Request",
    "ScriptCall",
    "Settle",
    "command",
    "run",
    "run_async",
    "server_command",
    "server_time",
]

_T = TypeVar("_T")


@dataclass(frozen=True)
class ScriptCall:
    """Call the book's script ``name`` (a ``BookScripts`` field) with KEYS and ARGV, or
    ``script``, a script of the caller's registered on the book's client."""

    name: str
    keys: Sequence[str]
    args: Sequence[Any] = ()
    script: BookScript | None = None


@dataclass(frozen=True)
class Command:
    """One client command (a redis-py method name), on the node holding the book."""

    name: str
    args: tuple[Any, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    keyless: bool = False
    """It names no key (TIME, INFO, EVAL of no keys): a Cluster client is told the node."""


def command(name: str, *args: Any, **options: Any) -> Command:
    """``Command(name, args, options)``, written as the call it stands for."""
    return Command(name, args, options)


def server_command(name: str, *args: Any) -> Command:
    """A command that names no key, sent to the node holding the book."""
    return Command(name, args, keyless=True)


@dataclass(frozen=True)
class Pipeline:
    """Commands sent in one round trip (not a transaction); the reply is their list.

    With ``errors_as_replies`` a command the server refuses answers its ``ResponseError``
    in its place (a lost connection is raised all the same)."""

    commands: Sequence[Command]
    errors_as_replies: bool = False


@dataclass(frozen=True)
class Settle:
    """Wait for the creates this process wrote to the book and has no answer for yet."""


SETTLE = Settle()
"""Read-your-writes for a publisher whose creates do not wait (``CreateSender``)."""

Request = ScriptCall | Command | Pipeline | Settle
Plan = Generator[Request, Any, _T]


def _advance(plan: Plan[Any], reply: Any, error: Exception | None) -> tuple[bool, Any]:
    """Hand ``plan`` the reply (or throw it the error): (False, its next request), or
    (True, its answer) once it returned."""
    try:
        return False, plan.send(reply) if error is None else plan.throw(error)
    except StopIteration as stop:
        return True, stop.value


def run(plan: Plan[_T], execute: Callable[[Request], Any]) -> _T:
    """Run ``plan``, each request by ``execute``; returns what the plan returns."""
    done, step = _advance(plan, None, None)
    while not done:
        try:
            reply, error = execute(step), None
        except Exception as met:
            reply, error = None, met
        done, step = _advance(plan, reply, error)
    answer: _T = step
    return answer


async def run_async(plan: Plan[_T], execute: Callable[[Request], Awaitable[Any]]) -> _T:
    """``run`` with an ``execute`` to await (``redis.asyncio``)."""
    done, step = _advance(plan, None, None)
    while not done:
        try:
            reply, error = await execute(step), None
        except Exception as met:
            reply, error = None, met
        done, step = _advance(plan, reply, error)
    answer: _T = step
    return answer


def server_time() -> Plan[int]:
    """The Redis server's clock (TIME) in milliseconds."""
    seconds, micros = yield server_command("time")
    return int(seconds) * 1000 + int(micros) // 1000
