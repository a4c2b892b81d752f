"""A canvas's graph and its SVG, built from members given in memory (no book)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from asyncbook import TaskInfo
from asyncbook._canvas import CanvasMember, build_canvas, canvas_svg
from asyncbook._models import AsyncState, AsyncTask

SVG = "{http://www.w3.org/2000/svg}"


def member(
    task_id: str,
    parent: str | None = None,
    group: str | None = None,
    state: str = "queued",
    progress: int = 0,
    name: str = "app.step",
) -> CanvasMember:
    task = AsyncTask(
        id=task_id,
        state=AsyncState(state),
        expires_at_ms=10**12,
        attempts=0,
        max_attempts=1,
        progress=progress,
        version=1,
    )
    info = TaskInfo(id=task_id, name=name, parent_id=parent, root_id="r", group_id=group)
    return CanvasMember(task=task, info=info)


def chord_and_chain() -> list[CanvasMember]:
    return [
        member("r", state="succeeded", progress=100),
        member("a", "r", state="running", progress=40),
        member("b", "a"),
        member("m0", "r", "g", state="failed"),
        member("m1", "r", "g", state="succeeded"),
        member("cb", "m1", "g", name="app.total"),
    ]


def test_edges_are_drawn_by_kind_and_columns_by_depth() -> None:
    canvas = build_canvas("r", chord_and_chain())
    edges = {(e.source, e.target, e.kind) for e in canvas.edges}
    assert edges == {
        ("r", "a", "spawned"),
        ("a", "b", "spawned"),
        ("r", "group:g", "spawned"),
        ("group:g", "m0", "member"),
        ("group:g", "m1", "member"),
        ("m1", "cb", "callback"),
    }
    place = {node.id: (node.column, node.row) for node in canvas.nodes}
    assert place == {
        "r": (0, 0),
        "a": (1, 0),
        "group:g": (1, 1),
        "b": (2, 0),
        "m0": (2, 1),
        "m1": (2, 2),
        "cb": (3, 0),
    }
    assert canvas.counts["queued"] == 2
    assert canvas.counts["failed"] == 1
    assert canvas.open == 3  # a (running), b and cb (queued)


def test_a_group_without_a_parent_starts_the_drawing() -> None:
    # A group applied by a client: every member its own root; the callback's root is the
    # last member (as Celery records a chord).
    members = [member("m0", None, "g"), member("m1", None, "g"), member("cb", "m1", "g")]
    canvas = build_canvas("m1", members)
    place = {node.id: node.column for node in canvas.nodes}
    assert place == {"group:g": 0, "m0": 1, "m1": 1, "cb": 2}


def test_the_svg_is_well_formed_escaped_and_links_each_task() -> None:
    members = [*chord_and_chain(), member("x<&>\"'", "r", name="<script>alert(1)</script>")]
    svg = canvas_svg(build_canvas("r", members))
    root = ET.fromstring(svg)  # well-formed: every name and id is escaped
    assert "<script>" not in svg
    tasks = root.findall(f".//{SVG}g[@class='node task']")
    assert len(tasks) == 7
    assert {g.get("data-state") for g in tasks} >= {"succeeded", "running", "failed", "queued"}
    links = [a.get("href") for a in root.iter(f"{SVG}a")]
    assert "/task?id=x%3C%26%3E%22%27" in links
    kinds = {path.get("data-kind") for path in root.iter(f"{SVG}path")}
    assert kinds == {"spawned", "member", "callback"}


def test_500_nodes_stay_readable_labels_cut_and_size_bounded() -> None:
    long = "app." + "x" * 200
    members = [member("r", name=long)]
    members += [member(f"c{n}", "r" if n == 0 else f"c{n - 1}") for n in range(20)]
    members += [member(f"s{n}", f"c{n % 20}") for n in range(479)]
    canvas = build_canvas("r", members)
    assert len(canvas.nodes) == 500
    svg = canvas_svg(canvas)
    root = ET.fromstring(svg)
    assert int(root.get("width") or 0) <= 22 * 200 + 32  # one column per depth
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert max(len(text) for text in texts) <= 22
    assert any(text.endswith("\u2026") for text in texts)
