"""``ShardDue``: one shard of a book as the sweep sees it (``RedisBook.each_shard``): its
overdue tasks and their expiry, so that each shard is swept on its own."""

from __future__ import annotations

from collections.abc import Iterable

from .._models import AsyncTransition
from ..errors import AsyncBookError
from . import _batch_ops as batch_ops
from . import _operations as operations
from ._book_driver import Driver
from ._merged import on

__all__ = ["ShardDue"]


class ShardDue:
    """The due tasks of shard ``index`` of the namespace ``driver`` runs plans on."""

    def __init__(self, driver: Driver, index: int) -> None:
        self.driver = driver
        self.index = index
        """Which shard."""

    def overdue(self, now_ms: int | float, limit: int = 1000) -> list[str]:
        """The shard's live tasks due at ``now_ms``, earliest first."""
        plan = operations.overdue(self.driver.ns.shards[self.index], now_ms, limit)
        return self.driver.run(on(self.index, plan, writes=False))

    def expire_many(
        self, task_ids: Iterable[str], *, full_task: bool = True
    ) -> list[AsyncTransition | AsyncBookError]:
        """``RedisBook.expire_many`` of the shard's tasks (their groups checked)."""
        return self.driver.run(batch_ops.expire_many(self.driver.ns, task_ids, full_task=full_task))
