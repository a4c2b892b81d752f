"""The OpenAPI 3.1 description served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

from .._models import AsyncTask, DeliveryResult, ResumeResult
from .._version import __version__

__all__ = ["openapi_schema"]


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = _json(_ref("Error"), "An error")
_TASK_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The task id, percent-encoded (``/`` as ``%2F``).",
    "schema": {"type": "string"},
}


def _components() -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    for model in (AsyncTask, ResumeResult, DeliveryResult):
        schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema
    schemas["Error"] = {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string"},
            "message": {"type": "string"},
            "field": {"type": "string"},
        },
    }
    schemas["TaskPage"] = {
        "type": "object",
        "required": ["tasks"],
        "properties": {
            "tasks": {"type": "array", "items": _ref("AsyncTask")},
            "nextAfter": {"type": "string", "description": "Pass as ``after`` for the next page."},
        },
    }
    return schemas


def openapi_schema() -> dict[str, Any]:
    """The API's description: paths, parameters, responses, and the models' schemas."""
    sse = {"description": "Server-sent events", "content": {"text/event-stream": {}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "asyncbook status server", "version": __version__},
        "components": {
            "schemas": _components(),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/tasks": {
                "get": {
                    "summary": "List tasks, newest first",
                    "parameters": [
                        {"name": "state", "in": "query", "schema": {"type": "string"}},
                        {
                            "name": "limit",
                            "in": "query",
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000},
                        },
                        {"name": "after", "in": "query", "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": _json(_ref("TaskPage"), "One page (tasks without history)"),
                        "400": _ERROR,
                    },
                }
            },
            "/api/tasks/{id}": {
                "get": {
                    "summary": "The task, with its history",
                    "parameters": [_TASK_ID],
                    "responses": {"200": _json(_ref("AsyncTask"), "The task"), "404": _ERROR},
                }
            },
            "/api/tasks/{id}/events": {
                "get": {
                    "summary": "Resume from a version: caught-up, delta or snapshot",
                    "parameters": [
                        _TASK_ID,
                        {"name": "cursor", "in": "query", "schema": {"type": "integer"}},
                    ],
                    "responses": {
                        "200": _json(_ref("ResumeResult"), "The resume"),
                        "400": _ERROR,
                        "404": _ERROR,
                    },
                }
            },
            "/api/tasks/{id}/stream": {
                "get": {
                    "summary": "Server-sent events: snapshot, change, task and end",
                    "description": (
                        "Each event's id is the task version; reconnecting with Last-Event-ID "
                        "resumes (a delta, or a snapshot when too far behind). The stream ends "
                        "with an `end` event once the task is terminal."
                    ),
                    "parameters": [
                        _TASK_ID,
                        {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer"}},
                        {"name": "cursor", "in": "query", "schema": {"type": "integer"}},
                    ],
                    "responses": {"200": sse, "400": _ERROR, "404": _ERROR},
                }
            },
            "/api/tasks/{id}/delivery": {
                "post": {
                    "summary": "Hand the result over once per idempotency key",
                    "parameters": [
                        _TASK_ID,
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                    ],
                    "responses": {
                        "200": _json(_ref("DeliveryResult"), "Delivered (or delivered before)"),
                        "400": _ERROR,
                        "404": _ERROR,
                        "409": _json(_ref("Error"), "Key used for another task, or no result"),
                    },
                }
            },
            "/api/changes": {
                "get": {
                    "summary": "Server-sent events: every change as published",
                    "responses": {"200": sse},
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (no token needed)",
                    "security": [],
                    "responses": {"200": {"description": "Prometheus text"}},
                }
            },
        },
    }
