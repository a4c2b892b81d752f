"""A busy Celery broker on the Celery test Redis (``CELERY_URL``, db 12), for the queues
tests: a real app publishing to queues of their own (one with priorities), and a real
worker holding unacked messages (``acks_late``, prefetch 2, one thread on a task that
waits); and the local RabbitMQ for the AMQP reader."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from kombu import Connection, Exchange, Queue

from asyncbook import AsyncBook
from asyncbook.celery import install, uninstall
from asyncbook.celery._redis_broker import PRIORITY_STEPS, UNACKED_KEY, sub_queue

from .celery import CELERY_URL, unique, wait_for

AMQP_URL = os.environ.get("ASYNCBOOK_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
"""The local RabbitMQ, RabbitMQ's default user (the AMQP tests skip when it does not
answer)."""

PREFETCHED = 2
"""Messages the worker holds unacked: one running (it waits), one prefetched."""
CONSUMED_SENT = 5
"""Messages sent to the consumed queue: ``PREFETCHED`` of them unacked, the rest ready."""
PRIORITIES_SENT = (0, 5, 9, 9)
"""Priorities of the messages sent to the priority queue (5 lands in step 3)."""


@dataclass
class BusyBroker:
    """The queues' names, the task ids sent to each, and when the sending began."""

    consumed: str
    prioritized: str
    own: str
    sent_at_ms: int
    consumed_ids: list[str] = field(default_factory=list)
    prioritized_ids: list[str] = field(default_factory=list)


def amqp_answers() -> bool:
    """Whether the local RabbitMQ takes connections."""
    where = urlsplit(AMQP_URL)
    try:
        socket.create_connection((where.hostname, where.port or 5672), timeout=1).close()
    except OSError:
        return False
    return True


@contextmanager
def amqp_queue() -> Iterator[str]:
    """A queue of its own on the local RabbitMQ holding 3 messages, with one consumer
    that holds one of them (prefetch 1) unacked; deleted afterwards."""
    name = unique("amqp-q")
    with Connection(AMQP_URL) as connection:
        declared = Queue(name, Exchange(name, type="direct"), routing_key=name, auto_delete=False)
        producer = connection.Producer()
        for number in range(3):
            producer.publish({"n": number}, exchange=declared.exchange, routing_key=name,
                             declare=[declared])  # fmt: skip
        consumer_channel: Any = connection.channel()  # kombu types the AMQP channel loosely
        consumer_channel.basic_qos(0, 1, False)
        consumer_channel.basic_consume(name, callback=lambda message: None, no_ack=False)
        try:
            yield name
        finally:
            consumer_channel.close()
            declared.bind(connection.channel()).delete()


@contextmanager
def ready_queue(count: int = 2) -> Iterator[str]:
    """A queue of its own on the Celery test Redis holding ``count`` ready messages,
    which no worker consumes; removed afterwards."""
    name = unique("video")
    with Connection(CELERY_URL) as connection:
        declared = Queue(name, Exchange(name, type="direct"), routing_key=name)
        producer = connection.Producer()
        for number in range(count):
            producer.publish({"n": number}, exchange=declared.exchange, routing_key=name,
                             declare=[declared])  # fmt: skip
    try:
        yield name
    finally:
        client = redis.Redis.from_url(CELERY_URL)
        remove_queue(client, name)
        client.close()


def remove_queue(client: redis.Redis, name: str) -> None:
    """A queue's lists and its binding sets (a Celery queue's exchange is named after it)."""
    keys = [sub_queue(name, step) for step in PRIORITY_STEPS]
    client.delete(*keys, f"_kombu.binding.{name}", f"_kombu.binding_permanent.{name}")


def unacked_of(client: redis.Redis, queue: str) -> int:
    """Unacked messages routed to ``queue`` (by the hash's routing keys)."""
    return sum(1 for raw in client.hvals(UNACKED_KEY) if f'"{queue}"]'.encode() in raw)


@contextmanager
def busy_broker(book: AsyncBook, own: str | None = None) -> Iterator[BusyBroker]:
    """An app installed on ``book`` (its ``asyncbook_queue`` ``own``, or a fresh name) has
    sent ``CONSUMED_SENT`` messages to one queue (a worker holds ``PREFETCHED`` of them
    unacked) and one per ``PRIORITIES_SENT`` to another (nobody consumes it); afterwards
    the worker stops and the queues are removed."""
    own = own or unique("own")
    busy = BusyBroker(unique("render"), unique("urgent"), own, int(time.time() * 1000))
    app = Celery(unique("queues"), broker=CELERY_URL, backend=None, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        worker_prefetch_multiplier=PREFETCHED,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        asyncbook_queue=busy.own,
        asyncbook_flush_delay=0.005,
    )
    gate = threading.Event()

    @app.task(name="queues.wait", shared=False, tracked=True)
    def wait(number: int) -> int:
        gate.wait(30)
        return number

    client = redis.Redis.from_url(CELERY_URL)
    install(app, book)
    try:
        for number in range(CONSUMED_SENT):
            busy.consumed_ids.append(wait.apply_async((number,), queue=busy.consumed).id)
        for priority in PRIORITIES_SENT:
            sent = wait.apply_async((priority,), queue=busy.prioritized, priority=priority)
            busy.prioritized_ids.append(sent.id)
        worker = start_worker(
            app, queues=[busy.consumed], pool="threads", concurrency=1, perform_ping_check=False
        )
        with worker:
            wait_for(lambda: unacked_of(client, busy.consumed) == PREFETCHED, timeout=15)
            wait_for(lambda: client.llen(busy.consumed) == CONSUMED_SENT - PREFETCHED)
            try:
                yield busy
            finally:
                gate.set()
    finally:
        uninstall(app)
        for name in (busy.consumed, busy.prioritized, busy.own):
            remove_queue(client, name)
        client.close()
