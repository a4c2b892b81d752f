"""The page's HTML, shipped as package data beside this module (``static/``).

The console's pages share one head and header (``static/shell.html``): each page's file
holds its ``<main>`` only, and ``read_page`` puts it in the shell with the page's title,
its place in the navigation and its scripts. A change's dialog (a cancel, a retry, a
search's retry) asks for the same fields, under ids that ``common.js``'s change dialog
finds by prefix: a page says ``{{change-fields:<prefix>}}`` and gets
``static/change-fields.html`` with that prefix, and ``{{change-buttons:...}}`` its confirm and
keep buttons (``static/change-buttons.html``). The sign-in form is a page of its own.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import NamedTuple

__all__ = ["NAV", "PAGES", "read_page"]


class Shelled(NamedTuple):
    """A page in the shell: its title, the nav link it is (if any), its own scripts."""

    title: str
    current: str | None
    scripts: tuple[str, ...]


NAV = (("/", "Tasks"), ("/workers", "Workers"), ("/stats", "Stats"), ("/queues", "Queues"))
"""The console's navigation: path and label."""
_SHELLED = {
    "index.html": Shelled("tasks", "/", ("index.js", "bulk-resend.js")),
    "task.html": Shelled("task", None, ("task.js",)),
    "group.html": Shelled("group", None, ("group.js",)),
    "canvas.html": Shelled("canvas", None, ("canvas.js",)),
    "workers.html": Shelled("workers", "/workers", ("workers.js",)),
    "stats.html": Shelled("stats", "/stats", ("charts.js", "stats.js")),
    "queues.html": Shelled("queues", "/queues", ("queues.js",)),
}
PAGES = frozenset({*_SHELLED, "login.html"})


def _static(name: str) -> str:
    return (files("asyncbook.web") / "static" / name).read_text(encoding="utf-8")


def _nav(current: str | None) -> str:
    links = []
    for path, label in NAV:
        mark = ' aria-current="page"' if path == current else ""
        links.append(f'<a href="{path}"{mark}>{label}</a>')
    return "".join(links)


_CHANGE_FIELDS = re.compile(r"\{\{change-fields:([a-z]+)\}\}")
_CHANGE_BUTTONS = re.compile(r"\{\{change-buttons:([a-z]+)( danger)?:([^:}]+):([^:}]+)\}\}")


def _buttons(found: re.Match[str]) -> str:
    """A change dialog's confirm and keep buttons: ``{{change-buttons:<prefix>:<confirm
    label>:<keep label>}}`` (``<prefix> danger``: the confirm button marked so)."""
    prefix, danger, confirm, keep = found.groups()
    return (
        _static("change-buttons.html")
        .removesuffix("\n")
        .replace("{{prefix}}", prefix)
        .replace("{{class}}", ' class="danger"' if danger else "")
        .replace("{{confirm}}", confirm)
        .replace("{{keep}}", keep)
    )


def _main(name: str) -> str:
    """The page's ``<main>``, each change dialog's fields and buttons in place."""
    fields = _static("change-fields.html").removesuffix("\n")
    main = _CHANGE_FIELDS.sub(lambda found: fields.replace("{{prefix}}", found[1]), _static(name))
    return _CHANGE_BUTTONS.sub(_buttons, main)


def read_page(name: str) -> str:
    """The text of one of ``PAGES`` (a console page inside the shell)."""
    if name not in PAGES:
        raise KeyError(name)
    page = _SHELLED.get(name)
    if page is None:
        return _static(name)
    scripts = "".join(f'<script src="/static/{script}"></script>\n' for script in page.scripts)
    return (
        _static("shell.html")
        .replace("{{title}}", page.title)
        .replace("{{nav}}", _nav(page.current))
        .replace("{{scripts}}", scripts)
        .replace("{{main}}", _main(name))
    )
