"""Concurrency limits across workers, end to end (docs/limits.md): four prefork workers
(one pool process each) run 3 tenants' 30 tasks each with a limit of 2 per tenant.
Sampled from the book, no tenant ever runs more than 2; every task runs once; and the
whole takes at most 1.3 times the ideal (each tenant's 30 tasks, two at a time)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
import redis

from asyncbook import RedisBook
from asyncbook.celery import install, uninstall

from ..support import ROOT
from ..support.books import delete_namespace
from ..support.celery import CELERY_URL as URL
from ..support.celery import CeleryWorker, close_result_backend, unique

pytestmark = [pytest.mark.redis, pytest.mark.long, pytest.mark.timeout(240)]

TENANTS, EACH, LIMIT, SECONDS = ("acme", "globex", "initech"), 30, 2, 0.5


def test_no_tenant_runs_more_than_its_limit_across_four_workers(tmp_path: Path) -> None:
    import workers
    from workers.tasks import tenant_job

    fleet = [CeleryWorker(ROOT, URL, tmp_path / f"{n}.log", concurrency=1) for n in range(4)]
    first = fleet[0]
    for other in fleet[1:]:
        other.namespace, other.queue = first.namespace, first.queue
    app = workers.app
    app.conf.update(broker_url=URL, result_backend=URL, task_default_queue=first.queue)
    book = RedisBook.from_url(URL, namespace=first.namespace)
    install(app, book)
    client = redis.Redis.from_url(URL)
    try:
        for worker in fleet:
            worker.start()
        began = time.monotonic()
        ids = {unique(tenant): tenant for n in range(EACH) for tenant in TENANTS}
        for task_id, tenant in ids.items():
            tenant_job.apply_async(kwargs={"tenant": tenant, "seconds": SECONDS}, task_id=task_id)
        most: Counter[str] = Counter()
        while True:
            running = book.list_tasks("running", limit=100, full_task=False).tasks
            now = Counter(ids[task.id] for task in running)
            for tenant, count in now.items():
                most[tenant] = max(most[tenant], count)
            done = book.count_by_state()
            if done.get("succeeded", 0) == len(ids) or time.monotonic() - began > 200:
                break
            time.sleep(0.02)
        took = time.monotonic() - began
        tasks = [task for task_id in ids if (task := book.get(task_id)) is not None]
        assert len(tasks) == len(ids)
        assert [task.state.value for task in tasks] == ["succeeded"] * len(ids)
        assert {task.attempts for task in tasks} == {1}
        assert max(most.values()) == LIMIT, most
        # Four workers, each tenant two at a time: the workers are the bound.
        ideal = max(EACH / LIMIT, len(ids) / 4) * SECONDS
        assert took <= 1.3 * ideal, (took, ideal)
    finally:
        for worker in fleet:
            worker.stop()
        uninstall(app)
        close_result_backend(app)
        delete_namespace(client, first.namespace)
        for key in client.scan_iter(match=f"*{first.queue}*"):
            client.delete(key)
        client.close()
