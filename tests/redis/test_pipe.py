"""``Pipe``: calls written now, their replies read later, in order, with their tokens."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.exceptions import ResponseError

from asyncbook.redis._pipe import OUTAGE, SETTLED, Pipe


def _pipe(client: redis.Redis) -> Pipe[str]:
    def connect() -> Any:
        connection: Any = client.connection_pool.make_connection()
        connection.connect()
        return connection

    return Pipe(connect)


def _send(pipe: Pipe[str], token: str, *command: str) -> None:
    pipe.connection().send_command(*command)
    pipe.sent(token)


def test_replies_come_in_order_with_their_tokens(client: redis.Redis) -> None:
    pipe = _pipe(client)
    _send(pipe, "first", "ECHO", "a")
    pipe.settled("nothing due")
    _send(pipe, "refused", "NO-SUCH-COMMAND")
    _send(pipe, "last", "ECHO", "b")
    assert len(pipe) == 4
    replies = list(pipe.replies(block=True, keep=1))
    assert [token for token, _ in replies] == ["first", "nothing due", "refused"]
    assert replies[0][1] == b"a"
    assert replies[1][1] is SETTLED
    assert isinstance(replies[2][1], ResponseError)  # a refusal is a reply, not a raise
    assert list(pipe.replies(block=True)) == [("last", b"b")]
    assert not pipe.drop()


def test_a_lost_connection_leaves_what_was_due_to_hand_back(client: redis.Redis) -> None:
    pipe = _pipe(client)
    _send(pipe, "one", "ECHO", "a")
    _send(pipe, "two", "ECHO", "b")
    pipe.connection().disconnect()  # as if Redis went away before the replies were read
    with pytest.raises(OUTAGE):
        list(pipe.replies(block=True))
    pipe.close()
    assert not pipe.open
    assert len(pipe) == 2
    assert pipe.drop() == ["one", "two"]
    _send(pipe, "three", "ECHO", "c")  # a new connection
    assert list(pipe.replies(block=True)) == [("three", b"c")]


def test_a_forked_child_forgets_its_parents_connection(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = _pipe(client)
    _send(pipe, "parent's", "ECHO", "a")
    parent = pipe.connection()
    monkeypatch.setattr("os.getpid", lambda: -1)
    assert not pipe.open
    assert pipe.forked()
    assert not pipe.forked()
    assert len(pipe) == 0
    assert pipe.connection() is not parent
    pipe.close()
    parent.disconnect()
