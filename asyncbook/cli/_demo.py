"""``asyncbook demo`` (``make demo`` in a checkout): the example Celery tasks, tracked end to
end.

With Redis answering at ``REDIS_URL`` (default redis://127.0.0.1:6379/0), a real
``celery -A asyncbook.cli._demo_app worker -B`` runs the tasks in a namespace and a queue of
its own, which are removed afterwards. Without Redis, everything runs in this process:
fakeredis for the book (the ``demo`` extra), Celery's in-memory broker and an embedded
worker. The app, its tasks and its configuration are in the package (``_demo_app``), so the
demo runs from an installed wheel, in any directory. ``--app workers`` (``make demo``) runs
a checkout's own app instead on the real Redis, configured by its ``celeryconfig.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import redis

from .._models import AsyncTask, HistoryEntry, to_wire
from ..celery._tracking import now_ms
from ..redis import DEFAULT_REDIS_URL, RedisBook

__all__ = ["WebhookReceiver", "main"]

Out = Callable[[str], None]


class WebhookReceiver:
    """A loopback HTTP server that records each POST (headers, JSON body; ``bodies``
    keeps each body's bytes as received, which a signature covers).

    ``statuses`` scripts the answers (popped first to last); 200 once it is empty.
    """

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.bodies: list[bytes] = []
        self.statuses: list[int] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.bodies.append(body)
                receiver.requests.append((dict(self.headers), json.loads(body or b"{}")))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notifications"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


def _redis_answers(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5)
        with contextlib.closing(client):
            return bool(client.ping())
    except (redis.RedisError, OSError, ValueError):
        return False


def _fake_redis(url: str) -> redis.Redis:
    """A fakeredis server for the embedded demo; without the ``demo`` extra, a way out."""
    try:
        import fakeredis
    except ImportError:
        raise SystemExit(
            f"No Redis at {url}, and the embedded demo needs fakeredis: "
            "pip install 'asyncbook[demo]', or set REDIS_URL to a Redis that answers"
        ) from None
    return fakeredis.FakeRedis()


@contextlib.contextmanager
def _real_worker(
    url: str, namespace: str, queue: str, webhook: str, app: str = "asyncbook.cli._demo_app"
) -> Iterator[None]:
    # An app of the current directory (a checkout's workers/) is found there; the
    # package's own is found wherever it is installed.
    own = app.startswith(f"{__package__}.")
    path = [path for path in [os.environ.get("PYTHONPATH")] if path]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path if own else [os.getcwd(), *path]),
        "REDIS_URL": url,
        "ASYNCBOOK_NAMESPACE": namespace,
        "ASYNCBOOK_QUEUE": queue,
        "ASYNCBOOK_WEBHOOK_URL": webhook,
    }
    with tempfile.TemporaryDirectory(prefix="asyncbook-demo-") as tmp:
        log_path = Path(tmp) / "worker.log"
        command = [
            sys.executable, "-m", "celery", "-A", app, "worker", "-B",
            "-s", str(Path(tmp) / "beat-schedule"), "--pool=prefork", "-c", "4",
            "-n", f"{queue}@localhost", "--without-gossip", "--without-mingle", "-l", "info",
        ]  # fmt: skip
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while b"ready" not in log_path.read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the worker did not start:\n" + log_path.read_text())
                time.sleep(0.1)
            yield
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def _embedded_worker(app: Any, integration: Any) -> Iterator[None]:
    from celery.contrib.testing.worker import start_worker

    # The failing example fails on purpose: keep Celery's traceback out of the demo.
    logging.getLogger("celery.app.trace").setLevel(logging.CRITICAL)
    stop = threading.Event()

    def beat() -> None:  # what celery beat does with the beat_schedule install adds
        while not stop.wait(0.5):
            integration.sweep()
            integration.deliver()

    thread = threading.Thread(target=beat, name="demo-beat", daemon=True)
    with start_worker(app, perform_ping_check=False, pool="threads", concurrency=4):
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def _bar(task: AsyncTask | None) -> str:
    if task is None:
        return "publishing"
    filled = int(task.progress) // 10
    bar = "#" * filled + "." * (10 - filled)
    return f"{task.state.value:<9} [{bar}] {int(task.progress):>3}%  attempt {task.attempts}"


def _watch(book: RedisBook, jobs: dict[str, str], out: Out, timeout: float = 60.0) -> None:
    tty = sys.stdout.isatty() and out is print
    last: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    drawn = False
    while True:
        tasks = {name: book.get(task_id) for name, task_id in jobs.items()}
        lines = {name: f"  {name:<13} {_bar(task)}" for name, task in tasks.items()}
        if tty:
            if drawn:
                sys.stdout.write(f"\x1b[{len(lines)}F")
            sys.stdout.write("".join(f"{line}\x1b[K\n" for line in lines.values()))
            sys.stdout.flush()
            drawn = True
        else:
            for name, line in lines.items():
                if last.get(name) != line:
                    out(line)
            last = lines
        if all(task is not None and task.terminal for task in tasks.values()):
            return
        if time.monotonic() > deadline:
            out("  (gave up waiting)")
            return
        time.sleep(0.1)


def _describe(entry: HistoryEntry, start: int | float) -> str:
    event = to_wire(entry.event)
    kind = event.pop("type")
    at = event.pop("atMs") - start
    details = " ".join(f"{key}={value}" for key, value in event.items())
    return f"    v{entry.version:<2} +{at / 1000:6.2f}s  {kind:<8} {details}"


def _life(name: str, task: AsyncTask, out: Out) -> None:
    out(
        f"  {name} ({task.id}): {task.state.value}, attempts {task.attempts}/"
        f"{task.max_attempts}" + (f", error {task.error!r}" if task.error else "")
    )
    start = task.history[0].event.at_ms if task.history else task.expires_at_ms
    for entry in task.history:
        out(_describe(entry, start))


def run(url: str, out: Out = print, *, serve: bool = False, app_module: str = "") -> None:
    """The whole demo against ``url`` (or embedded, when nothing answers there).

    The status page serves the demo's book while it runs; with ``serve`` it stays up
    after the demo until interrupted (Ctrl-C). ``app_module`` (importable from the
    current directory) is the app the real worker runs and the tasks are published from,
    instead of the package's own; the embedded run always uses the package's.
    """
    from ..celery import RedisBroker, Resender, install
    from ..web import BackgroundServer, feed_for

    demo = f"asyncbook-demo-{uuid.uuid4().hex[:8]}"
    real = _redis_answers(url)
    fake = None if real else _fake_redis(url)
    # One installed app in this process: the package's, or the one named (never both,
    # or each would track the other's publishes in its own book).
    name = app_module if real and app_module else f"{__package__}._demo_app"
    if name == app_module:
        sys.path.insert(0, os.getcwd())
    workers: Any = importlib.import_module(name)
    app = workers.app
    receiver = WebhookReceiver()
    broker: RedisBroker | None = None  # the status page's queues: the real broker's only
    if fake is None:
        out(f"Redis answers at {url}: a real worker (celery -A {name} worker -B) runs the tasks")
        out(f"  namespace {demo!r} and queue {demo!r}, removed at the end")
        book = RedisBook.from_url(url, namespace=demo)
        backend = str(app.conf.result_backend or "")
        backend_url = f"asyncbook+{url}" if backend.startswith("asyncbook+") else url
        out(f"  broker {url}, result backend {backend_url}")
        app.conf.update(broker_url=url, result_backend=backend_url, task_default_queue=demo)
        worker = _real_worker(url, demo, demo, receiver.url, name)
        broker = RedisBroker(url)
    else:
        out(f"No Redis at {url}: running embedded (fakeredis book, Celery in-memory broker,")
        out("  a worker thread in this process, a sweep/delivery loop standing in for beat)")
        book = RedisBook(fake, namespace=demo)
        app.conf.update(
            broker_url="memory://",
            result_backend="cache+memory://",
            task_default_queue=demo,
            broker_transport_options={"polling_interval": 0.05},
            worker_hijack_root_logger=False,
        )
    app.conf.asyncbook_sinks = [receiver.url]
    app.conf.asyncbook_keep_messages = True  # the page's Resend sends a failed task again
    integration = install(app, book)
    if not real:
        worker = _embedded_worker(app, integration)
    # The page's resends go to the app's broker (in-process memory:// when embedded).
    resender = Resender(book, str(app.conf.broker_url))
    page = BackgroundServer(
        book, feed_for(book), port=5566 if serve else 0, broker=broker, resender=resender
    )
    out(f"Status page (tasks, live progress, histories): {page.start()}")
    ids: list[str] = []
    try:
        with worker:
            out("")
            out("Publishing four tracked tasks:")
            results = {
                "generate": workers.generate.delay("a cat in a hat", steps=10, delay=0.25),
                "flaky_fetch": workers.flaky_fetch.delay("prices", failures=1),
                "reject_input": workers.reject_input.delay("???"),
                "outlive": workers.outlive.delay(seconds=4.0),
            }
            jobs = {name: result.id for name, result in results.items()}
            ids = list(jobs.values())
            _watch(book, jobs, out)
            late = results["outlive"].get(timeout=15, propagate=False)
            deadline = time.monotonic() + 15
            while len({body["taskId"] for _, body in receiver.requests}) < len(jobs):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            time.sleep(0.5)
        out("")
        out("Each task's life (the book's history, versions and events):")
        for name, task_id in jobs.items():
            task = book.get(task_id)
            if task is not None:
                _life(name, task, out)
        out(f"  (outlive ended after its deadline: the book refused it; Celery's result {late!r})")
        out("")
        out("Notifications, delivered by the webhook sink (one per task):")
        for headers, body in receiver.requests:
            out(f"  POST Idempotency-Key={headers.get('Idempotency-Key')}  {json.dumps(body)}")
        out("")
        out("The client collects the result of generate, twice, with one idempotency key:")
        for _ in range(2):
            delivery = book.deliver_result(jobs["generate"], "client-7", now_ms=now_ms())
            receipt = to_wire(delivery.receipt) if delivery.receipt else None
            out(f"  {delivery.reason}: {json.dumps(receipt)}")
        if serve:
            out("")
            out(f"The status page stays up at {page.url} until you press Ctrl-C.")
            _wait_for_interrupt()
    finally:
        page.stop()
        if broker is not None:
            broker.close()
        receiver.close()
        integration.disconnect()
        if real:
            _cleanup(book, demo, ids)
            out("")
            out(f"Removed the demo's keys ({demo!r}) from {url}.")


def _cleanup(book: RedisBook, demo: str, ids: list[str]) -> None:
    client = book.client
    keys = [*client.scan_iter(match="{" + demo + "}:*", count=1000)]
    keys += [*client.scan_iter(match=f"*{demo}*", count=1000)]
    keys += [f"celery-task-meta-{task_id}" for task_id in ids]
    for start in range(0, len(keys), 500):
        client.delete(*keys[start : start + 500])


def _wait_for_interrupt() -> None:
    """Block until SIGINT or SIGTERM, whatever handlers Celery left installed."""
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> None:
    """``asyncbook demo [--serve] [--app MODULE]``: uses ``REDIS_URL`` if Redis answers
    there."""
    parser = argparse.ArgumentParser(prog="asyncbook demo", description=__doc__)
    parser.add_argument(
        "--serve",
        action="store_true",
        help="keep the status page up on port 5566 after the demo, until Ctrl-C",
    )
    parser.add_argument(
        "--app",
        default="",
        metavar="MODULE",
        help="on a real Redis, the Celery app to run (celery -A MODULE, importable from the "
        "current directory; a checkout's 'workers', configured by its celeryconfig.py) "
        "instead of the package's own",
    )
    args = parser.parse_args(argv)
    run(os.environ.get("REDIS_URL", DEFAULT_REDIS_URL), serve=args.serve, app_module=args.app)


if __name__ == "__main__":
    main()
