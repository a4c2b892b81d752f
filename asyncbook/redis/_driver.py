"""What the two engines share: ``EngineBase`` (the client, the shard, the scripts), and
the steps that send a plan's request, which ``Engine`` and ``AsyncEngine`` only differ in
how they send.

Here and nowhere else: a script Redis lost (NOSCRIPT: it did not run) runs again by EVAL,
which always runs and caches it again (SCRIPT LOAD then EVALSHA could meet another
client's ``SCRIPT FLUSH`` between them); with ``wait_replicas`` a WAIT follows the
writing scripts in their round trip, on their connection, and its answer is checked
(``ReplicaWait.check``). A book's script goes by FCALL to its function in the book's
library (``_scripts.library``; an ``events_script``'s, its own) while the client can
(``Functions``); "Function not found" (nothing ran) sends FUNCTION LOAD, and the call
goes by EVAL(SHA). A caller's other scripts and all on a Cluster (redis-py would ask the
node for FCALL's keys) go by EVALSHA."""

from __future__ import annotations

import weakref
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import MovedError, NoScriptError, ResponseError

from .._book import CreateSpec
from .._models import AsyncTask
from ._args import utf8_args
from ._creating import create_args
from ._plan import BookScript, Command, Pipeline, Request, ScriptCall, Scripts, command
from ._replicas import ReplicaWait
from ._scripts import BookScripts
from ._shard import Shard

__all__ = ["Call", "EngineBase", "Functions", "Step", "answered", "queued", "script_texts", "steps"]

_T = TypeVar("_T")


_SAID = (
    ("Function not found", "missing"),  # the library: a flush, a restart
    ("unknown command", "unsupported"),  # Redis 6
    ("permissions to run the 'f", "unsupported"),  # ACL: 'fcall', 'fcall_ro', 'function|load'
    ("maxmemory", "maxmemory"),
    ("already exists", "exists"),  # another process loaded the library
)


class Functions:
    """Whether a client's script calls go by FCALL: not on a Cluster, nor once the server
    showed it has no functions (Redis 6, an ACL) or refused the library (``missed``, ``load``)."""

    _of: ClassVar[weakref.WeakKeyDictionary[Any, Functions]] = weakref.WeakKeyDictionary()

    def __init__(self, client: Any) -> None:
        self.on = not isinstance(client, (RedisCluster, AsyncRedisCluster))

    @classmethod
    def of(cls, client: Any) -> Functions:
        return cls._of.setdefault(client, cls(client))

    @staticmethod
    def refusal(reply: Any) -> str:
        """What an error reply to FCALL or FUNCTION LOAD says before anything ran (``_SAID``),
        or "" (anything else, such as an error the function raised)."""
        text = str(reply) if isinstance(reply, ResponseError) else ""
        return next((said for part, said in _SAID if part in text), "")

    def missed(self, reply: Any) -> bool:
        """Whether a FCALL did not run and goes by EVAL(SHA): the library missing, no
        functions (EVALSHA for good), or maxmemory (EVAL without flags may run under it)."""
        said = self.refusal(reply)
        self.on = self.on and said != "unsupported"
        return said in ("missing", "unsupported", "maxmemory")

    def load(self, script: BookScript) -> Steps[None]:
        """FUNCTION LOAD of ``script``'s library, without REPLACE. Refused as "unsupported":
        EVALSHA for good; "exists", "maxmemory": loaded or tried later; anything else (a
        library this server cannot run): EVALSHA for ``script``."""
        try:
            yield Command("function_load", (script.library,), keyless=True)
        except ResponseError as refused:
            said = self.refusal(refused)
            if said == "unsupported":
                self.on = False
            elif said not in ("exists", "maxmemory"):
                script.function = b""


