"""The receiver of docs/webhooks.md, served on loopback, against a real ``WebhookSink``: it
takes a signed notification once, and refuses a forged, tampered or stale one."""

from __future__ import annotations

import base64
import secrets
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import redis
from standardwebhooks import Webhook

from asyncbook import Notification, SinkError, WebhookSink
from asyncbook._models import to_wire
from asyncbook.cli._demo import WebhookReceiver as Recorder

from ..support.asgi import serving
from ..support.books import redis_client
from ..support.snippets import snippet

RECEIVER_BLOCK, RECEIVER_PAGE = snippet("def webhook_receiver(")
SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
RETIRING = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()

pytestmark = pytest.mark.redis


@dataclass
class Receiver:
    """The documented app, served: its URL and what it handed over."""

    url: str
    handled: list[Any] = field(default_factory=list)
    failing: int = 0
    """How many of the next notifications ``handle`` raises on."""

    def handle(self, notification: Any) -> None:
        if self.failing:
            self.failing -= 1
            raise RuntimeError("the receiver's own work failed")
        self.handled.append(notification)


@pytest.fixture
def seen() -> Iterator[redis.Redis]:
    """The receiver's store of ids, on the test Redis; its keys removed afterwards."""
    client = redis_client()
    yield client
    for key in client.scan_iter(match="webhook-seen:*"):
        client.delete(key)
    client.close()


@pytest.fixture
def receiver(seen: redis.Redis) -> Iterator[Receiver]:
    example: dict[str, Any] = {"__name__": "readme"}
    exec(compile(RECEIVER_BLOCK, str(RECEIVER_PAGE), "exec"), example)
    holder = Receiver(url="")
    app = example["webhook_receiver"](SECRET, seen, holder.handle)
    with serving(app) as base:
        holder.url = f"{base}/asyncbook"
        yield holder


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """Keeps the sink's requests as sent, to send them again."""
    server = Recorder()
    yield server
    server.close()


def notification() -> Notification:
    return Notification(task_id=f"job-{uuid.uuid4().hex}", state="succeeded", at_ms=1)


def captured(recorder: Recorder, note: Notification) -> tuple[dict[str, str], bytes]:
    """What a real sink sends for ``note``: the webhook headers and the body's bytes."""
    with closing(WebhookSink(recorder.url, secrets=[SECRET, RETIRING])) as sink:
        sink(note)
    headers, _ = recorder.requests[-1]
    kept = {name: value for name, value in headers.items() if name.lower().startswith("webhook-")}
    return {**kept, "Content-Type": "application/json"}, recorder.bodies[-1]


def post(receiver: Receiver, headers: dict[str, str], body: bytes) -> int:
    return httpx.post(receiver.url, content=body, headers=headers).status_code


def test_a_signed_notification_is_handled_once(receiver: Receiver) -> None:
    note = notification()
    with closing(WebhookSink(receiver.url, secrets=[SECRET, RETIRING], retries=0)) as sink:
        assert sink(note) == 200
        assert receiver.handled == [to_wire(note)]
        assert sink(note) == 200  # a redelivery: the same webhook-id, signed again
    assert receiver.handled == [to_wire(note)]


def test_a_replayed_request_is_not_handled_again(receiver: Receiver, recorder: Recorder) -> None:
    note = notification()
    headers, body = captured(recorder, note)
    assert post(receiver, headers, body) == 200
    assert post(receiver, headers, body) == 200  # the same bytes again: acknowledged only
    assert receiver.handled == [to_wire(note)]


Tamper = Callable[[dict[str, str], bytes], tuple[dict[str, str], bytes]]


def _resigned_at(offset: int) -> Tamper:
    """The request signed again (with the secret) at ``offset`` seconds from now."""

    def tamper(headers: dict[str, str], body: bytes) -> tuple[dict[str, str], bytes]:
        when = datetime.fromtimestamp(time.time() + offset, tz=UTC)
        signature = Webhook(SECRET).sign(headers["webhook-id"], when, body.decode())
        stamp = str(int(when.timestamp()))
        return {**headers, "webhook-timestamp": stamp, "webhook-signature": signature}, body

    return tamper


@pytest.mark.parametrize(
    "tamper",
    [
        lambda headers, body: (headers, body.replace(b"succeeded", b"cancelled")),
        lambda headers, body: ({**headers, "webhook-id": "msg_someone-else"}, body),
        lambda headers, body: ({**headers, "webhook-signature": "garbage"}, body),
        lambda headers, body: (
            {name: value for name, value in headers.items() if name != "webhook-signature"},
            body,
        ),
        _resigned_at(-310),  # past the 300 s tolerance by more than a second's rounding
        _resigned_at(+310),
    ],
    ids=["body", "id", "malformed-signature", "unsigned", "too-old", "too-new"],
)
def test_a_forged_tampered_or_stale_request_is_refused(
    receiver: Receiver, recorder: Recorder, tamper: Tamper
) -> None:
    headers, body = tamper(*captured(recorder, notification()))
    assert post(receiver, headers, body) == 400
    assert receiver.handled == []


def test_a_sink_without_the_receivers_secret_is_refused(receiver: Receiver) -> None:
    with (
        closing(WebhookSink(receiver.url, secret=RETIRING, retries=0)) as sink,
        pytest.raises(SinkError, match="400"),
    ):
        sink(notification())
    assert receiver.handled == []


def test_a_notification_the_handler_failed_is_handled_on_redelivery(receiver: Receiver) -> None:
    note = notification()
    receiver.failing = 1
    with closing(WebhookSink(receiver.url, secret=SECRET, retries=1, backoff=0.01)) as sink:
        assert sink(note) == 200  # 500 first, then the retry is handled
    assert receiver.handled == [to_wire(note)]


def test_a_task_id_used_again_is_a_new_notification(receiver: Receiver) -> None:
    """The same task id ending again (after retention, or in another namespace) is
    handled again: its webhook-id is another."""
    first = Notification(task_id="job-again", state="succeeded", at_ms=1, version=3)
    again = first.model_copy(update={"at_ms": 90_000_000})
    with closing(WebhookSink(receiver.url, secrets=[SECRET], retries=0)) as sink:
        assert sink(first) == 200
        assert sink(again) == 200
        assert sink(first) == 200
    with closing(WebhookSink(receiver.url, secrets=[SECRET], namespace="other")) as sink:
        assert sink(first) == 200
    assert receiver.handled == [to_wire(first), to_wire(again), to_wire(first)]
