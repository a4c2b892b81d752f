"""Namespace plans: an operation over the S >= 1 shards of a namespace, as a generator
that yields ``OnShards`` (one plan per shard it asks), ``Sleep`` or ``FixCount`` and is
sent their answers. Like a shard's plan (``_plan``) it does no I/O: the drivers
(``_book_driver``) run it, so both facades and every shard count run the same code; one
shard is the case S = 1."""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ._plan import Plan, Request

__all__ = [
    "FIX_COUNT",
    "FixCount",
    "MergedPlan",
    "NamespaceCall",
    "OnShards",
    "OneShard",
    "Sleep",
    "asked",
    "every",
    "on",
    "spread",
    "writing",
]

_T = TypeVar("_T")


@dataclass(slots=True)
class OnShards:
    """Run one plan per shard (``shards``: which; None: every shard, in order) and send
    their answers back, in order. ``writes``: the plans write (each runs on its own, its
    replica wait included); else they are reads, sent together in one pipeline per node."""

    plans: tuple[Plan[Any], ...]
    shards: tuple[int, ...] | None = None
    writes: bool = False


@dataclass(slots=True)
class Sleep:
    """Wait ``seconds`` before the next step (a claim read again while another task's
    apply runs)."""

    seconds: float


@dataclass(slots=True)
class OneShard(Generic[_T]):
    """A call that is one shard's plan and nothing around it (a task's read; on one shard,
    a task's event): the drivers run ``plan`` on shard ``index``'s engine at once."""

    index: int
    plan: Plan[_T]


MergedPlan = Generator["OnShards | Sleep | FixCount", Any, _T]

NamespaceCall = MergedPlan[_T] | OneShard[_T]
"""What a book call is: a namespace plan, or one shard's plan alone (``OneShard``)."""


def on(index: int, plan: Plan[_T], *, writes: bool = True) -> MergedPlan[_T]:
    """``plan`` on shard ``index`` alone: its answer (an error it raised is raised)."""
    answers = yield OnShards((plan,), (index,), writes)
    answer: _T = answers[0]
    return answer


def asked(request: Request) -> Plan[Any]:
    """A shard's plan of one request: its reply."""
    return (yield request)


def every(
    shards: Sequence[Any], make: Callable[[Any], Plan[_T]], *, writes: bool = False
) -> OnShards:
    """One plan per shard, ``make(shard)``, in shard order."""
    return OnShards(tuple(make(shard) for shard in shards), None, writes)


def spread(
    shards: Sequence[Any],
    parts: dict[int, list[int]],
    make: Callable[[Any, list[int]], Plan[list[Any]]],
    size: int,
) -> MergedPlan[list[Any]]:
    """``make(shard, positions)`` on each shard of ``parts`` (shard index -> positions, as
    ``Namespace.by_shard`` gives them), the shards at once, writing; each answer put back
    at its position of ``size``."""
    out: list[Any] = [None] * size
    if not parts:
        return out
    indexes = tuple(parts)
    answers = yield OnShards(tuple(make(shards[i], parts[i]) for i in indexes), indexes, True)
    for index, results in zip(indexes, answers, strict=True):
        for at, result in zip(parts[index], results, strict=True):
            out[at] = result
    return out


@dataclass(slots=True)
class FixCount:
    """Store the namespace's shard count at its first write, or check it (once)."""


FIX_COUNT = FixCount()
"""Yielded by a write of a namespace of several shards before anything else."""


def writing(ns: Any, task_id: Any = None) -> MergedPlan[int]:
    """A write's first step: ``FIX_COUNT`` when the namespace (a ``Namespace``) has
    several shards. Answers the shard holding ``task_id`` (0 for none)."""
    if ns.count > 1:
        yield FIX_COUNT
    index: int = ns.index_of(task_id)
    return index
