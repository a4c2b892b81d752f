"""A delivery handed back: its message sent again, as ``Task.retry`` sends it but with
the same ``retries``, no retry recorded and the header ``POSTPONED_HEADER`` counting how
often (``_publishing`` creates nothing for it). One run per task postpones a held
delivery with it (``_one_run``); concurrency limits keep it, as JSON, for a delivery
waiting for a slot, and send it when one frees (``_concurrency``)."""

from __future__ import annotations

from typing import Any

from celery import Task
from celery.canvas import Signature
from kombu.utils.json import dumps, loads

from ._publishing import CREATED_HEADER, DEADLINE_HEADER, POSTPONED_HEADER

__all__ = ["handed_back", "resend", "resend_json"]


def handed_back(task: Task[Any, Any], countdown_s: float | None = None) -> Signature[Any]:
    """The running delivery's message again (due in ``countdown_s``, or now)."""
    request = task.request
    headers = {
        **(request.headers or {}),
        DEADLINE_HEADER: request.get(DEADLINE_HEADER),
        CREATED_HEADER: True,
        POSTPONED_HEADER: int(request.get(POSTPONED_HEADER) or 0) + 1,
    }
    return task.signature_from_request(
        request, retries=request.retries, countdown=countdown_s, headers=headers
    )


def resend_json(task: Task[Any, Any]) -> str:
    """``handed_back`` (due at once) as JSON, to send later with ``resend``."""
    return str(dumps(dict(handed_back(task))))


def resend(app: Any, payload: str) -> None:
    """Send a message ``resend_json`` kept (raises what the broker raises)."""
    Signature.from_dict(loads(payload), app=app).apply_async()
