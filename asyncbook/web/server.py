"""Running the status server under uvicorn."""

from __future__ import annotations

from collections.abc import Callable

import uvicorn

from ..book import AsyncBook
from .app import create_app
from .auth import check_bind
from .feed import ChangeFeed

__all__ = ["serve"]


def serve(
    book: AsyncBook,
    feed: ChangeFeed | None,
    *,
    host: str = "127.0.0.1",
    port: int = 5566,
    token: str | None = None,
    log_level: str = "info",
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted; without ``token`` only a loopback ``host`` is allowed."""
    check_bind(host, token)
    app = create_app(book, feed, token=token)
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    if on_ready is not None:
        shown = f"[{host}]" if ":" in host else host
        on_ready(f"http://{shown}:{port}/")
    server.run()
