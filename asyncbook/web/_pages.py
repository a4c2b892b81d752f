"""The page's HTML, shipped as package data beside this module (``static/``)."""

from __future__ import annotations

from importlib.resources import files

__all__ = ["PAGES", "read_page"]

PAGES = frozenset(
    {"index.html", "task.html", "group.html", "login.html", "workers.html", "stats.html"}
)


def read_page(name: str) -> str:
    """The text of one of ``PAGES``."""
    if name not in PAGES:
        raise KeyError(name)
    return (files("asyncbook.web") / "static" / name).read_text(encoding="utf-8")
