"""Prometheus text for ``GET /metrics``, written by ``prometheus_client`` (the library
the field uses for the exposition format) from a collector of the book's counts.

Tasks by state and answers by reason are the book's own counts (every client of the
book, kept in Redis), so they survive a restart of the server. Duplicate callbacks are
the ``duplicate-callback`` answers, shown as their own counter. Sweep lateness is how long
the oldest overdue deadline has been waiting for the sweep. Per task name (a book that
keeps task info): starts, ends by state, and the runtime histogram of ended runs. From a
``RedisBook``'s gauges (one pipelined round trip): the notification streams' entries, each
consumer group's backlog and pending entries, and when each worker seen within the last
hour was last seen (at most 500 workers: the label's values stay bounded).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from .._console import RUNTIME_BUCKETS_MS, NameTotals
from .._gauges import BookGauges
from .._health import SweepHealth
from .._models import GROUP_END_STATES
from .._reasons import Reason
from ._reader import Reader

__all__ = [
    "CONTENT_TYPE_LATEST",
    "fleet_families",
    "gauge_families",
    "health_families",
    "name_families",
    "render_metrics",
    "sweep_lateness",
]

DUPLICATE_CALLBACK = Reason.DUPLICATE_CALLBACK
_BOUNDS = [str(bound / 1000) for bound in RUNTIME_BUCKETS_MS] + ["+Inf"]
"""The runtime histogram's ``le`` labels, in seconds."""


async def sweep_lateness(book: Reader, now_ms: float | None = None) -> float:
    """Seconds since the oldest deadline the sweep has not yet closed (0 when none)."""
    now = time.time() * 1000 if now_ms is None else now_ms
    due = await book.overdue(now, 1)
    if not due:
        return 0.0
    task = await book.get(due[0])
    if task is None:
        return 0.0
    return max(0.0, (now - float(task.expires_at_ms)) / 1000)


