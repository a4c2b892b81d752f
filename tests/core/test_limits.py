"""``bounded_error`` and ``require_task_id_length``: the caps of docs/spec.md's Limits."""

from __future__ import annotations

import pytest

from asyncbook import AsyncBookError, create_async_task
from asyncbook._limits import ERROR_LIMIT, TASK_ID_LIMIT, bounded_error


@pytest.mark.parametrize("size", [ERROR_LIMIT + 1, ERROR_LIMIT * 3, 2_000_000])
def test_an_error_over_the_limit_keeps_its_start_and_says_what_was_cut(size: int) -> None:
    text = "".join(chr(0x61 + n % 26) for n in range(size))
    bounded = bounded_error(text)
    assert len(bounded) <= ERROR_LIMIT
    kept = bounded.index("…")
    assert bounded == text[:kept] + f"…[cut {size - kept} characters]"


def test_an_error_of_the_limit_is_kept_whole() -> None:
    text = "e" * ERROR_LIMIT
    assert bounded_error(text) is text


def test_the_pure_create_refuses_an_id_over_the_limit() -> None:
    with pytest.raises(AsyncBookError) as caught:
        create_async_task(id="i" * (TASK_ID_LIMIT + 1), now_ms=0, ttl_ms=1, max_attempts=1)
    assert caught.value.field == "taskId"
