"""Retrying a write while the book does not answer: ``retrying`` (with backoff, for a
bound) and ``attempted`` (once). An outage is logged in two lines at most."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from redis.exceptions import RedisError

from ..errors import AsyncBookError, BookUnavailableError, NotReplicatedError

__all__ = ["FIRST_DELAY", "MAX_DELAY", "OUTAGE", "attempted", "retrying"]

logger = logging.getLogger("asyncbook.celery")

_Result = TypeVar("_Result")
FIRST_DELAY = 0.05
"""The first wait before a write is sent again; it doubles up to ``MAX_DELAY``."""
MAX_DELAY = 1.0
OUTAGE = (BookUnavailableError, NotReplicatedError, RedisError, OSError)
"""What is retried: the book did not answer, or a write reached too few replicas
(``asyncbook_wait_replicas``; it may have run: callback ids make the resend safe)."""


def retrying(
    call: Callable[[], _Result],
    retry_for: float,
    what: str,
    *,
    attempt_timeout: float = 0.0,
    warn: bool = True,
    then: str = "",
) -> _Result | None:
    """``call()``, retried with backoff for ``retry_for`` seconds; None if it never worked.

    Only errors of reaching Redis are retried. Any other ``AsyncBookError`` (a rejected
    input) propagates; anything else is logged with ``what`` and gives None at once. No
    attempt starts unless it can end (``attempt_timeout``: the client's own bound on one
    call) within ``retry_for``, so the caller waits at most that long.

    An outage is logged in two lines at most: the first failure (a WARNING; at DEBUG when
    not ``warn``: the caller already said that the book is down), the retries at DEBUG,
    and giving up (an ERROR, ``then`` added: what happens instead).
    """
    deadline = time.monotonic() + retry_for
    delay = FIRST_DELAY
    first = True
    while True:
        try:
            return call()
        except OUTAGE as error:
            if time.monotonic() + delay + attempt_timeout > deadline:
                logger.error(
                    "asyncbook: gave up on %s after %.1f s: %r%s",
                    what,
                    retry_for,
                    error,
                    f"; {then}" if then else "",
                )
                return None
            level = logging.WARNING if first and warn else logging.DEBUG
            logger.log(
                level,
                "asyncbook: %s failed (%r), retrying for up to %.1f s (next in %.2f s)",
                what,
                error,
                retry_for,
                delay,
            )
            first = False
            time.sleep(delay)
            delay = min(delay * 2, MAX_DELAY)
        except AsyncBookError:
            raise
        except Exception:
            logger.exception("asyncbook: %s failed", what)
            return None


def attempted(call: Callable[[], _Result], what: str) -> _Result | None:
    """``call()`` once; None (a WARNING naming ``what``) when the book did not answer.

    For a write that the held events make again later (a worker's create at the start:
    the start, held, creates the task when the book answers). Any other
    ``AsyncBookError`` propagates; anything else is logged and gives None.
    """
    try:
        return call()
    except OUTAGE as error:
        logger.warning(
            "asyncbook: %s: the book did not answer (%r); its held events create it once it does",
            what,
            error,
        )
        return None
    except AsyncBookError:
        raise
    except Exception:
        logger.exception("asyncbook: %s failed", what)
        return None
