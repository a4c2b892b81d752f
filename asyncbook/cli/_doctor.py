"""``asyncbook doctor``: check a deployment, name each problem with its fix.

The checks read, never write (``CONFIG GET``, ``INFO``, ``TIME``, ``EXISTS``,
``FUNCTION LIST``): the server (kind, version, scripting, the book's Functions libraries
of other versions), what it does when memory runs out, whether it keeps
anything across a restart, this host's clock against the server's, whether the
namespace was ever written, whether the sweep runs; with a Celery app (``-A proj``) also
whether its ``asyncbook_*`` settings read, whether a worker consumes asyncbook's queue,
and whether the sinks are reachable (and the webhooks signed).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, cast, runtime_checkable
from urllib.parse import urlsplit

import redis

from .._health import sweep_health
from .._sinks import resolve_sink, shown_webhook_url
from ..errors import AsyncBookError
from ..redis import DEFAULT_REDIS_URL, RedisBook
from ..redis._replies import text_of
from ..redis._scripts import library

__all__ = ["Check", "app_book", "app_checks", "book_checks", "load_app"]

Status = Literal["ok", "warning", "problem", "skipped"]
CLOCK_LIMIT_MS = 1000
"""A clock further off the server's than this is a problem (deadlines use the host's)."""
MIN_VERSIONS = {"redis": (7, 0), "valkey": (8, 1)}
"""The oldest version of each server kind the book is tested on."""


@dataclass(frozen=True)
class Check:
    """One check's answer: ``problem`` fails the command, ``fix`` says what to do."""

    name: str
    status: Status
    detail: str
    fix: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The check as JSON (``fix`` only when there is one)."""
        return {key: value for key, value in asdict(self).items() if value is not None}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


def server_check(info: dict[str, Any]) -> Check:
    """Which server answers (Redis, Valkey, Dragonfly) and whether its version is tested."""
    if "dragonfly_version" in info:
        return Check(
            "server",
            "problem",
            f"Dragonfly {info['dragonfly_version']}: not a tested server",
            "use Redis 7.0+ or Valkey 8.1+ (see the README's supported servers)",
        )
    kind = "valkey" if "valkey_version" in info or info.get("server_name") == "valkey" else "redis"
    version = str(info.get("valkey_version") or info.get("redis_version") or "?")
    name = f"{kind.capitalize()} {version}"
    oldest = MIN_VERSIONS[kind]
    if _version(version) < oldest:
        wanted = ".".join(map(str, oldest))
        return Check("server", "problem", f"{name} is older than {wanted}", f"upgrade to {wanted}+")
    return Check("server", "ok", name)


def scripting_check(client: redis.Redis) -> Check:
    """Whether the server runs Lua scripts (every write of the book is one)."""
    try:
        client.eval("return 1", 0)
    except redis.ResponseError as error:
        return Check(
            "scripting",
            "problem",
            f"the server runs no Lua scripts ({error})",
            "use a server built with scripting, and an ACL user allowed EVAL/EVALSHA",
        )
    return Check("scripting", "ok", "Lua scripts run")


def functions_check(client: Any) -> Check:
    """The book's Redis Functions libraries of other asyncbook versions than this one
    (``asyncbook_<sha>`` with an ``_apply`` function): each stays loaded, in the server's
    Lua memory, until deleted."""
    if isinstance(client, redis.RedisCluster):
        return Check("functions", "skipped", "a Cluster: the book calls its scripts by EVALSHA")
    try:
        listed = client.function_list(library="asyncbook_*")
    except redis.ResponseError:
        return Check("functions", "skipped", "no Redis Functions here: scripts go by EVALSHA")
    current, others = library("")[0], []
    for entry in map(_fields, listed):
        name = text_of(entry["library_name"])
        if name != current and f"{name}_apply" in {
            text_of(_fields(function)["name"]) for function in entry["functions"]
        }:
            others.append(name)
    if not others:
        return Check("functions", "ok", f"the book's library of this version: {current}")
    return Check(
        "functions",
        "warning",
        f"{len(others)} library(ies) of other asyncbook versions loaded, in the server's Lua"
        " memory",
        "once no process of those versions runs: "
        + "; ".join(f"FUNCTION DELETE {name}" for name in others)
        + " (a process that still calls one loads it again)",
    )


def _fields(reply: Any) -> dict[str, Any]:
    """A reply's map (RESP3) or flat list of names and values (RESP2), by name."""
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
    return {text_of(key): value for key, value in pairs}


