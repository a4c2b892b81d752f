"""The scripted walk-through runs and tells one task's whole life."""

from __future__ import annotations

from asyncbook import MemoryBook
from asyncbook._walkthrough import walk


def test_walkthrough_tells_the_whole_life() -> None:
    lines: list[str] = []
    walk(MemoryBook(retention_versions=3), lines.append)
    text = "\n".join(lines)
    for expected in [
        "requeued",
        "duplicate-callback",
        "delta",
        "snapshot",
        "delivered",
        "duplicate-delivery",
    ]:
        assert expected in text
    assert sum("notification:" in line for line in lines) == 1