class _Snapshot(Collector):
    """Families read once, when the scrape asked (prometheus_client's custom collector)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def _one(family: GaugeMetricFamily | CounterMetricFamily, value: float) -> Metric:
    family.add_metric([], value)
    return family


def _cumulative(buckets: Sequence[int]) -> list[tuple[str, float]]:
    """Per-bucket counts (``RUNTIME_BUCKETS_MS``, then the rest) as Prometheus buckets."""
    counts = list(buckets[: len(_BOUNDS)]) + [0] * (len(_BOUNDS) - len(buckets))
    counts[-1] += sum(buckets[len(_BOUNDS) :])
    pairs: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(_BOUNDS, counts, strict=True):
        running += count
        pairs.append((bound, running))
    return pairs


def name_families(names: Sequence[NameTotals]) -> list[Metric]:
    """Starts, ends by state and the runtime histogram, labelled by task name."""
    started = CounterMetricFamily(
        "asyncbook_task_started", "Attempts started, by task name.", labels=["name"]
    )
    ended = CounterMetricFamily(
        "asyncbook_task_ended", "Tasks ended, by task name and state.", labels=["name", "state"]
    )
    runtime = HistogramMetricFamily(
        "asyncbook_task_runtime_seconds",
        "Runtime of ended runs, by task name.",
        labels=["name"],
    )
    for totals in sorted(names, key=lambda totals: totals.name):
        started.add_metric([totals.name], totals.started)
        for state in GROUP_END_STATES:
            ended.add_metric([totals.name, state], getattr(totals, state))
        runtime.add_metric(
            [totals.name],
            buckets=_cumulative(totals.runtime_buckets),
            sum_value=float(totals.runtime_sum_ms) / 1000,
        )
    return [started, ended, runtime]


def health_families(health: SweepHealth) -> list[Metric]:
    """When a sweep last ran (0: never, so an age alert fires) and the overdue tasks."""
    last = 0.0 if health.last_sweep_ms is None else health.last_sweep_ms / 1000
    return [
        _one(
            GaugeMetricFamily(
                "asyncbook_sweep_last_run_timestamp_seconds",
                "When the expiry sweep last ran, in seconds since the epoch (0: never).",
            ),
            last,
        ),
        _one(
            GaugeMetricFamily(
                "asyncbook_overdue_tasks",
                "Live tasks past their deadline, waiting for the expiry sweep.",
            ),
            health.overdue,
        ),
    ]


def gauge_families(gauges: BookGauges) -> list[Metric]:
    """The notification streams and their consumer groups; the workers seen recently."""
    entries = GaugeMetricFamily(
        "asyncbook_outbox_entries",
        "Entries in a notification stream (tasks, groups), trimmed by age once read.",
        labels=["stream"],
    )
    for stream, length in gauges.stream_lengths.items():
        entries.add_metric([stream], length)
    backlog = GaugeMetricFamily(
        "asyncbook_outbox_backlog",
        "Entries a consumer group has not acknowledged (pending plus not yet delivered).",
        labels=["stream", "group"],
    )
    pending = GaugeMetricFamily(
        "asyncbook_outbox_pending",
        "Entries delivered to a consumer group's consumer and not acknowledged yet.",
        labels=["stream", "group"],
    )
    for group in gauges.groups:
        backlog.add_metric([group.stream, group.group], group.backlog)
        pending.add_metric([group.stream, group.group], group.pending)
    seen = GaugeMetricFamily(
        "asyncbook_worker_last_seen_timestamp_seconds",
        "When a worker last started or heartbeated a task, in seconds since the epoch "
        "(workers seen within the last hour).",
        labels=["worker"],
    )
    for worker, seen_ms in gauges.workers_seen:
        seen.add_metric([worker], seen_ms / 1000)
    return [entries, backlog, pending, seen]


def fleet_families(consumers: Mapping[str, int], unconsumed: Sequence[str]) -> list[Metric]:
    """Online workers per queue they consume, and the queues whose ready messages no
    online worker consumes (1 each)."""
    online = GaugeMetricFamily(
        "asyncbook_workers_online",
        "Online workers (their records fresh) consuming a queue.",
        labels=["queue"],
    )
    for queue, count in sorted(consumers.items()):
        online.add_metric([queue], count)
    waiting = GaugeMetricFamily(
        "asyncbook_queue_unconsumed",
        "1 for a queue with ready messages that no online worker consumes.",
        labels=["queue"],
    )
    for queue in unconsumed:
        waiting.add_metric([queue], 1)
    return [online, waiting]


def render_metrics(
    states: Mapping[str, int],
    answers: Mapping[str, int],
    lateness: float,
    *,
    watchers: int,
    lookups: int,
    feed_resets: int = 0,
    group_watchers: int = 0,
    group_lookups: int = 0,
    names: Sequence[NameTotals] = (),
    health: SweepHealth | None = None,
    gauges: BookGauges | None = None,
    fleet: tuple[Mapping[str, int], Sequence[str] | None] | None = None,
    stranded: Mapping[str, int] | None = None,
) -> bytes:
    """The exposition text (Prometheus text format 0.0.4), written by prometheus_client.

    The per-name families are written when ``names`` holds any, the sweep's when
    ``health`` is given, the streams' and workers' when ``gauges`` is.
    """
    tasks = GaugeMetricFamily(
        "asyncbook_tasks", "Tasks held in the book, by state.", labels=["state"]
    )
    for state, count in sorted(states.items()):
        tasks.add_metric([state], count)
    transitions = CounterMetricFamily(
        "asyncbook_transitions",
        "Events and expiries the book answered, by the reason it gave.",
        labels=["reason"],
    )
    for reason, count in sorted(answers.items()):
        if reason != DUPLICATE_CALLBACK:
            transitions.add_metric([reason], count)
    families: list[Metric] = [
        tasks,
        transitions,
        _one(
            CounterMetricFamily(
                "asyncbook_duplicate_callbacks",
                "Callbacks the book ignored because their callback id was already recorded.",
            ),
            answers.get(DUPLICATE_CALLBACK, 0),
        ),
        _one(
            GaugeMetricFamily(
                "asyncbook_sweep_lateness_seconds",
                "How long the oldest overdue deadline has waited for the expiry sweep.",
            ),
            round(lateness, 3),
        ),
        _one(GaugeMetricFamily("asyncbook_stream_watchers", "Open task streams."), watchers),
        _one(
            CounterMetricFamily(
                "asyncbook_stream_lookups", "Book lookups made to feed task streams."
            ),
            lookups,
        ),
        _one(
            GaugeMetricFamily("asyncbook_group_stream_watchers", "Open group streams."),
            group_watchers,
        ),
        _one(
            CounterMetricFamily(
                "asyncbook_group_stream_lookups",
                "Rounds of book lookups made to feed group streams (changed members, then "
                "counters).",
            ),
            group_lookups,
        ),
        _one(
            CounterMetricFamily(
                "asyncbook_change_feed_connects",
                "Times this server (re)subscribed to the change feed.",
            ),
            feed_resets,
        ),
    ]
    if names:
        families += name_families(names)
    if health is not None:
        families += health_families(health)
    if gauges is not None:
        families += gauge_families(gauges)
    if fleet is not None:
        families += fleet_families(fleet[0], fleet[1] or ())
    if stranded is not None:
        waiting = GaugeMetricFamily(
            "asyncbook_tasks_stranded",
            "Tracked tasks queued over 5 minutes in a queue no online worker consumes "
            "(of the 100 oldest queued).",
            labels=["queue"],
        )
        for queue, count in stranded.items():
            waiting.add_metric([queue], count)
        families.append(waiting)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return generate_latest(registry)
