"""``MemoryBook.cancel_many``: many cancels, each its own ``cancel`` with an actor."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ._audit import require_actor
from ._models import CallbackResult
from .errors import AsyncBookError

__all__ = ["MemoryCancelCalls"]


class MemoryCancelCalls:
    """``MemoryBook``'s batch cancel, made of its ``cancel``."""

    now_ms: Callable[[], int]
    cancel: Callable[..., CallbackResult]

    def cancel_many(
        self,
        task_ids: Iterable[str],
        *,
        actor: str,
        reason: str | None = None,
        at_ms: int | float | None = None,
    ) -> list[CallbackResult | AsyncBookError]:
        """Cancel many tasks, each audited as ``actor``'s: for each id what ``cancel``
        answers (``at_ms`` the book's clock once, when None), its error in its place."""
        who = require_actor(actor)
        at = self.now_ms() if at_ms is None else at_ms
        results: list[CallbackResult | AsyncBookError] = []
        for task_id in task_ids:
            try:
                results.append(self.cancel(task_id, reason, at_ms=at, actor=who))
            except AsyncBookError as error:
                results.append(error)
        return results
