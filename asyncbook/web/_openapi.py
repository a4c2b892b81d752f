"""The OpenAPI 3.1 description served at ``/openapi.json``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .._checks import MAX_PAGE
from .._console import RUNTIME_BUCKETS_MS, SearchPage, TaskInfo, TaskStats, WorkerSummary
from .._models import (
    STATE_NAMES,
    AsyncTask,
    CallbackResult,
    DeliveryResult,
    GroupSummary,
    ResumeResult,
)
from .._reasons import Reason
from .._version import __version__
from ._cancel import CANCEL_BODY_LIMIT, MAX_REASON
from ._console_api import DEFAULT_STATS_WINDOW_MS, MAX_PARAMETER
from ._groups import GROUP_MEMBERS
from ._health import HEALTH_OPENAPI, HEALTH_PATH
from ._login import LOGIN_BODY_LIMIT
from ._sse import MAX_CURSOR

__all__ = ["openapi_schema"]


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = _json(_ref("Error"), "An error")
_UNAUTHORIZED = _json(
    _ref("Error"), "No valid bearer token (only when the server has one); code `unauthorized`"
)
_CURSOR = {"type": "integer", "minimum": 0, "maximum": MAX_CURSOR}
_TASK_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": "The task id, percent-encoded (``/`` as ``%2F``).",
    "schema": {"type": "string"},
}
_GROUP_ID = {
    "name": "id",
    "in": "path",
    "required": True,
    "description": (
        "The group id, percent-encoded like a task id (``/`` as ``%2F``; ``.`` and ``..`` "
        "in the query after an empty segment: ``/api/groups//stream?id=..``)."
    ),
    "schema": {"type": "string"},
}


def _components(console: bool) -> dict[str, Any]:
    schemas: dict[str, Any] = {}
    models: tuple[type[BaseModel], ...] = (
        AsyncTask,
        ResumeResult,
        DeliveryResult,
        CallbackResult,
        GroupSummary,
    )
    if console:
        models += (TaskInfo, SearchPage, WorkerSummary, TaskStats)
    for model in models:
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
    schemas["CancelRefusal"] = {
        "type": "object",
        "required": ["code", "message", "state"],
        "properties": {
            "code": {
                "type": "string",
                "enum": [str(Reason.TERMINAL_CONFLICT), str(Reason.EXPIRED)],
            },
            "message": {"type": "string"},
            "state": {
                "type": "string",
                "enum": list(STATE_NAMES),
                "description": "The state the task is in (it ended otherwise, or expired).",
            },
        },
    }
    schemas["CancelRequest"] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "reason": {
                "type": ["string", "null"],
                "maxLength": MAX_REASON,
                "description": (
                    "Why, kept as the task's `error` (absent, null or blank: `cancelled`)."
                ),
            }
        },
    }
    schemas["GroupDetail"] = {
        "allOf": [
            _ref("GroupSummary"),
            {
                "type": "object",
                "required": ["tasks"],
                "properties": {
                    "tasks": {
                        "type": "array",
                        "items": _ref("AsyncTask"),
                        "description": (
                            "The first members in creation order (`limit` of them at most), "
                            "without history; `members` counts them all."
                        ),
                    }
                },
            },
        ]
    }
    schemas["TaskPage"] = {
        "type": "object",
        "required": ["tasks"],
        "properties": {
            "tasks": {"type": "array", "items": _ref("AsyncTask")},
            "nextAfter": {"type": "string", "description": "Pass as ``after`` for the next page."},
        },
    }
    if console:
        schemas["TaskWithInfo"] = {
            "allOf": [
                _ref("AsyncTask"),
                {
                    "type": "object",
                    "required": ["info"],
                    "properties": {"info": _ref("TaskInfo")},
                },
            ]
        }
    return schemas


def _query(name: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": "query", "description": description, "schema": schema}


_TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_PARAMETER}
_DURATION = {"type": "string", "pattern": "^[0-9]{1,12}(ms|s|m|h|d)?$"}
_MOMENT_HELP = (
    "ms since the epoch, a duration ago (`10m`, `2h`, `1d`: now minus that) or an ISO-8601 "
    "time (UTC unless it names an offset)."
)


def _search_parameters() -> list[dict[str, Any]]:
    """The query parameters of a search (``/api/search``; ``/api/tasks`` with a console)."""
    return [
        _query("name", "Only tasks of this Celery task name.", _TEXT),
        _query(
            "state",
            "Only tasks in this state.",
            {"type": "string", "enum": list(STATE_NAMES)},
        ),
        _query("worker", "Only tasks run by this worker.", _TEXT),
        _query("q", "Only task ids starting with this.", _TEXT),
        _query("since", "Created at or after: " + _MOMENT_HELP, {"type": "string"}),
        _query("until", "Created at or before: " + _MOMENT_HELP, {"type": "string"}),
        _query(
            "sort",
            "By creation time.",
            {"type": "string", "enum": ["newest", "oldest"], "default": "newest"},
        ),
        _query(
            "limit",
            "Page size.",
            {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50},
        ),
        _query("after", "The previous page's `nextAfter`.", {"type": "string"}),
    ]


def _console_paths() -> dict[str, Any]:
    """The console's endpoints (only over a book that keeps task info)."""
    return {
        "/api/search": {
            "get": {
                "summary": "Search tasks: filters, sort, and totals per state for the filter",
                "description": (
                    "Filters combine (AND); empty values are ignored. Each row is the task "
                    "(without history) and its info. `totals` counts every match per state; "
                    "`totalsExact` is false when they were counted over the first candidates "
                    "only (a worker, id-prefix or time filter over many tasks)."
                ),
                "parameters": _search_parameters(),
                "responses": {
                    "200": _json(_ref("SearchPage"), "One page, and totals per state"),
                    "400": _json(_ref("Error"), "A bad parameter; `field` names it"),
                    "401": _UNAUTHORIZED,
                },
            }
        },
        "/api/workers": {
            "get": {
                "summary": "Workers seen recently, most recently seen first",
                "parameters": [
                    _query(
                        "within",
                        "Seen within this long (`90s`, `10m`, `1h`, `1d`; at most 7d); default 1d.",
                        _DURATION,
                    )
                ],
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["workers"],
                            "properties": {
                                "workers": {"type": "array", "items": _ref("WorkerSummary")}
                            },
                        },
                        "The workers",
                    ),
                    "400": _json(_ref("Error"), "A bad `within`"),
                    "401": _UNAUTHORIZED,
                },
            }
        },
        "/api/stats": {
            "get": {
                "summary": "Per-minute counts and runtime percentiles over a window ending now",
                "description": (
                    "One `minutes` entry per minute of the window, oldest first (zeros "
                    "included). Runtime buckets are counts per upper bound in "
                    f"`runtimeBucketsMs` ({', '.join(map(str, RUNTIME_BUCKETS_MS))} ms), "
                    "then the rest."
                ),
                "parameters": [
                    _query("name", "One task name (every name when absent).", _TEXT),
                    _query(
                        "window",
                        f"How far back, from 1m to 24h (default {DEFAULT_STATS_WINDOW_MS} ms, 1h).",
                        _DURATION,
                    ),
                ],
                "responses": {
                    "200": _json(_ref("TaskStats"), "The stats"),
                    "400": _json(_ref("Error"), "A bad `name` or `window`"),
                    "401": _UNAUTHORIZED,
                },
            }
        },
        "/api/names": {
            "get": {
                "summary": "Task names seen within the book's retention, sorted",
                "responses": {
                    "200": _json(
                        {
                            "type": "object",
                            "required": ["names"],
                            "properties": {"names": {"type": "array", "items": {"type": "string"}}},
                        },
                        "The names",
                    ),
                    "401": _UNAUTHORIZED,
                },
            }
        },
    }


