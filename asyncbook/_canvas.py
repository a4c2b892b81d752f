"""A canvas as a graph: the tasks that share a root (a chain, a group, a chord, a task and
the tasks it spawned), their edges by kind, and a layered layout drawn as SVG.

``build_canvas`` takes the members already read (each a task and its info) and is pure:
the status server reads them (``asyncbook.web``'s canvas API, bounded by
``CANVAS_LIMIT``) and this module decides the nodes, the edges and where each is drawn.
``canvas_svg`` draws it server-side (no script): nodes filled by state with a progress
bar, edges styled by kind, columns by depth from the root, one row per node of a column.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from html import escape
from typing import Literal
from urllib.parse import quote

from pydantic import StrictInt, StrictStr

from ._console import TaskInfo
from ._models import STATE_NAMES, AsyncTask, Number, WireModel

__all__ = [
    "CANVAS_LIMIT",
    "EDGE_KINDS",
    "Canvas",
    "CanvasEdge",
    "CanvasMember",
    "CanvasNode",
    "build_canvas",
    "canvas_svg",
]

CANVAS_LIMIT = 2000
"""The most members one canvas reads; a bigger canvas is drawn in part (``truncated``)."""

EDGE_KINDS = ("spawned", "member", "callback")
"""``spawned``: a task published another (a chain's next link, or a task it started:
Celery records both as the child's ``parent_id``); ``member``: a group to one of its
members; ``callback``: a chord's last member to the callback it sent."""

EdgeKind = Literal["spawned", "member", "callback"]

COLUMN_WIDTH, NODE_WIDTH, ROW_HEIGHT, NODE_HEIGHT, MARGIN = 200, 168, 42, 34, 16
LABEL_LIMIT = 22
"""The longest name drawn in a node (characters); longer names end with an ellipsis."""

STATE_COLOURS = {
    "queued": "#e5e7eb",
    "running": "#bfdbfe",
    "succeeded": "#bbf7d0",
    "failed": "#fecaca",
    "expired": "#fde68a",
    "cancelled": "#ddd6fe",
}
"""A node's fill by state (the console's state chips, a shade deeper)."""


class CanvasMember(WireModel):
    """One task of a canvas as read from the book: the task (no history) and its info."""

    task: AsyncTask
    info: TaskInfo


class CanvasNode(WireModel):
    """A node: a task (``kind`` task) or a group its members hang from (``kind`` group,
    ``id`` ``group:<group id>``), and where the layout drew it (column, row)."""

    id: StrictStr
    kind: Literal["task", "group"] = "task"
    name: StrictStr | None = None
    state: StrictStr | None = None
    progress: Number | None = None
    resent: bool = False
    """Sent again already (``retriedAs`` in its info): a canvas resend skips it."""
    column: StrictInt = 0
    row: StrictInt = 0


class CanvasEdge(WireModel):
    """An edge from ``source`` to ``target`` (node ids), by kind (``EDGE_KINDS``)."""

    source: StrictStr
    target: StrictStr
    kind: EdgeKind


class Canvas(WireModel):
    """A canvas: its nodes and edges, its members per state, and whether the members read
    stopped at the limit (``truncated``: the graph is drawn in part)."""

    root_id: StrictStr
    nodes: tuple[CanvasNode, ...]
    edges: tuple[CanvasEdge, ...]
    counts: dict[str, int]
    open: StrictInt
    """Members not yet ended (queued or running)."""
    truncated: bool = False
    limit: StrictInt = CANVAS_LIMIT


def _group_node(group_id: str) -> str:
    return f"group:{group_id}"


def _edges(members: dict[str, CanvasMember]) -> list[CanvasEdge]:
    """A group's edge to each member; a parent's to each child it sent, ``callback`` when
    both are of one group (Celery gives a chord's callback its header's group id: the
    last member to end sends it); a group hangs from its members' parent, if read."""
    edges: list[CanvasEdge] = []
    hung: dict[str, str | None] = {}
    for member in members.values():
        info, group = member.info, member.info.group_id
        parent = members.get(info.parent_id or "")
        if group is not None and parent is not None and parent.info.group_id == group:
            edges.append(CanvasEdge(source=parent.info.id, target=info.id, kind="callback"))
        elif group is not None:
            edges.append(CanvasEdge(source=_group_node(group), target=info.id, kind="member"))
            hung.setdefault(group, None if parent is None else parent.info.id)
        elif parent is not None:
            edges.append(CanvasEdge(source=parent.info.id, target=info.id, kind="spawned"))
    for group, parent_id in hung.items():
        if parent_id is not None:
            edges.append(CanvasEdge(source=parent_id, target=_group_node(group), kind="spawned"))
    return edges


def _layout(ids: list[str], edges: Sequence[CanvasEdge]) -> dict[str, tuple[int, int]]:
    """Column by depth (breadth first from the nodes no edge reaches, in creation order),
    rows in creation order within a column."""
    out: dict[str, list[str]] = {}
    reached: set[str] = set()
    for edge in edges:
        out.setdefault(edge.source, []).append(edge.target)
        reached.add(edge.target)
    depth: dict[str, int] = {}
    starts = [node for node in ids if node not in reached]
    for start in [*starts, *ids]:  # then any node of a cycle no start reaches
        if start in depth:
            continue
        depth[start] = 0
        queue = deque([start])
        while queue:
            node = queue.popleft()
            for target in out.get(node, ()):
                if target not in depth:
                    depth[target] = depth[node] + 1
                    queue.append(target)
    rows: dict[int, int] = {}
    place: dict[str, tuple[int, int]] = {}
    for node in ids:
        column = depth[node]
        place[node] = (column, rows.get(column, 0))
        rows[column] = rows.get(column, 0) + 1
    return place


def build_canvas(
    root_id: str, members: Sequence[CanvasMember], *, truncated: bool = False
) -> Canvas:
    """The graph of ``members`` (in creation order) of the canvas rooted at ``root_id``: a
    node per task and per group, edges by kind (``EDGE_KINDS``), columns by depth."""
    by_id = {member.task.id: member for member in members}
    edges = _edges(by_id)
    ids: dict[str, None] = {}  # groups before their first member, in creation order
    for member in by_id.values():
        group = member.info.group_id
        if group is not None:
            ids.setdefault(_group_node(group))
        ids[member.task.id] = None
    place = _layout(list(ids), edges)
    counts = {state: 0 for state in STATE_NAMES}
    nodes: list[CanvasNode] = []
    for node_id in ids:
        column, row = place[node_id]
        found = by_id.get(node_id)
        if found is None:
            nodes.append(CanvasNode(id=node_id, kind="group", column=column, row=row))
            continue
        state = str(found.task.state)
        counts[state] += 1
        nodes.append(
            CanvasNode(
                id=node_id,
                name=found.info.name,
                state=state,
                progress=found.task.progress,
                resent=found.info.retried_as is not None,
                column=column,
                row=row,
            )
        )
    open_count = counts["queued"] + counts["running"]
    return Canvas(
        root_id=root_id,
        nodes=tuple(nodes),
        edges=tuple(edges),
        counts=counts,
        open=open_count,
        truncated=truncated,
    )


def _label(node: CanvasNode) -> str:
    text = node.id.removeprefix("group:") if node.kind == "group" else (node.name or node.id)
    if node.kind == "group":
        text = f"group {text}"
    return text if len(text) <= LABEL_LIMIT else text[: LABEL_LIMIT - 1] + "\u2026"


_EDGE_STYLE = {
    "spawned": 'stroke="#0969da" stroke-width="1.5"',
    "member": 'stroke="#8250df" stroke-dasharray="4 3"',
    "callback": 'stroke="#bf3989" stroke-width="2" stroke-dasharray="8 3"',
}


def canvas_svg(canvas: Canvas) -> str:
    """The canvas drawn as one SVG document: a node per box (its state's colour, a
    progress bar, its name and state; a link to its task page), edges by kind. The root
    element carries the canvas's root, counts and open members (``data-*``): a page
    needs one request."""
    place = {node.id: node for node in canvas.nodes}
    columns = max((node.column for node in canvas.nodes), default=0) + 1
    rows = max((node.row for node in canvas.nodes), default=0) + 1
    width, height = 2 * MARGIN + columns * COLUMN_WIDTH, 2 * MARGIN + rows * ROW_HEIGHT
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="canvas-graph" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="canvas {escape(canvas.root_id)}: {len(canvas.nodes)} nodes" '
        f'data-root-id="{escape(canvas.root_id)}" data-open="{canvas.open}" '
        f'data-truncated="{str(canvas.truncated).lower()}" data-limit="{canvas.limit}" '
        f'data-counts="{escape(json.dumps(canvas.counts))}">',
        "<style>text{font:11px sans-serif;fill:#1f2328}.state{fill:#57606a}</style>",
    ]
    for edge in canvas.edges:
        source, target = place.get(edge.source), place.get(edge.target)
        if source is None or target is None:
            continue
        x1 = MARGIN + source.column * COLUMN_WIDTH + NODE_WIDTH
        y1 = MARGIN + source.row * ROW_HEIGHT + NODE_HEIGHT // 2
        x2 = MARGIN + target.column * COLUMN_WIDTH
        y2 = MARGIN + target.row * ROW_HEIGHT + NODE_HEIGHT // 2
        parts.append(
            f'<path class="edge {edge.kind}" data-kind="{edge.kind}" fill="none" '
            f'{_EDGE_STYLE[edge.kind]} d="M{x1},{y1} C{x1 + 16},{y1} {x2 - 16},{y2} {x2},{y2}"/>'
        )
    for node in canvas.nodes:
        x, y = MARGIN + node.column * COLUMN_WIDTH, MARGIN + node.row * ROW_HEIGHT
        node_id = escape(node.id)
        fill = STATE_COLOURS.get(node.state or "", "#ffffff")
        title = escape(f"{node.name or ''} {node.id} {node.state or ''}".strip())
        box = (
            f'<rect width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="4" fill="{fill}" '
            'stroke="#57606a"/>'
        )
        if node.kind == "group":
            parts.append(
                f'<g class="node group" data-id="{node_id}" transform="translate({x},{y})">'
                f"<title>{title}</title>{box}"
                f'<text x="6" y="19">{escape(_label(node))}</text></g>'
            )
            continue
        bar = round(NODE_WIDTH * min(max(float(node.progress or 0), 0.0), 100.0) / 100)
        href = "/task?id=" + quote(node.id, safe="")
        parts.append(
            f'<a href="{escape(href)}"><g class="node task" data-id="{node_id}" '
            f'data-state="{escape(node.state or "")}" transform="translate({x},{y})">'
            f"<title>{title}</title>{box}"
            f'<rect class="node-progress" y="{NODE_HEIGHT - 5}" width="{bar}" height="5" '
            'fill="#1f2328" fill-opacity="0.55"/>'
            f'<text x="6" y="13">{escape(_label(node))}</text>'
            f'<text class="node-state" x="6" y="25">{escape(node.state or "")}</text></g></a>'
        )
    parts.append("</svg>")
    return "".join(parts)
