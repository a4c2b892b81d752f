"""The OpenAPI document says what the server does, on the cases schemathesis found
(``test_schemathesis.py`` runs it whole, in ``make test-long``): an answer the document
describes, a parameter value it allows is accepted, one it does not allow is refused."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema_rs
import pytest

from ..support.web_server import Running


def document(client: httpx.Client) -> dict[str, Any]:
    answer: dict[str, Any] = client.get("/openapi.json").json()
    return answer


def valid(doc: dict[str, Any], schema: dict[str, Any], value: object) -> bool:
    root = {**schema, "components": doc["components"]}
    return bool(jsonschema_rs.validator_for(root).is_valid(value))


def parameter(doc: dict[str, Any], path: str, name: str, method: str = "get") -> dict[str, Any]:
    operation = doc["paths"][path][method]
    found: dict[str, Any] = next(p for p in operation["parameters"] if p["name"] == name)
    return found["schema"]  # type: ignore[no-any-return]


def test_the_stats_answer_is_what_the_document_says(server: Running, client: httpx.Client) -> None:
    doc = document(client)
    answer = doc["paths"]["/api/stats"]["get"]["responses"]["200"]
    schema = answer["content"]["application/json"]["schema"]
    every = client.get("/api/stats").json()
    assert "name" not in every  # every name: left out, so not required
    assert valid(doc, schema, every)
    assert valid(doc, schema, client.get("/api/stats", params={"name": "app.add"}).json())


ALLOWED = [
    ("/api/stats", "window", ""),
    ("/api/stats", "window", "24h"),
    ("/api/workers", "within", ""),
    ("/api/workers", "within", "7d"),
    ("/api/search", "worker", ""),
    ("/api/search", "q", ""),
    ("/api/search", "sort", ""),
    ("/api/search", "since", " 1819\n"),
    ("/api/search", "until", "2024-02-28T23:59:59.5+14:00"),
    ("/api/audit", "since", "10m"),
    ("/api/audit", "limit", ""),
    ("/api/queues", "limit", ""),
]
REFUSED = [
    ("/api/stats", "window", "0"),
    ("/api/stats", "window", "14128884h"),
    ("/api/workers", "within", "785199654973"),
    ("/api/audit", "since", "\U00023f53\xc7>\x06"),
    ("/api/search", "since", "none"),
    ("/api/queues", "queue", "\x18bad"),
]


@pytest.mark.parametrize(("path", "name", "value"), ALLOWED)
def test_what_the_document_allows_is_accepted(
    client: httpx.Client, path: str, name: str, value: str
) -> None:
    schema = parameter(document(client), path, name)
    assert valid({"components": {}}, schema, value if schema.get("type") != "array" else [value])
    assert client.get(path, params={name: value}).status_code == 200


@pytest.mark.parametrize(("path", "name", "value"), REFUSED)
def test_what_the_document_refuses_is_refused(
    client: httpx.Client, path: str, name: str, value: str
) -> None:
    schema = parameter(document(client), path, name)
    given: object = [value] if schema.get("type") == "array" else value
    assert not valid({"components": {}}, schema, given)
    assert client.get(path, params={name: value}).status_code == 400


def test_a_blank_group_id_is_outside_the_document_and_refused(client: httpx.Client) -> None:
    schema = parameter(document(client), "/api/groups/{id}/stream", "id")
    assert not valid({"components": {}}, schema, "\t")
    assert client.get("/api/groups/%09/stream").status_code == 400


def test_until_before_since_matches_nothing(server: Running, client: httpx.Client) -> None:
    answer = client.get("/api/tasks", params={"since": "2000", "until": "1000"})
    assert answer.status_code == 200
    assert answer.json()["tasks"] == []


def test_a_stream_checks_its_cursor_beside_last_event_id(client: httpx.Client) -> None:
    response = client.get(
        "/api/tasks/x/stream", params={"cursor": "null"}, headers={"Last-Event-ID": "0"}
    )
    assert response.status_code == 400
