"""The quickstarts run. The production quickstart (docs/quickstart.md): a worker on the
Redis broker runs the task, the FastAPI app, served by uvicorn on a loopback port, submits
it and reads it through ``async_book_of``. The README's: a worker runs the tracked task and
the book holds its whole life."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from celery.contrib.testing.worker import start_worker

from asyncbook import AsyncTask
from asyncbook.celery import book_of, uninstall

from ..support.books import delete_namespace, redis_client
from ..support.celery import close_result_backend, unique
from ..support.servers import free_port
from ..support.snippets import README, snippet

QUICKSTART, QUICKSTART_PAGE = snippet('Celery("proj"')
README_QUICKSTART, _ = snippet('Celery("tasks"', README)


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


@contextmanager
def example_worker(source: str, page: Path, name: str) -> Iterator[dict[str, Any]]:
    """The example module ``source`` run as module ``name``, its app on a queue and a
    namespace of its own with an embedded worker: the module's globals; all removed after."""
    module: dict[str, Any] = {"__name__": name}
    exec(compile(source, str(page), "exec"), module)
    app = module["app"]
    queue, namespace = unique(f"{name}-q"), unique(name)
    app.conf.update(task_default_queue=queue, asyncbook_namespace=namespace)
    app.conf.worker_hijack_root_logger = False
    try:
        with start_worker(app, perform_ping_check=False, queues=[queue]):
            yield module
    finally:
        uninstall(app)
        if app.conf.result_backend:  # the README's app keeps no results
            close_result_backend(app)
        client = redis_client()
        delete_namespace(client, namespace)
        client.delete(queue)
        client.close()


def wait_until_ended(app: Any, task_id: str) -> AsyncTask:
    """The task once it ended, read through ``book_of(app)``."""
    deadline = time.monotonic() + 20
    while (task := book_of(app).get(task_id)) is None or not task.terminal:
        assert time.monotonic() < deadline, f"task {task_id} did not end"
        time.sleep(0.05)
    return task


def test_the_quickstart_submits_runs_and_reads_a_task() -> None:
    with (
        example_worker(QUICKSTART, QUICKSTART_PAGE, "proj") as module,
        uvicorn_serving(module["api"]) as url,
        httpx.Client(base_url=url, timeout=20) as http,
    ):
        submitted = http.post("/transcriptions", params={"url": "s3://a.wav"})
        assert wait_until_ended(module["app"], submitted.json()["id"]).state == "succeeded"
        done = http.get(f"/transcriptions/{submitted.json()['id']}")
        missing = http.get("/transcriptions/nobody")
    assert submitted.status_code == 200
    assert done.status_code == 200
    assert done.json() == {"state": "succeeded", "progress": 100, "attempts": 1}
    assert missing.status_code == 404
    assert missing.json() == {"detail": "no transcription 'nobody'"}


def test_the_readme_quickstart_tracks_a_task_through_a_worker() -> None:
    with example_worker(README_QUICKSTART, README, "tasks") as module:
        task = wait_until_ended(module["app"], module["transcribe_audio"].delay("s3://a").id)
    assert (task.state, task.attempts, task.max_attempts) == ("succeeded", 1, 3)
    events = [entry.event.type for entry in task.history]
    assert events == ["start", "progress", "progress", "progress", "succeed"]
    assert task.expires_at_ms - task.history[0].event.at_ms <= 1_800_000  # ttl=1800 (s)