class EngineBase:
    """A book's client, its shard (namespace, key schema, retention, what it learned of
    its tasks) and the scripts, called through this engine."""

    def __init__(self, client: Any, shard: Shard, wait: ReplicaWait | None = None) -> None:
        self.client = client
        self.wait = wait or ReplicaWait()
        self.layout = shard
        self.keys = shard.keys
        self.namespace = shard.namespace
        self.scripts = BookScripts.register(self.execute)
        self.functions = Functions.of(client)

    def execute(self, request: Request) -> Any:
        """One request of a plan, sent on the client (``Engine``, ``AsyncEngine``)."""
        raise NotImplementedError

    def script(self, name: str) -> BookScript:
        """The book's script ``name`` (a ``BookScripts`` field)."""
        script: BookScript = getattr(self.scripts, name)
        return script

    def register(self, source: str) -> BookScript:
        """A script of the caller's, called through this engine (``BookBase.extra_script``)."""
        return BookScript(source, "", self.execute)

    def create_call(self, spec: CreateSpec) -> tuple[AsyncTask, list[str], list[str]]:
        """The task create.lua would store, and the script's KEYS and ARGV."""
        task, keys, args = create_args(self.layout, spec)
        return task, keys, args.argv()


@dataclass(slots=True)
class Call:
    """One command on the client itself (a Cluster client routes it by its first key,
    and follows MOVED)."""

    command: Command


Step = Call | Command | Pipeline
"""What a driver sends: a ``Command`` alone or a ``Pipeline`` goes to the book's node (on
a Cluster, the node of the book's slot)."""
Steps = Generator[Step, Any, _T]
"""A request as the steps that send it (run by ``_plan.run``, ``run_async``)."""

_MULTI = command("execute_command", "MULTI")
_EXEC = command("execute_command", "EXEC")


def steps(engine: EngineBase, request: ScriptCall | Scripts) -> Steps[Any]:
    """The steps that send a script call (or several together), and its answer."""
    if isinstance(request, Scripts):
        calls, transaction = list(request.calls), request.transaction
    elif engine.wait.waits_after(request.name):
        calls, transaction = [request], False
    else:  # alone: routed by its first key (one of no keys: to the book's node)
        script = request.script or engine.script(request.name)
        if engine.functions.on and script.function:
            try:
                return (yield _alone(_fcall(script, request), request))
            except ResponseError as error:
                if not engine.functions.missed(error):
                    raise
                if Functions.refusal(error) == "missing":
                    yield from engine.functions.load(script)
        try:
            return (yield _alone(_evalsha(script, request), request))
        except NoScriptError:  # not run: EVAL runs it and caches it again
            return (yield _alone(_eval(script, request), request))
    if not calls:
        return []
    replies, acknowledged = yield from _sent(engine, calls, transaction)
    if isinstance(request, ScriptCall) and isinstance(replies[0], Exception):
        raise replies[0]
    if acknowledged is not None:
        engine.wait.check(acknowledged)
    return replies if isinstance(request, Scripts) else replies[0]


def _sent(
    engine: EngineBase, calls: Sequence[ScriptCall], transaction: bool
) -> Steps[tuple[list[Any], Any]]:
    """The calls' replies (errors in place) and, when one of them writes and the book
    waits for replicas, WAIT's answer (else None). The book's scripts go by FCALL where
    the client can; the calls that did not run (NOSCRIPT, the library missing, refused
    for maxmemory; in a transaction, all of a transaction refused) go again by EVAL in a
    second round trip (WAIT behind it too; in a transaction, as ``Scripts`` says, with
    only the first call of each script carrying its source)."""
    waits = any(engine.wait.waits_after(call.name) for call in calls)
    scripts = [call.script or engine.script(call.name) for call in calls]
    replies: list[Any] = [None] * len(calls)
    todo = list(range(len(calls)))
    by_function = [engine.functions.on and bool(script.function) for script in scripts]
    again = False
    while True:
        commands: list[Command] = []
        loaded: set[str] = set()
        for at in todo:
            script, call = scripts[at], calls[at]
            by_source = again and not (transaction and script.sha in loaded)
            loaded.add(script.sha)
            if again or not by_function[at]:
                commands.append(_eval(script, call) if by_source else _evalsha(script, call))
            else:
                commands.append(_fcall(script, call))
        try:
            got, acknowledged = yield from _round(engine, commands, transaction, waits)
            missed = [
                at
                for at, reply in zip(todo, got, strict=True)
                if _missed(engine, reply, by_function[at] and not again)
            ]
        except ResponseError as refused:  # a transaction refused before it ran: all again
            if again or not (any(by_function) and engine.functions.missed(refused)):
                raise
            got, acknowledged, missed = [refused] * len(todo), None, list(todo)
        for at, reply in zip(todo, got, strict=True):
            replies[at] = reply
        if again or not missed:
            return replies, acknowledged
        lost = [scripts[at] for at in missed if Functions.refusal(replies[at]) == "missing"]
        for script in {script.library: script for script in lost}.values():
            yield from engine.functions.load(script)
        again = True
        todo = todo[todo.index(missed[0]) :] if transaction else missed