def _config(client: redis.Redis, name: str) -> str | None:
    """``CONFIG GET name``, or None where CONFIG is refused (managed services)."""
    try:
        value = client.config_get(name).get(name)
    except redis.ResponseError:
        return None
    return None if value is None else str(value)


def eviction_check(client: redis.Redis) -> Check:
    """``maxmemory-policy`` must be ``noeviction``: an evicted key is a lost task record."""
    policy = _config(client, "maxmemory-policy")
    if policy is None:
        return Check(
            "eviction",
            "skipped",
            "CONFIG GET is not allowed here",
            "check your provider's eviction setting is noeviction",
        )
    if policy == "noeviction":
        return Check("eviction", "ok", "maxmemory-policy noeviction")
    fix = "CONFIG SET maxmemory-policy noeviction (and set it in redis.conf)"
    if (_config(client, "maxmemory") or "0") == "0":
        detail = f"maxmemory-policy {policy}: no limit is set yet, but one would evict records"
        return Check("eviction", "warning", detail, fix)
    detail = f"maxmemory-policy {policy}: the server evicts keys when memory runs out"
    return Check("eviction", "problem", detail, fix)


def persistence_check(client: redis.Redis) -> Check:
    """AOF or RDB snapshots: a server with neither loses every record at its next restart."""
    appendonly, save = _config(client, "appendonly"), _config(client, "save")
    if appendonly is None:
        aof = client.info("persistence").get("aof_enabled")
        if aof == 1:
            return Check("persistence", "ok", "AOF")
        return Check(
            "persistence",
            "skipped",
            "CONFIG GET is not allowed here and AOF is off",
            "check your provider keeps snapshots or AOF",
        )
    if appendonly == "yes":
        return Check("persistence", "ok", "AOF" + (f" and RDB snapshots ({save})" if save else ""))
    if save:
        return Check(
            "persistence", "ok", f"RDB snapshots ({save}): writes since the last one are lost"
        )
    return Check(
        "persistence",
        "problem",
        "neither AOF nor RDB snapshots: every record is lost at the next restart",
        "CONFIG SET appendonly yes, then CONFIG REWRITE (or appendonly yes in redis.conf)",
    )


def clock_check(client: redis.Redis, clock: Callable[[], float] = time.time) -> Check:
    """This host's clock against the server's (TIME), from the round trip's midpoint."""
    before = clock()
    seconds, micros = client.time()
    after = clock()
    server_ms = int(seconds) * 1000 + int(micros) / 1000
    offset = server_ms - (before + after) * 500
    trip = (after - before) * 1000
    detail = f"this host is {-offset:+.0f} ms off the server (round trip {trip:.1f} ms)"
    if abs(offset) > CLOCK_LIMIT_MS:
        return Check(
            "clock",
            "problem",
            detail,
            "sync this host's clock (NTP): publishers set deadlines by it",
        )
    return Check("clock", "ok", detail)


def _namespaces(client: redis.Redis, limit: int = 10_000) -> list[str]:
    """Namespaces written in this database (their creation counters, a sharded one's
    shard count), up to ``limit`` keys of each."""
    found: set[str] = set()
    for pattern in ("{*}:seq", "{*}:shards"):
        for index, key in enumerate(client.scan_iter(match=pattern, count=1000)):
            text = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            found.add(text[1 : text.rindex("}")])
            if index >= limit:
                break
    return sorted(found)


