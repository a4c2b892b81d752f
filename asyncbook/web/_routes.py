"""The route table's vocabulary: an ``Operation`` (method, path, handler, its models and
answers), a ``Page``, and the Starlette routes a table becomes (``starlette_routes``).

Task and group URLs are matched on the raw path (``RawRoute``, see ``_paths``): their
id may hold ``/`` or a newline, which Starlette's path patterns, matched on the decoded
path, would misread. Everything else is a plain Starlette ``Route``; Starlette's router
picks the route and answers 405 (with ``Allow``) for a method a path does not take.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

from ._paths import IdUrls, raw_path
from ._schemas import Error

__all__ = [
    "ERROR",
    "SSE",
    "Answer",
    "Endpoint",
    "Operation",
    "Page",
    "RawRoute",
    "open_paths",
    "json_answer",
    "page_paths",
    "read_answers",
    "starlette_routes",
]

Endpoint = Callable[[Request], Awaitable[Response]]


@dataclass(frozen=True)
class Answer:
    """One documented response: what it means, and its body (a model, or a media type
    with no schema; ``media=None``: no body documented)."""

    description: str
    model: type[BaseModel] | None = None
    media: str | None = "application/json"
    headers: Mapping[str, Any] = field(default_factory=dict)


def json_answer(model: type[BaseModel], description: str) -> Answer:
    """A documented JSON answer whose body is ``model``."""
    return Answer(description, model)


def read_answers(model: type[BaseModel], ok: str, bad: str) -> dict[int, Answer]:
    """A read's answers: 200 with ``model`` (``ok`` says what it holds), or 400 with an
    ``Error`` (``bad`` says which parameter it names)."""
    return {200: json_answer(model, ok), 400: json_answer(Error, bad)}


ERROR = Answer("An error", Error)
SSE = Answer("Server-sent events", media="text/event-stream")
STREAMS_FULL = Answer(
    "Unavailable: the most event streams this server holds are open (Retry-After), or the "
    "book is unreachable",
    Error,
)


@dataclass(frozen=True)
class Operation:
    """One method on one path: its handler, and everything the API document says of it.

    ``open``: no token needed (``/metrics``, the health check, sign-in). Every other
    operation answers 401 without a valid token, so its 401 is documented for it.
    ``signin``: served only when the server has a token (documented always). ``raw``:
    the path's ``{id}`` is matched and read on the raw path (``_paths``). ``deprecated``:
    an old name kept for a while (the API document says so).
    """

    method: str
    path: str
    handler: Endpoint
    summary: str
    answers: Mapping[int, Answer]
    description: str | None = None
    path_params: type[BaseModel] | None = None
    headers: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    body: type[BaseModel] | None = None
    body_media: str = "application/json"
    body_required: bool = False
    open: bool = False
    signin: bool = False
    raw: IdUrls | None = None
    deprecated: bool = False

    @classmethod
    def at(
        cls,
        route: str,
        handler: Endpoint,
        summary: str,
        answers: Mapping[int, Answer],
        **options: Any,
    ) -> Operation:
        """``route`` is the method and the path: ``"GET /api/tasks"``."""
        method, path = route.split(" ", 1)
        return cls(method, path, handler, summary, answers, **options)


@dataclass(frozen=True)
class Page:
    """An HTML page (not in the API document): GET and HEAD only; with a token, a request
    without one is sent to the sign-in form."""

    path: str
    handler: Endpoint
    raw: IdUrls | None = None


class RawRoute(Route):
    """A Starlette route whose ``{id}`` is matched on the raw path: ``urls`` says which
    prefix, and the suffix after the id is the one ``path`` ends in (if any).

    HEAD is answered as GET without being named in a 405's ``Allow`` (as ever here).
    """

    def __init__(
        self,
        path: str,
        endpoint: Endpoint,
        urls: IdUrls,
        methods: Iterable[str] = ("GET",),
        include_in_schema: bool = True,
    ) -> None:
        super().__init__(path, endpoint, methods=list(methods), include_in_schema=include_in_schema)
        self.methods = set(methods)
        self.urls = urls
        tail = path.split("{id}", 1)[1]
        self.suffix = tail.lstrip("/") or None

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        inside, suffix = self.urls.suffix(raw_path(scope))
        if not inside or suffix != self.suffix:
            return Match.NONE, {}
        child = {"endpoint": self.endpoint, "path_params": {}}
        return (Match.FULL if self._takes(scope) else Match.PARTIAL), child

    def _takes(self, scope: Scope) -> bool:
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        return method in (self.methods or ())

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._takes(scope):
            allowed = ", ".join(sorted(self.methods or ()))
            raise HTTPException(status_code=405, headers={"Allow": allowed})
        await self.app(scope, receive, send)


def starlette_routes(table: Iterable[Operation | Page], signin: bool) -> list[BaseRoute]:
    """The table's routes; operations on one path with one handler share a route (so a
    405's ``Allow`` names all their methods). ``signin``: the server has a token."""
    methods: dict[tuple[str, Endpoint], list[str]] = {}
    first: dict[tuple[str, Endpoint], Operation | Page] = {}
    for entry in table:
        if isinstance(entry, Operation) and entry.signin and not signin:
            continue
        key = (entry.path, entry.handler)
        methods.setdefault(key, []).append(entry.method if isinstance(entry, Operation) else "GET")
        first.setdefault(key, entry)
    routes: list[BaseRoute] = []
    for key, entry in first.items():
        schema = isinstance(entry, Operation)
        if entry.raw is not None:
            route: Route = RawRoute(entry.path, entry.handler, entry.raw, methods[key], schema)
        else:
            route = Route(entry.path, entry.handler, methods=methods[key], include_in_schema=schema)
        routes.append(route)
    return routes


def open_paths(table: Iterable[Operation | Page]) -> frozenset[str]:
    """Paths that need no token."""
    return frozenset(e.path for e in table if isinstance(e, Operation) and e.open)


def page_paths(table: Iterable[Operation | Page]) -> tuple[frozenset[str], tuple[str, ...]]:
    """The pages' paths, and the prefixes of the pages with an id in their path."""
    pages = [e for e in table if isinstance(e, Page)]
    plain = frozenset(p.path for p in pages if p.raw is None)
    return plain, tuple(p.raw.prefix for p in pages if p.raw is not None)
