"""``AmqpBroker``: a queue's ready messages and consumers on the local RabbitMQ (a passive
declare each); a missing queue left out, asyncbook's own shown empty; a broker down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from asyncbook._queues import BrokerUnreadableError
from asyncbook.celery import AmqpBroker

from ..support.broker import AMQP_URL, amqp_answers, amqp_queue
from ..support.celery import unique

pytestmark = pytest.mark.skipif(not amqp_answers(), reason="no RabbitMQ at ASYNCBOOK_TEST_AMQP_URL")


@pytest.fixture
def queue() -> Iterator[str]:
    with amqp_queue() as name:
        yield name


def test_ready_messages_and_consumers_of_each_queue(queue: str) -> None:
    own, missing = unique("own"), unique("missing")
    snapshot = AmqpBroker(AMQP_URL).snapshot([queue, missing], own_queue=own)
    rows = {row.name: row for row in snapshot.queues}
    assert missing not in rows
    # The consumer's prefetch of one holds one message unacked: AMQP counts it out of ready.
    assert (rows[queue].ready, rows[queue].consumers) == (2, 1)
    assert rows[queue].unacked is None
    assert rows[queue].oldest_note == "AMQP lets no message be looked at without taking it"
    assert (rows[own].ready, rows[own].consumers) == (0, None)
    assert snapshot.unacked_total is None
    assert snapshot.discovery_complete is False


def test_at_most_limit_queues(queue: str) -> None:
    snapshot = AmqpBroker(AMQP_URL).snapshot([queue], own_queue=unique("own"), limit=1)
    assert len(snapshot.queues) == 1
    assert snapshot.truncated


def test_a_broker_that_does_not_answer_is_unreadable() -> None:
    broker = AmqpBroker("amqp://guest:secret@127.0.0.1:1//", timeout=0.5)
    assert broker.url == "amqp://guest:***@127.0.0.1:1//"
    with pytest.raises(BrokerUnreadableError, match="cannot read the broker"):
        broker.snapshot()
