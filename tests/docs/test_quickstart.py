"""The README's production quickstart runs: a worker on the Redis broker runs the task,
the FastAPI app, served by uvicorn on a loopback port, submits it and reads it through
``async_book_of``."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from celery.contrib.testing.worker import start_worker

from asyncbook.celery import book_of, uninstall

from ..support.books import delete_namespace, redis_client
from ..support.celery import close_result_backend, unique
from ..support.servers import free_port
from .test_readme import BLOCKS, README

(QUICKSTART,) = [block for block in BLOCKS if 'Celery("proj"' in block]


@contextmanager
def uvicorn_serving(api: Any) -> Iterator[str]:
    """``api`` served by uvicorn on a free loopback port (its lifespan run), stopped after."""
    port = free_port()
    config = uvicorn.Config(api, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_quickstart_submits_runs_and_reads_a_task() -> None:
    module: dict[str, Any] = {"__name__": "proj"}
    exec(compile(QUICKSTART, str(README), "exec"), module)
    app, api = module["app"], module["api"]
    queue, namespace = unique("quickstart-q"), unique("quickstart")
    app.conf.update(task_default_queue=queue, asyncbook_namespace=namespace)
    app.conf.worker_hijack_root_logger = False

    def wait_until_ended(task_id: str) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            task = book_of(app).get(task_id)
            if task is not None and task.state.value == "succeeded":
                return
            time.sleep(0.05)
        raise AssertionError(f"task {task_id} did not succeed")

    try:
        with (
            start_worker(app, perform_ping_check=False, queues=[queue]),
            uvicorn_serving(api) as url,
            httpx.Client(base_url=url, timeout=20) as http,
        ):
            submitted = http.post("/transcriptions", params={"url": "s3://a.wav"})
            wait_until_ended(submitted.json()["id"])
            done = http.get(f"/transcriptions/{submitted.json()['id']}")
            missing = http.get("/transcriptions/nobody")
        assert submitted.status_code == 200
        assert done.status_code == 200
        assert done.json() == {"state": "succeeded", "progress": 100, "attempts": 1}
        assert missing.status_code == 404
        assert missing.json() == {"detail": "no transcription 'nobody'"}
    finally:
        uninstall(app)
        close_result_backend(app)
        client = redis_client()
        delete_namespace(client, namespace)
        client.delete(queue)
        client.close()
