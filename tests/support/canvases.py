"""Canvases seeded in a book as the Celery integration records them (no Celery app): a
root that spawned a chain and a chord (a group and its callback), and a big one."""

from __future__ import annotations

from asyncbook import PublishInfo, RedisBook

HOUR_MS = 3_600_000


def seeded(
    book: RedisBook,
    task_id: str,
    root: str,
    parent: str | None = None,
    group: str | None = None,
    name: str = "app.step",
    at: int = 0,
    message: str | None = None,
) -> None:
    """Task ``task_id`` created as Celery publishes it (``root_id``, ``parent_id``; its
    message kept when ``message``, a ``KeptMessage``'s JSON)."""
    info = PublishInfo(name=name, queue="celery", root_id=root, parent_id=parent, message=message)
    now = book.now_ms() + at
    book.create(id=task_id, now_ms=now, ttl_ms=HOUR_MS, max_attempts=1, info=info, group_id=group)


def ended(book: RedisBook, task_id: str, state: str, progress: int = 0) -> None:
    """Bring a created task to ``state`` (running with ``progress``, succeeded, failed)."""
    now = book.now_ms()
    book.apply(task_id, {"type": "start", "atMs": now, "worker": "w@h"})
    if state == "running" and progress:
        book.apply(
            task_id, {"type": "progress", "atMs": now + 1, "progress": progress, "cursor": "c"}
        )
    elif state == "succeeded":
        book.apply(
            task_id, {"type": "succeed", "atMs": now + 1, "resultRef": "r", "resultHash": "h"}
        )
    elif state == "failed":
        book.apply(task_id, {"type": "fail", "atMs": now + 1, "error": "x", "retryable": False})


def seed_canvas(book: RedisBook, p: str) -> dict[str, str]:
    """Root ``<p>root`` spawned ``<p>a`` (whose chain goes on to ``<p>b``) and a chord:
    group ``<p>g`` of ``<p>m0``..``<p>m2`` whose last member sent ``<p>cb``. States: root
    and a succeeded, b running at 40 %, m0 succeeded, m1 failed, m2 and cb queued."""
    root = p + "root"
    seeded(book, root, root, name="app.start")
    seeded(book, p + "a", root, root)
    seeded(book, p + "b", root, p + "a", at=1)
    for n in range(3):
        seeded(book, f"{p}m{n}", root, root, group=p + "g", name="app.part", at=2)
    seeded(book, p + "cb", root, p + "m2", group=p + "g", name="app.total", at=3)
    ended(book, root, "succeeded")
    ended(book, p + "a", "succeeded")
    ended(book, p + "b", "running", 40)
    ended(book, p + "m0", "succeeded")
    ended(book, p + "m1", "failed")
    return {"root": root, "b": p + "b", "cb": p + "cb", "m1": p + "m1", "group": p + "g"}


def seed_wide(book: RedisBook, p: str, chain: int, spawned: int) -> str:
    """A root whose chain of ``chain`` links each spawned ``spawned`` tasks; the root."""
    root = p + "root"
    seeded(book, root, root, name="app.start")
    previous = root
    for n in range(chain):
        link = f"{p}c{n}"
        seeded(book, link, root, previous, name="app.link")
        for k in range(spawned):
            seeded(book, f"{p}c{n}s{k}", root, link, name="app.leaf")
        previous = link
    return root
