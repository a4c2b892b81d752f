"""One shard's ``gauges`` (merged by ``_reads.gauges``), in one pipelined round trip: the
notification streams' lengths, their consumer groups' pending and lag, the workers seen."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.exceptions import ResponseError

from .._gauges import GAUGE_WORKERS_LIMIT, BookGauges, GroupBacklog
from ..errors import invalid
from ._plan import Pipeline, Plan, command
from ._replies import text_of

if TYPE_CHECKING:
    from ._shard import Shard

__all__ = ["gauges"]


def gauges(shard: Shard, now_ms: int, within_ms: int) -> Plan[BookGauges]:
    """The streams, their consumer groups and the workers seen in the ``within_ms``
    before ``now_ms`` (at most ``GAUGE_WORKERS_LIMIT``, most recently seen first)."""
    if type(within_ms) is not int or within_ms <= 0:
        raise invalid("within_ms must be a whole number of ms > 0", field="within_ms")
    k = shard.keys
    streams = {"tasks": k.outbox, "groups": k.group_outbox}
    requests = [command(name, key) for key in streams.values() for name in ("xlen", "xinfo_groups")]
    requests.append(
        command(
            "zrange",
            k.workers,
            "+inf",
            now_ms - within_ms,
            desc=True,
            byscore=True,
            offset=0,
            num=GAUGE_WORKERS_LIMIT,
            withscores=True,
        )
    )
    replies = yield Pipeline(requests, errors_as_replies=True)
    lengths: dict[str, int] = {}
    groups: list[GroupBacklog] = []
    for stream, length, infos in zip(streams, replies[0:-1:2], replies[1:-1:2], strict=True):
        lengths[stream] = int(_answer(length))
        if isinstance(infos, ResponseError) and "no such key" in str(infos).lower():
            continue  # XINFO GROUPS of a stream that does not exist yet: no groups
        groups += [
            GroupBacklog(
                stream=stream,
                group=text_of(info["name"]),
                pending=int(info["pending"]),
                lag=None if info.get("lag") is None else int(info["lag"]),
                length=lengths[stream],
            )
            for info in _answer(infos)
        ]
    workers = tuple((text_of(name), float(seen)) for name, seen in _answer(replies[-1]))
    return BookGauges(lengths, tuple(groups), workers)


def _answer(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply
