"""The canvas routes: ``/canvas/<id>`` (the page), ``GET /api/canvas/<id>`` (the graph),
``GET /api/canvas/<id>/svg`` (drawn), and the operator's ``POST .../cancel`` and
``POST .../resend``; ``route_table`` mounts them over a book that keeps task info."""

from __future__ import annotations

from typing import Any

from .._canvas import CANVAS_LIMIT, Canvas
from ._cancel import CANCEL_BODY_LIMIT
from ._canvas_api import CanvasApi, CanvasCancel, CanvasIdPath
from ._paths import CANVASES
from ._resend import RESEND_BATCH, ResendBatch, ResendRequest
from ._routes import Answer, Operation, Page, json_answer
from ._schemas import CancelRequest, Error

__all__ = ["canvas_operations"]

_CANVAS_HELP = (
    "The canvas the task is part of, from its root (`rootId`, Celery's `root_id`): every "
    "task reached from it through the tasks each published (a chain's next link, a "
    "spawned task, a chord's callback) and each group's members, as `nodes` (tasks, and "
    "`group:<id>` nodes) with their state, progress and place (`column`: depth from the "
    "root, `row`), and `edges` by kind: `spawned` (a chain's next link, or a task "
    "another started), "
    "`member` (a group's), `callback` (a chord's). At most "
    f"{CANVAS_LIMIT} members are read; `truncated` says the canvas has more."
)
_CHANGE_HELP = (
    "Needs the operator role; a browser request from another site is refused (403). The "
    "body is optional (`reason`). "
)


def canvas_operations(api: CanvasApi) -> list[Operation | Page]:
    """The canvas page and API over ``api``."""
    ids: dict[str, Any] = {"path_params": CanvasIdPath, "raw": CANVASES}
    no_task = json_answer(Error, "No such task; code `not-found`, field `rootId`")
    bad = json_answer(Error, "A bad id (field `rootId`)")
    change = {
        400: json_answer(Error, "A bad id (`rootId`), reason (`reason`) or body (`body`)"),
        403: json_answer(
            Error, "Another site's request (`cross-site`) or no operator role (`forbidden`)"
        ),
        404: no_task,
        413: json_answer(Error, f"A body larger than {CANCEL_BODY_LIMIT} bytes"),
        415: json_answer(Error, "A body that is not sent as JSON"),
    }
    return [
        Operation.at(
            "GET /api/canvas/{id}",
            api.get_canvas,
            "A canvas (chain, group, chord, spawned tasks) as a graph",
            {200: json_answer(Canvas, "The graph"), 400: bad, 404: no_task},
            description=_CANVAS_HELP,
            **ids,
        ),
        Operation.at(
            "GET /api/canvas/{id}/svg",
            api.get_svg,
            "A canvas drawn as SVG (nodes by state and progress, edges by kind)",
            {200: Answer("The drawing", media="image/svg+xml"), 400: bad, 404: no_task},
            **ids,
        ),
        Operation.at(
            "POST /api/canvas/{id}/cancel",
            api.cancel,
            "Cancel every open (queued or running) member of a canvas",
            {200: json_answer(CanvasCancel, "The members cancelled, and refused"), **change},
            description=_CHANGE_HELP
            + "Each cancel is on its task's audit trail. Only the members read are "
            + f"cancelled: at most {CANVAS_LIMIT} (`truncated` says there were more).",
            body=CancelRequest,
            **ids,
        ),
        Operation.at(
            "POST /api/canvas/{id}/resend",
            api.resend,
            "Resend every failed member of a canvas not resent yet",
            {
                200: json_answer(ResendBatch, "One outcome per failed member"),
                503: json_answer(Error, "No broker (`no-broker`)"),
                **change,
            },
            description=_CHANGE_HELP
            + f"At most {RESEND_BATCH} a call (`nextAfter` set: call again); each resend "
            "is on its task's audit trail.",
            body=ResendRequest,
            **ids,
        ),
    ]
