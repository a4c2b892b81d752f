"""Terse event builders for tests."""

from __future__ import annotations

from asyncbook import ExpireEvent, FailEvent, ProgressEvent, StartEvent, SucceedEvent


def start(at: float = 1, worker: str = "w1") -> StartEvent:
    return StartEvent(at_ms=at, worker=worker)


def progress(value: float, at: float = 2, cursor: str = "") -> ProgressEvent:
    return ProgressEvent(at_ms=at, progress=value, cursor=cursor)


def succeed(at: float = 3, ref: str = "s3://r", digest: str = "h1") -> SucceedEvent:
    return SucceedEvent(at_ms=at, result_ref=ref, result_hash=digest)


def fail(at: float = 3, error: str = "boom", retryable: bool = False) -> FailEvent:
    return FailEvent(at_ms=at, error=error, retryable=retryable)


def expire(at: float = 3) -> ExpireEvent:
    return ExpireEvent(at_ms=at)
