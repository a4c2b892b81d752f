"""A shard's plan: the Redis calls an operation makes on one shard and how it reads their
replies (a namespace plan, ``_merged``, asks for these shard by shard).

A plan is a generator that yields requests (a script call, script calls sent together,
a command, a pipeline of commands, or ``SETTLE``) and is sent each reply (an error a
request meets is thrown into it); what it returns is the operation's answer. It does no
I/O, so ``Engine`` and ``AsyncEngine`` run the same plans alike. What a request costs
beyond its commands (EVAL after NOSCRIPT, WAIT for replicas, the node of a Cluster's
slot) is the engines' (``_driver``), never a plan's."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "SETTLE",
    "BookScript",
    "Command",
    "Pipeline",
    "Plan",
    "Request",
    "ScriptCall",
    "Scripts",
    "Settle",
    "advance",
    "command",
    "run",
    "run_async",
    "server_command",
    "server_time",
]

_T = TypeVar("_T")
_R = TypeVar("_R")


class BookScript:
    """One script: its source, the SHA1 Redis knows it by and, for one of the book's own,
    its name (a ``BookScripts`` field; '' for a caller's script) and its function in a
    library, if any. Calling it runs it through the engine that made it, as a
    ``ScriptCall`` (``_driver``)."""

    function, fcall, library = b"", "fcall", ""
    """Its function, how it is called and the library's source (``_scripts.in_library``)."""

    def __init__(
        self, source: str, name: str = "", run: Callable[[ScriptCall], Any] | None = None
    ) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8")).hexdigest()
        self.sha_bytes = self.sha.encode()
        """``sha`` as bytes, as the engine sends it."""
        self.name = name
        self.run = run
        """The engine's ``execute`` (an ``AsyncEngine``'s answers an awaitable)."""

    def __call__(self, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        if self.run is None:
            raise TypeError("this BookScript belongs to no engine: yield a ScriptCall")
        return self.run(ScriptCall(self.name, keys, args, script=self))


@dataclass(slots=True)
class ScriptCall:
    """Call the book's script ``name`` (a ``BookScripts`` field) with KEYS and ARGV, or
    ``script``, a script of the caller's registered on the book's client."""

    name: str
    keys: Sequence[str]
    args: Sequence[Any] = ()
    script: BookScript | None = None


@dataclass(slots=True)
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


@dataclass(slots=True)
class Pipeline:
    """Commands sent in one round trip on the book's node; the reply is their list.

    With ``errors_as_replies`` a command the server refuses answers its ``ResponseError``
    in its place (a lost connection is raised all the same)."""

    commands: Sequence[Command]
    errors_as_replies: bool = False
    transaction: bool = False
    """In one MULTI/EXEC: nothing runs between them."""


@dataclass(slots=True)
class Scripts:
    """Script calls sent together in one round trip; the reply is their list, each call's
    reply or the ``ResponseError`` it met in its place (a lost connection is raised).

    Each call runs as a ``ScriptCall`` alone would: a script Redis lost (NOSCRIPT) runs
    all the same, and with ``wait_replicas`` one WAIT follows them all (too few replicas
    raise ``NotReplicatedError``). With ``transaction`` they run in one MULTI/EXEC, in
    order; after NOSCRIPT the calls from the first that met it on run again, in a second
    transaction (a call after it may so run twice: make such a script safe to)."""

    calls: Sequence[ScriptCall]
    transaction: bool = False


@dataclass(slots=True)
class Settle:
    """Wait for the creates this process wrote to the book and has no answer for yet."""


SETTLE = Settle()
"""Read-your-writes for a publisher whose creates do not wait (``CreateSender``)."""

Request = ScriptCall | Scripts | Command | Pipeline | Settle
Plan = Generator[Request, Any, _T]


def advance(
    plan: Generator[Any, Any, Any], reply: Any, error: Exception | None
) -> tuple[bool, Any]:
    """Hand ``plan`` the reply (or throw it the error): (False, its next request), or
    (True, its answer) once it returned."""
    try:
        return False, plan.send(reply) if error is None else plan.throw(error)
    except StopIteration as stop:
        return True, stop.value


def run(plan: Generator[_R, Any, _T], execute: Callable[[_R], Any]) -> _T:
    """Run ``plan``, each request by ``execute``; returns what the plan returns. (Written
    as one loop: it is on the path of every call.)"""
    send, throw = plan.send, plan.throw
    try:
        step = send(None)
        while True:
            try:
                reply = execute(step)
            except Exception as met:
                step = throw(met)
            else:
                step = send(reply)
    except StopIteration as stop:
        answer: _T = stop.value
        return answer


async def run_async(plan: Generator[_R, Any, _T], execute: Callable[[_R], Awaitable[Any]]) -> _T:
    """``run`` with an ``execute`` to await (``redis.asyncio``)."""
    done, step = advance(plan, None, None)
    while not done:
        try:
            reply, error = await execute(step), None
        except Exception as met:
            reply, error = None, met
        done, step = advance(plan, reply, error)
    answer: _T = step
    return answer


def server_time() -> Plan[int]:
    """The Redis server's clock (TIME) in milliseconds."""
    seconds, micros = yield server_command("time")
    return int(seconds) * 1000 + int(micros) // 1000