def openapi_schema(console: bool = False) -> dict[str, Any]:
    """The API's description: paths, parameters, responses, and the models' schemas.

    ``console``: the book keeps task info, so the console's endpoints are served.
    """
    sse = {"description": "Server-sent events", "content": {"text/event-stream": {}}}
    task = _json(_ref("TaskWithInfo" if console else "AsyncTask"), "The task")
    schema: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "asyncbook status server", "version": __version__},
        "components": {
            "schemas": _components(console),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": {
            "/api/tasks": {
                "get": {
                    "summary": "List tasks, newest first",
                    "parameters": [
                        {
                            "name": "state",
                            "in": "query",
                            "description": "Only tasks in this state (all when absent or empty).",
                            "schema": {"type": "string", "enum": list(STATE_NAMES)},
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "description": "Page size.",
                            "schema": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": MAX_PAGE,
                                "default": 50,
                            },
                        },
                        {
                            "name": "after",
                            "in": "query",
                            "description": "The previous page's `nextAfter`.",
                            "schema": {"type": "string"},
                        },
                    ],
                    "responses": {
                        "200": _json(_ref("TaskPage"), "One page (tasks without history)"),
                        "400": _ERROR,
                        "401": _UNAUTHORIZED,
                    },
                }
            },
            "/api/tasks/{id}": {
                "get": {
                    "summary": "The task, with its history (and its `info`, when kept)",
                    "parameters": [_TASK_ID],
                    "responses": {
                        "200": task,
                        "400": _ERROR,
                        "401": _UNAUTHORIZED,
                        "404": _ERROR,
                    },
                }
            },
            "/api/tasks/{id}/events": {
                "get": {
                    "summary": "Resume from a version: caught-up, delta or snapshot",
                    "parameters": [
                        _TASK_ID,
                        {"name": "cursor", "in": "query", "schema": _CURSOR},
                    ],
                    "responses": {
                        "200": _json(_ref("ResumeResult"), "The resume"),
                        "400": _ERROR,
                        "401": _UNAUTHORIZED,
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
                        {"name": "Last-Event-ID", "in": "header", "schema": _CURSOR},
                        {"name": "cursor", "in": "query", "schema": _CURSOR},
                    ],
                    "responses": {
                        "200": sse,
                        "400": _ERROR,
                        "401": _UNAUTHORIZED,
                        "404": _ERROR,
                    },
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
                            "description": (
                                "Names this delivery: the same key gives the same receipt "
                                "again, and is refused (409) for another task. Sent as UTF-8 "
                                "bytes (400 when they are not UTF-8); not blank."
                            ),
                            "schema": {"type": "string", "minLength": 1, "pattern": "\\S"},
                            "example": "order-7",
                        },
                    ],
                    "responses": {
                        "200": _json(_ref("DeliveryResult"), "Delivered (or delivered before)"),
                        "400": _ERROR,
                        "401": _UNAUTHORIZED,
                        "404": _ERROR,
                        "409": _json(_ref("Error"), "Key used for another task, or no result"),
                    },
                }
            },
            "/api/tasks/{id}/cancel": {
                "post": {
                    "summary": "Cancel a queued or running task",
                    "description": (
                        "Writes `cancelled` to the book (once: a second cancel answers "
                        "`duplicate-cancel`); workers learn of it through the change channel. "
                        "The body is optional (empty, or JSON). Needs the bearer token when "
                        "the server has one (the sign-in cookie never authorizes a change); "
                        "a browser request from another site is refused (403)."
                    ),
                    "parameters": [_TASK_ID],
                    "requestBody": {
                        "required": False,
                        "content": {"application/json": {"schema": _ref("CancelRequest")}},
                    },
                    "responses": {
                        "200": _json(
                            _ref("CallbackResult"),
                            "Cancelled (reason `cancelled`), or cancelled before "
                            "(`duplicate-cancel`)",
                        ),
                        "400": _json(
                            _ref("Error"), "A bad reason (field `reason`) or body (field `body`)"
                        ),
                        "401": _UNAUTHORIZED,
                        "403": _json(_ref("Error"), "Sent from another site; code `cross-site`"),
                        "404": _json(_ref("Error"), "No such task"),
                        "405": _json(_ref("Error"), "Another method (`Allow: POST`)"),
                        "409": _json(
                            _ref("CancelRefusal"),
                            "Not cancelled: the task had ended otherwise (`terminal-conflict`), "
                            "or its deadline had passed and it expired (`expired`)",
                        ),
                        "413": _json(
                            _ref("Error"), f"A body larger than {CANCEL_BODY_LIMIT} bytes"
                        ),
                        "415": _json(_ref("Error"), "A body that is not sent as JSON"),
                    },
                }
            },
            "/api/groups/{id}": {
                "get": {
                    "summary": "A group: counts by state, mean progress, and its first members",
                    "description": (
                        "The group's counters (one O(1) lookup) and its first `limit` members "
                        "in creation order, without history. `total` is absent until the "
                        "group's size is declared; `ended` once every declared member ended."
                    ),
                    "parameters": [
                        _GROUP_ID,
                        {
                            "name": "limit",
                            "in": "query",
                            "description": "How many members to list.",
                            "schema": {
                                "type": "integer",
                                "minimum": 1,
                                "maximum": MAX_PAGE,
                                "default": GROUP_MEMBERS,
                            },
                        },
                    ],
                    "responses": {
                        "200": _json(_ref("GroupDetail"), "The group"),
                        "400": _json(_ref("Error"), "A bad id (field `groupId`) or `limit`"),
                        "401": _UNAUTHORIZED,
                        "404": _json(_ref("Error"), "No such group; code `not-found`"),
                    },
                }
            },
            "/api/groups/{id}/stream": {
                "get": {
                    "summary": "Server-sent events: group, member, resync and end",
                    "description": (
                        "First a `group` event (the GroupSummary). Then, whenever members "
                        "change, a `member` event per changed member (the task without "
                        "history; its `id:` is the member's version) followed by a `group` "
                        "event; bursts are coalesced, so a member may skip versions. "
                        "`resync` (data `{}`) says changes may have been missed (the server's "
                        "change feed reconnected): reload the members. `end` (data "
                        "`{groupId, total, counts}`) follows the summary once the group has "
                        "ended, and closes the stream. There is no resume: a reconnect "
                        "(Last-Event-ID is ignored) starts over with the summary. A group "
                        "that is not sealed never ends."
                    ),
                    "parameters": [_GROUP_ID],
                    "responses": {
                        "200": sse,
                        "400": _ERROR,
                        "401": _UNAUTHORIZED,
                        "404": _json(_ref("Error"), "No such group; code `not-found`"),
                    },
                }
            },
            "/api/changes": {
                "get": {
                    "summary": "Server-sent events: every change as published",
                    "responses": {"200": sse, "401": _UNAUTHORIZED},
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics (no token needed)",
                    "security": [],
                    "responses": {"200": {"description": "Prometheus text"}},
                }
            },
            "/openapi.json": {
                "get": {
                    "summary": "This description",
                    "responses": {
                        "200": {"description": "OpenAPI 3.1 JSON"},
                        "401": _UNAUTHORIZED,
                    },
                }
            },
            "/login": {
                "post": {
                    "summary": "Sign the page in (only when the server has a token)",
                    "security": [],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/x-www-form-urlencoded": {
                                "schema": {
                                    "type": "object",
                                    "required": ["token"],
                                    "properties": {
                                        "token": {"type": "string"},
                                        "next": {
                                            "type": "string",
                                            "description": "A path on this site to go to",
                                        },
                                    },
                                }
                            }
                        },
                    },
                    "responses": {
                        "303": {"description": "Signed in: a session cookie, then `next`"},
                        "401": {"description": "Not the token: the form again"},
                        "403": _ERROR,
                        "413": _json(_ref("Error"), f"A body larger than {LOGIN_BODY_LIMIT} bytes"),
                        "429": {
                            "description": "Too many failed attempts from this address",
                            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
                        },
                    },
                }
            },
            "/logout": {
                "post": {
                    "summary": "End the page's session",
                    "security": [],
                    "responses": {"303": {"description": "Signed out"}, "403": _ERROR},
                }
            },
        },
    }
    schema["paths"][HEALTH_PATH] = HEALTH_OPENAPI
    if console:
        schema["paths"].update(_console_paths())
        listing = schema["paths"]["/api/tasks"]["get"]
        listing["parameters"] = _search_parameters()
        listing["description"] = (
            "The search's filters (as `/api/search`); each task also carries its `info`, "
            "and the answer `totals` per state for the filter and `totalsExact`."
        )
    return schema