def _missed(engine: EngineBase, reply: Any, by_function: bool) -> bool:
    """Whether a call of a round did not run, and goes again by EVAL."""
    return isinstance(reply, NoScriptError) or (by_function and engine.functions.missed(reply))


def _round(
    engine: EngineBase, commands: list[Command], transaction: bool, waits: bool
) -> Steps[tuple[list[Any], Any]]:
    """One round trip of ``commands``, WAIT behind them if ``waits``."""
    if not waits:
        return list((yield Pipeline(commands, True, transaction))), None
    wait = command("wait", engine.wait.replicas, engine.wait.timeout_ms)
    if not transaction:
        *replies, acknowledged = yield Pipeline([*commands, wait], True)
        return replies, acknowledged
    # MULTI ... EXEC then WAIT, sent by hand on one connection (redis-py's transaction
    # pipeline can put nothing behind its EXEC).
    *queued, executed, acknowledged = yield Pipeline([_MULTI, *commands, _EXEC, wait], True)
    if isinstance(executed, Exception):
        # EXECABORT: say why (a Cluster node's MOVED after a failover, else the first
        # refusal, as redis-py does).
        refusals = [reply for reply in queued if isinstance(reply, ResponseError)]
        moved = [reply for reply in refusals if isinstance(reply, MovedError)]
        raise (moved or refusals or [executed])[0]
    return list(executed), acknowledged


def _alone(sent: Command, call: ScriptCall) -> Step:
    """A script call sent alone (``steps``)."""
    return Call(sent) if call.keys else sent


def script_texts(call: ScriptCall) -> list[Any]:
    """A call's KEYS then ARGV as sent: the book's own texts as UTF-8 bytes (redis-py sends
    bytes cheapest, and in no encoding of its own), a caller's script's as given."""
    texts = [*call.keys, *call.args]
    return texts if call.script is not None else utf8_args(texts)


def _evalsha(script: BookScript, call: ScriptCall) -> Command:
    return command("evalsha", script.sha, len(call.keys), *script_texts(call))


def _fcall(script: BookScript, call: ScriptCall) -> Command:
    return command(script.fcall, script.function, len(call.keys), *script_texts(call))


def _eval(script: BookScript, call: ScriptCall) -> Command:
    return command("eval", script.source, len(call.keys), *script_texts(call))


def queued(engine: EngineBase, request: Request) -> list[Command] | None:
    """The commands that send ``request`` in one pipeline with other plans' requests
    (``run_together``); None for one that goes alone (script calls together, a
    transaction, ``SETTLE``)."""
    if isinstance(request, ScriptCall):
        script = request.script or engine.script(request.name)
        by_function = engine.functions.on and script.function
        return [_fcall(script, request) if by_function else _evalsha(script, request)]
    if isinstance(request, Command):
        return [request]
    if isinstance(request, Pipeline) and not request.transaction:
        return list(request.commands)
    return None


def answered(
    engine: EngineBase, request: Request, replies: list[Any]
) -> tuple[Any, Exception | None]:
    """What ``request`` met, from its replies in a pipeline with others (``queued``): as
    sent alone, its reply or the error to throw into its plan."""
    if isinstance(request, Pipeline):
        errors = [reply for reply in replies if isinstance(reply, ResponseError)]
        if errors and not request.errors_as_replies:
            return None, errors[0]
        return replies, None
    reply = replies[0]
    if _missed(engine, reply, True):  # not run: alone, it runs as ``steps`` sends it
        try:
            return engine.execute(request), None
        except Exception as met:  # thrown into the plan, as run alone
            return None, met
    if isinstance(reply, ResponseError):
        return None, reply
    return reply, None
