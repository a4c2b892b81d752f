"""Signed webhooks (Standard Webhooks): what the sink sends verifies with the reference
package's own verifier, rotates, re-signs each attempt and names a bad secret."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from asyncbook import AsyncBookError, AsyncState, GroupNotification, MemoryBook, Notification
from asyncbook._delivery import (
    deliver_notifications,
    group_notification_source,
    notification_source,
)
from asyncbook._sinks import WebhookSink, resolve_sink
from asyncbook._webhook_signing import WebhookSecret, signed_headers, webhook_id
from asyncbook.cli._demo import WebhookReceiver as Receiver

CURRENT = "whsec_" + base64.b64encode(b"c" * 32).decode()
PREVIOUS = "whsec_" + base64.b64encode(b"p" * 24).decode()
NOTE = Notification(task_id="t-1", state="succeeded", at_ms=5)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def sent(sink: WebhookSink) -> int:
    """``NOTE`` POSTed through ``sink``, whose connection is closed afterwards."""
    with closing(sink):
        return sink(NOTE)


def received(receiver: Receiver, index: int = -1) -> tuple[dict[str, str], bytes]:
    """One request's headers and its body as received."""
    return receiver.requests[index][0], receiver.bodies[index]


def test_the_specification_test_vector() -> None:
    secret = WebhookSecret.parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "secret")
    body = b'{"test": 2432232314}'
    headers = signed_headers([secret], "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, body)
    assert headers == {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }


def test_a_signed_post_verifies_with_the_reference_package(receiver: Receiver) -> None:
    assert sent(WebhookSink(receiver.url, secret=CURRENT)) == 200
    headers, body = received(receiver)
    assert Webhook(CURRENT).verify(body, headers) == {
        "taskId": "t-1",
        "state": "succeeded",
        "atMs": 5,
    }
    assert headers["Idempotency-Key"] == "t-1:succeeded"
    assert headers["webhook-id"] == webhook_id(NOTE)
    assert headers["webhook-signature"].startswith("v1,")


def test_rotation_signs_with_both_secrets_and_either_verifies(receiver: Receiver) -> None:
    sent(WebhookSink(receiver.url, secrets=[CURRENT, PREVIOUS]))
    headers, body = received(receiver)
    signatures = headers["webhook-signature"].split(" ")
    assert len(signatures) == 2
    assert all(signature.startswith("v1,") for signature in signatures)
    for secret in (CURRENT, PREVIOUS):
        assert Webhook(secret).verify(body, headers)["taskId"] == "t-1"
    stranger = "whsec_" + base64.b64encode(b"s" * 32).decode()
    with pytest.raises(WebhookVerificationError):
        Webhook(stranger).verify(body, headers)


def test_each_attempt_keeps_the_id_and_is_signed_again(receiver: Receiver) -> None:
    receiver.statuses = [503]
    # backoff 1 s: the second attempt's timestamp is at least a second later
    assert sent(WebhookSink(receiver.url, secret=CURRENT, retries=1, backoff=1.0)) == 200
    (first, first_body), (second, second_body) = received(receiver, 0), received(receiver, 1)
    assert first["webhook-id"] == second["webhook-id"]
    assert int(second["webhook-timestamp"]) > int(first["webhook-timestamp"])
    assert first["webhook-signature"] != second["webhook-signature"]
    for headers, body in ((first, first_body), (second, second_body)):
        assert Webhook(CURRENT).verify(body, headers)["taskId"] == "t-1"


def test_a_redelivery_keeps_the_webhook_id(receiver: Receiver) -> None:
    book = MemoryBook()
    book.create(id="a.b", now_ms=0, ttl_ms=10, max_attempts=1)
    book.expire("a.b")
    source = notification_source(book)
    receiver.statuses = [500]
    with closing(WebhookSink(receiver.url, secret=CURRENT, retries=0)) as sink:
        assert deliver_notifications(source, [sink], group="g", consumer="c1").failed == 1
        again = deliver_notifications(source, [sink], group="g", consumer="c2", min_idle_ms=0)
    assert again.delivered == 1
    ids = {headers["webhook-id"] for headers, _ in receiver.requests}
    body = json.loads(receiver.bodies[-1])
    task = book.get("a.b")
    assert task is not None
    note = Notification.model_validate({**body, "version": task.version})
    assert ids == {webhook_id(note)}
    # the task id's "." does not reach the signed id (the specification forbids it there)
    assert "." not in ids.pop()
    assert webhook_id(note) != webhook_id(note.model_copy(update={"state": AsyncState.FAILED}))


@pytest.mark.parametrize(
    "tamper",
    [
        lambda headers, body: (headers, body.replace(b"succeeded", b"failed")),
        lambda headers, body: ({**headers, "webhook-id": "msg_other"}, body),
        lambda headers, body: (
            {**headers, "webhook-timestamp": str(int(headers["webhook-timestamp"]) + 1)},
            body,
        ),
    ],
    ids=["body", "id", "timestamp"],
)
def test_a_tampered_request_is_rejected(receiver: Receiver, tamper: Any) -> None:
    sent(WebhookSink(receiver.url, secret=CURRENT))
    headers, body = tamper(*received(receiver))
    with pytest.raises(WebhookVerificationError):
        Webhook(CURRENT).verify(body, headers)


def test_unsigned_posts_are_as_before(receiver: Receiver) -> None:
    sent(WebhookSink(receiver.url))
    headers, _ = received(receiver)
    assert not any(name.lower().startswith("webhook-") for name in headers)


def test_resolve_sink_signs_a_webhook_url(receiver: Receiver) -> None:
    secrets = (WebhookSecret.parse(CURRENT, "secret"),)
    sink = resolve_sink(receiver.url, secrets=secrets)
    assert isinstance(sink, WebhookSink)
    sent(sink)
    headers, body = received(receiver)
    assert Webhook(CURRENT).verify(body, headers)["state"] == "succeeded"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"secret": "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "secret"),  # no whsec_ prefix
        ({"secret": "whsec_not base64!"}, "secret"),
        ({"secret": "whsec_" + base64.b64encode(b"short").decode()}, "secret"),
        ({"secret": b"x" * 65}, "secret"),
        ({"secret": 42}, "secret"),
        ({"secrets": []}, "secrets"),
        ({"secrets": [CURRENT, "whsec_"]}, "secrets"),
        ({"secret": CURRENT, "secrets": [PREVIOUS]}, "secrets"),
        ({"secret": CURRENT, "headers": {"Webhook-Id": "mine"}}, "headers"),
    ],
)
def test_a_bad_secret_is_named_and_not_shown(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(AsyncBookError) as caught:
        WebhookSink("http://127.0.0.1:1/hook", **kwargs)
    assert (caught.value.code, caught.value.field) == ("invalid-request", field)
    for value in (CURRENT[6:], PREVIOUS[6:], "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"):
        assert value not in str(caught.value)


def test_secrets_parse_as_the_specification_writes_them() -> None:
    unpadded = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwBr"  # 26 bytes, two "=" left out
    padded = unpadded + "=="
    content = b"msg_1.1.{}"
    assert WebhookSecret.parse(unpadded, "s").sign(content) == (
        WebhookSecret.parse(padded, "s").sign(content)
    )
    assert WebhookSecret.parse(b"k" * 24, "s").sign(content).startswith("v1,")


def test_no_repr_shows_a_secret() -> None:
    sink = WebhookSink("http://127.0.0.1:1/hook", secrets=[CURRENT, PREVIOUS])
    shown = repr(sink) + repr(sink.secrets) + repr(vars(sink))
    assert CURRENT[6:] not in shown
    assert PREVIOUS[6:] not in shown
    assert "2 secret(s)" in repr(sink)


def test_a_group_notification_is_signed_too(receiver: Receiver) -> None:
    book = MemoryBook()
    book.create(id="m", now_ms=0, ttl_ms=10, max_attempts=1, group_id="g")
    book.expire("m")
    book.seal_group("g", 1)
    with closing(WebhookSink(receiver.url, secret=CURRENT)) as sink:
        assert deliver_notifications(group_notification_source(book), [sink]).delivered == 1
    headers, body = received(receiver)
    assert Webhook(CURRENT).verify(body, headers)["groupId"] == "g"
    assert headers["webhook-id"] == webhook_id(GroupNotification.model_validate_json(body))