def namespace_check(book: RedisBook) -> Check:
    """A namespace never written answers every read empty: most likely the wrong one."""
    keys = book.keys
    if book.client.exists(
        keys.sequence, keys.last_sweep, keys.deadlines, keys.outbox, keys.shard_count
    ):
        return Check("namespace", "ok", f"{book.namespace!r} holds tasks")
    others = [name for name in _namespaces(book.client) if name != book.namespace]
    known = f"; namespaces written here: {', '.join(others[:10])}" if others else ""
    return Check(
        "namespace",
        "problem",
        f"namespace {book.namespace!r} has never been written{known}",
        "pass the namespace your app uses (--namespace, ASYNCBOOK_NAMESPACE, or -A proj)",
    )


def sweep_check(book: RedisBook) -> Check:
    """When a sweep last ran, and how many tasks wait for one."""
    health = sweep_health(book)
    fix = (
        "start a worker (or beat) of an app that calls asyncbook.celery.install(app) "
        "with asyncbook_worker_sweep on (the default)"
    )
    age = health.sweep_age_ms
    if age is None:
        detail = f"no sweep has ever run; {health.overdue} task(s) past their deadline"
        return Check("sweep", "problem" if health.overdue else "warning", detail, fix)
    detail = f"last sweep {age / 1000:.1f} s ago; {health.overdue} task(s) past their deadline"
    if not health.ok:
        return Check("sweep", "problem", detail, fix)
    if health.stopped:
        return Check("sweep", "warning", detail + " (no sweep for over 30 s)", fix)
    return Check("sweep", "ok", detail)


def book_checks(book: RedisBook) -> Iterator[Check]:
    """The checks of the book's server and namespace; stops early if Redis cannot be read."""
    client = book.client
    try:
        info = client.info("server")
    except redis.RedisError as error:
        yield Check(
            "server",
            "problem",
            f"cannot reach the book's Redis: {error}",
            "check --redis-url (ASYNCBOOK_REDIS_URL) or the app's asyncbook_redis_url",
        )
        return
    yield server_check(info)
    yield scripting_check(client)
    yield functions_check(client)
    yield eviction_check(client)
    yield persistence_check(client)
    yield clock_check(client)
    yield namespace_check(book)
    if book.shards > 1:
        yield shards_check(book)
    yield sweep_check(book)


def shards_check(book: RedisBook) -> Check:
    """Which node holds which shards of a sharded namespace (``shard_map``)."""
    nodes = "; ".join(
        f"{node} holds {', '.join(map(str, shards))}" for node, shards in book.shard_map().items()
    )
    return Check("shards", "ok", f"{book.shards} shards: {nodes}")


def load_app(name: str) -> Any:
    """The Celery app ``-A name`` names, found as ``celery -A`` finds it (from the cwd)."""
    from celery.app.utils import find_app

    return find_app(name)


