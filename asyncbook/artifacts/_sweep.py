"""The orphan sweep: the artifacts of a namespace that no record names (its record
expired with the retention, was pruned, or its attempt failed, expired or was
redelivered), older than a grace period (a result being written now is not one)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .._book import AsyncBook
from ._store import ArtifactStore, Stored, key_for, task_of_key

__all__ = ["OrphanReport", "sweep_orphans"]


@dataclass(frozen=True)
class OrphanReport:
    """What ``sweep_orphans`` found: the orphans (deleted when asked), and how many
    artifacts a record names."""

    orphans: list[Stored] = field(default_factory=list)
    kept: int = 0
    deleted: bool = False


def sweep_orphans(
    store: ArtifactStore,
    book: AsyncBook,
    namespace: str,
    *,
    older_than_s: float = 3600.0,
    delete: bool = False,
    now: Callable[[], float] = time.time,
) -> OrphanReport:
    """Find (and with ``delete`` delete) ``namespace``'s orphaned artifacts in ``store``:
    an artifact older than ``older_than_s`` seconds whose task has no record, or whose
    record's ``resultRef`` is not it."""
    prefix = key_for(namespace, "x", "0" * 64).split("/", 1)[0] + "/"
    cutoff = now() - older_than_s
    orphans: list[Stored] = []
    kept = 0
    refs: dict[str, str | None] = {}
    for stored in store.list(prefix):
        owner = task_of_key(stored.key)
        if owner is None or owner[0] != namespace:
            continue
        task_id = owner[1]
        if task_id not in refs:
            task = book.get(task_id)
            refs[task_id] = None if task is None else task.result_ref
        if refs[task_id] == stored.ref:
            kept += 1
        elif stored.modified <= cutoff:
            orphans.append(stored)
    if delete and orphans:
        store.delete([stored.key for stored in orphans])
    return OrphanReport(orphans, kept, delete)
