"""Signed webhooks: what signing costs a webhook sink's delivery.

Run:  .venv/bin/python bench/bench_webhook_signing.py [--notifications 2000]

A loopback receiver in a process of its own (the stdlib's threading HTTP server,
keep-alive: its header parsing does not share the sink's interpreter) answers 200 to
every POST. Three ``WebhookSink``s deliver the same notifications, interleaved one by
one in one run (each first in turn): unsigned (as before), signed with one secret, and
with two (rotating).
Measured: each POST's time, and the three signing headers alone (``signed_headers``).
Target: signed deliveries per second at least 0.95 of unsigned.
"""

from __future__ import annotations

import argparse
import base64
import multiprocessing
import platform
import statistics
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from asyncbook import Notification, WebhookSink  # noqa: E402
from asyncbook._webhook_signing import WebhookSecret, signed_headers  # noqa: E402

SECRETS = ["whsec_" + base64.b64encode(bytes([n]) * 32).decode() for n in (1, 2)]


class Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


def serve(port: multiprocessing.SimpleQueue) -> None:  # type: ignore[type-arg]
    """The receiver's process: serve until terminated."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    port.put(server.server_address[1])
    server.serve_forever()


def percentiles(seconds: list[float]) -> str:
    ordered = sorted(seconds)
    p99 = ordered[int(len(ordered) * 0.99) - 1]
    return f"{statistics.median(ordered) * 1e6:.0f} / {p99 * 1e6:.0f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--notifications", type=int, default=2000)
    args = parser.parse_args()
    port: multiprocessing.SimpleQueue[int] = multiprocessing.SimpleQueue()
    receiver = multiprocessing.Process(target=serve, args=(port,), daemon=True)
    receiver.start()
    url = f"http://127.0.0.1:{port.get()}/hook"
    sinks = {
        "unsigned": WebhookSink(url),
        "one secret": WebhookSink(url, secret=SECRETS[0]),
        "two secrets (rotating)": WebhookSink(url, secrets=SECRETS),
    }
    times: dict[str, list[float]] = {name: [] for name in sinks}
    try:
        for n in range(args.notifications):
            note = Notification(task_id=f"bench-{n}", state="succeeded", at_ms=n)
            names = list(sinks)
            for name in names[n % 3 :] + names[: n % 3]:  # interleaved, each first in turn
                sink = sinks[name]
                started = time.perf_counter()
                sink(note)
                times[name].append(time.perf_counter() - started)
    finally:
        for sink in sinks.values():
            sink.close()
        receiver.terminate()
        receiver.join()
    body = b'{"taskId": "bench-1", "state": "succeeded", "atMs": 1}'
    keys = [WebhookSecret.parse(secret, "secret") for secret in SECRETS]
    rounds = 20_000
    started = time.perf_counter()
    for n in range(rounds):
        signed_headers(keys, "msg_0123456789abcdef0123456789abcdef", n, body)
    headers_us = (time.perf_counter() - started) / rounds * 1e6

    print(f"Python {platform.python_version()}, {args.notifications} notifications per sink")
    print("| sink | POST p50 / p99 | deliveries/s | ÷ unsigned |")
    print("|---|---|---|---|")
    base = len(times["unsigned"]) / sum(times["unsigned"])
    for name, seconds in times.items():
        rate = len(seconds) / sum(seconds)
        print(f"| {name} | {percentiles(seconds)} | {rate:.0f} | {rate / base:.3f} |")
    print(f"signed_headers with two secrets: {headers_us:.1f} µs a call")


if __name__ == "__main__":
    main()
