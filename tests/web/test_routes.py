"""The route table: every route the app serves is in ``/openapi.json``, and every
documented operation is served (the document is generated from the same table)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from asyncbook import MemoryBook
from asyncbook.redis import RedisBook
from asyncbook.web import BackgroundServer, create_app
from asyncbook.web._routes import RawRoute

from ..support.books import redis_client

TOKEN = "t" * 32
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(params=["memory", "redis"])
def book(request: pytest.FixtureRequest, namespace: str) -> Iterator[MemoryBook | RedisBook]:
    if request.param == "memory":
        yield MemoryBook()
        return
    client = redis_client()
    try:
        yield RedisBook(client, namespace=namespace)
    finally:
        client.close()


def served(app: Starlette) -> tuple[set[tuple[str, str]], list[Route | Mount]]:
    """``(method, path)`` of every route in the schema; and the routes left out of it."""
    operations: set[tuple[str, str]] = set()
    left_out: list[Route | Mount] = []
    for route in app.routes:
        assert isinstance(route, Route | Mount), route
        if isinstance(route, Mount) or not route.include_in_schema:
            left_out.append(route)
            continue
        for method in route.methods or ():
            if method != "HEAD":
                operations.add((method.lower(), route.path))
    return operations, left_out


@contextlib.contextmanager
def running(
    book: MemoryBook | RedisBook, token: str | None = None
) -> Iterator[tuple[Starlette, httpx.Client]]:
    with (
        BackgroundServer(book, token=token) as server,
        httpx.Client(base_url=server.url.rstrip("/"), timeout=10) as client,
    ):
        yield server.app, client


def documented(client: httpx.Client) -> set[tuple[str, str]]:
    document = client.get("/openapi.json", headers=HEADERS).json()
    return {(method, path) for path, item in document["paths"].items() for method in item}


@pytest.mark.parametrize("token", [None, TOKEN])
def test_every_route_is_documented_and_every_operation_served(
    book: MemoryBook | RedisBook, token: str | None
) -> None:
    with running(book, token) as (app, client):
        operations, left_out = served(app)
        paths = documented(client)
        assert operations, "no routes found"
        assert operations <= paths, sorted(operations - paths)
        missing = paths - operations
        if token:
            assert not missing, sorted(missing)
        else:  # sign-in is documented, and served once the server has a token
            assert missing == {("get", "/login"), ("post", "/login"), ("post", "/logout")}
        # What the document leaves out: the pages (HTML) and their static assets.
        for route in left_out:
            if isinstance(route, Mount):
                assert route.path == "/static"
                continue
            path = route.path.replace("{id}", "x")
            answer = client.get(path, headers=HEADERS, follow_redirects=False)
            assert answer.status_code == 200, path
            assert answer.headers["content-type"].startswith("text/html"), path


def test_the_console_is_in_the_document_only_over_a_book_that_keeps_info(
    book: MemoryBook | RedisBook,
) -> None:
    with running(book) as (_, client):
        paths = {path for _, path in documented(client)}
    console = {"/api/search", "/api/workers", "/api/stats", "/api/names"}
    assert (console <= paths) is isinstance(book, RedisBook)
    assert not (console & paths) or isinstance(book, RedisBook)


def test_id_routes_are_matched_on_the_raw_path(book: MemoryBook | RedisBook) -> None:
    app = create_app(book)
    raw = {route.path for route in app.routes if isinstance(route, RawRoute)}
    # Resend (and its old name, retry) is served over a book that keeps task info.
    for name in ("resend", "retry"):
        assert (f"/api/tasks/{{id}}/{name}" in raw) is isinstance(book, RedisBook)
        raw.discard(f"/api/tasks/{{id}}/{name}")
    # So are the canvas routes (a canvas is found through its tasks' info).
    canvas = {"/canvas/{id}", "/api/canvas/{id}"}
    canvas |= {f"/api/canvas/{{id}}/{suffix}" for suffix in ("svg", "cancel", "resend")}
    assert (canvas <= raw) is isinstance(book, RedisBook)
    raw -= canvas
    assert raw == {
        "/api/tasks/{id}",
        "/api/tasks/{id}/events",
        "/api/tasks/{id}/stream",
        "/api/tasks/{id}/delivery",
        "/api/tasks/{id}/cancel",
        "/api/tasks/{id}/audit",
        "/api/tasks/{id}/output",
        "/api/tasks/{id}/output-stream",
        "/api/tasks/{id}/result",
        "/api/groups/{id}",
        "/api/groups/{id}/stream",
        "/groups/{id}",
    }


def test_documented_answers_hold_their_rules(book: MemoryBook | RedisBook) -> None:
    with running(book, TOKEN) as (_, client):
        document = client.get("/openapi.json", headers=HEADERS).json()
    schemas = document["components"]["schemas"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            secured = operation.get("security", document["security"])
            assert ("401" in operation["responses"]) or not secured, (method, path)
            for answer in operation["responses"].values():
                for media in answer.get("content", {}).values():
                    ref = media.get("schema", {}).get("$ref")
                    if ref is not None:
                        assert ref.rsplit("/", 1)[1] in schemas, (method, path, ref)
            for parameter in operation.get("parameters", ()):
                assert "title" not in parameter["schema"], (method, path)
                if parameter["in"] == "path":
                    assert parameter["required"] is True
    assert "/logout" in document["paths"]


HAND_WRITTEN = {
    # (method, path): (the answers and the parameters the hand-written document gave)
    ("get", "/api/changes"): ("200 401", ""),
    ("get", "/api/groups/{id}"): ("200 400 401 404", "id limit"),
    ("get", "/api/groups/{id}/stream"): ("200 400 401 404", "id"),
    ("get", "/api/health"): ("200 503", ""),
    ("get", "/api/names"): ("200 401", ""),
    ("get", "/api/search"): ("200 400 401", "name state worker q since until sort limit after"),
    ("get", "/api/stats"): ("200 400 401", "name window"),
    ("get", "/api/tasks"): ("200 400 401", "name state worker q since until sort limit after"),
    ("get", "/api/tasks/{id}"): ("200 400 401 404", "id"),
    ("post", "/api/tasks/{id}/cancel"): ("200 400 401 403 404 405 409 413 415", "id"),
    ("post", "/api/tasks/{id}/delivery"): ("200 400 401 404 409", "id Idempotency-Key"),
    ("get", "/api/tasks/{id}/events"): ("200 400 401 404", "id cursor"),
    ("get", "/api/tasks/{id}/stream"): ("200 400 401 404", "id Last-Event-ID cursor"),
    ("get", "/api/workers"): ("200 400 401", "within"),
    ("post", "/login"): ("303 401 403 413 429", ""),
    ("post", "/logout"): ("303 403", ""),
    ("get", "/metrics"): ("200", ""),
    ("get", "/openapi.json"): ("200 401", ""),
}
HAND_WRITTEN_SCHEMAS = (
    "AsyncState",
    "AsyncTask",
    "CallbackResult",
    "CancelEvent",
    "CancelRefusal",
    "CancelRequest",
    "DeliveryReceipt",
    "DeliveryResult",
    "Error",
    "ExpireEvent",
    "FailEvent",
    "GroupDetail",
    "GroupSummary",
    "HistoryEntry",
    "MinuteStats",
    "ProgressEvent",
    "Reason",
    "ResumeResult",
    "SearchPage",
    "SearchRow",
    "StartEvent",
    "SucceedEvent",
    "TaskInfo",
    "TaskPage",
    "TaskStats",
    "TaskWithInfo",
    "WorkerSummary",
)


def test_the_generated_document_says_all_the_hand_written_one_did(namespace: str) -> None:
    """Every answer, parameter and schema the hand-written document (before the route
    table) gave is still there, over a book with a console."""
    client = redis_client()
    try:
        with running(RedisBook(client, namespace=namespace)) as (_, http):
            document = http.get("/openapi.json").json()
    finally:
        client.close()
    for (method, path), (answers, parameters) in HAND_WRITTEN.items():
        operation = document["paths"][path][method]
        assert set(answers.split()) <= set(operation["responses"]), (method, path)
        names = [p["name"] for p in operation.get("parameters", ())]
        assert names == parameters.split(), (method, path)
    assert set(HAND_WRITTEN_SCHEMAS) <= set(document["components"]["schemas"])