def _reachable(url: str, timeout: float) -> str | None:
    """None if a TCP connection to the URL's host opens, else why not."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return None
    except OSError as error:
        return str(error) or type(error).__name__


def sink_checks(sinks: tuple[Any, ...], timeout: float, secrets: int = 0) -> Iterator[Check]:
    """Each sink: a webhook whose host accepts a connection (signed with ``secrets``
    secrets, if any), or a callable that imports."""
    if not sinks:
        yield Check("sinks", "ok", "none configured: notifications wait in the outbox")
        return
    signed = f"signed with {secrets} secret(s)" if secrets else "unsigned"
    for spec in sinks:
        if isinstance(spec, str) and spec.startswith(("http://", "https://")):
            why = _reachable(spec, timeout)
            shown = shown_webhook_url(spec)  # never its credentials
            if why is None:
                yield Check("sink", "ok", f"{shown} accepts connections; {signed}")
            else:
                fix = "check the URL, DNS and firewall from the workers' hosts"
                yield Check("sink", "problem", f"{shown} unreachable: {why}", fix)
            continue
        try:
            resolve_sink(spec)
        except Exception as error:
            fix = "fix asyncbook_sinks: a callable, a dotted path to one, or a webhook URL"
            yield Check("sink", "problem", f"{spec!r} does not load: {error}", fix)
        else:
            yield Check("sink", "ok", f"{spec!r} loads")


def queue_check(app: Any, queue: str, worker_sweep: bool, timeout: float) -> Check:
    """Which workers answer, and whether one consumes asyncbook's queue."""
    try:
        answers = app.control.inspect(timeout=timeout).active_queues() or {}
    except Exception as error:  # the broker refused or is unreachable
        fix = "check the app's broker_url"
        return Check("workers", "problem", f"cannot ask the workers: {error!r}", fix)
    if not answers:
        return Check(
            "workers",
            "problem",
            f"no worker answered within {timeout} s",
            "start one: celery -A <your app> worker (beat alone does not run tasks)",
        )
    consumers = sorted(
        worker
        for worker, queues in answers.items()
        if any(entry.get("name") == queue for entry in queues or ())
    )
    workers = f"{len(answers)} worker(s) answered"
    if consumers:
        return Check("queue", "ok", f"{workers}; {', '.join(consumers)} consume {queue!r}")
    fix = f"add it to a worker: celery -A <your app> worker -Q <your queues>,{queue}"
    if worker_sweep:
        detail = (
            f"{workers}; none consumes {queue!r}: the workers sweep and deliver in their main "
            "process, but beat's asyncbook.sweep/deliver messages wait in that queue"
        )
        return Check("queue", "warning", detail, fix)
    detail = f"{workers}; none consumes {queue!r} and asyncbook_worker_sweep is off: no sweep"
    return Check("queue", "problem", detail, fix)


@runtime_checkable
class _OnRedis(Protocol):
    """A book on a Redis server, whose client the doctor asks (a ``RedisBook`` of any
    layout; a ``MemoryBook`` has none)."""

    client: Any
    shards: int

    def shard_map(self) -> dict[str, list[int]]: ...


def app_book(app: Any) -> RedisBook | None:
    """The book ``install(app)`` built (from the app's settings), if it is on Redis."""
    from ..celery import installed

    integration = installed(app)
    try:
        book = None if integration is None else integration.book
    except AsyncBookError:  # a setting that does not read: app_checks names it
        return _conf_book(app)
    return cast(RedisBook, book) if isinstance(book, _OnRedis) else None


def _conf_book(app: Any) -> RedisBook | None:
    """The app's book as its ``asyncbook_redis_url`` and ``asyncbook_namespace`` name it,
    read from ``app.conf`` alone (another of its settings does not read)."""
    conf = app.conf
    broker = str(conf.get("broker_url") or "")
    url = conf.get("asyncbook_redis_url") or (
        broker if broker.startswith(("redis://", "rediss://")) else DEFAULT_REDIS_URL
    )
    namespace = conf.get("asyncbook_namespace") or "asyncbook"
    try:
        return RedisBook.from_url(str(url), namespace=str(namespace))
    except AsyncBookError:
        return None


def app_checks(app: Any, timeout: float) -> Iterator[Check]:
    """The checks that need the Celery app: installed, its workers' queues, its sinks."""
    from ..celery import installed

    integration = installed(app)
    if integration is None:
        yield Check(
            "install",
            "problem",
            f"the app {app.main!r} did not call install()",
            "call asyncbook.celery.install(app) where the app is made",
        )
        return
    try:
        settings = integration.settings
    except AsyncBookError as error:
        fix = f"fix {error.field}" if error.field else "fix the app's asyncbook_* settings"
        yield Check("settings", "problem", str(error), fix)
        return
    yield Check("install", "ok", f"installed; namespace {settings.namespace!r}")
    yield queue_check(app, settings.queue, settings.worker_sweep, timeout)
    sinks = settings.sinks + settings.group_sinks
    yield from sink_checks(sinks, timeout, len(settings.webhook_secrets))
