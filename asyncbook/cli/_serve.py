"""``asyncbook serve``: the status server, with its access options (docs/access.md)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, TypedDict, Unpack

import click

from ..artifacts import open_store
from ..errors import AsyncBookError
from ._artifact_cmds import artifacts_option
from ._context import GroupOptions
from ._meta_results import meta_result
from ._queues import broker_for, broker_options

if TYPE_CHECKING:
    from ..celery import Resender
    from ..redis import RedisBook

__all__ = ["serve"]

_OPTION_OF_FIELD = {
    "token": "--token",
    "read_token": "--read-token",
    "trusted_header": "--trusted-header",
    "trusted_proxy": "--trusted-proxy",
    "allowedHosts": "--allowed-host",
    "resultRef": "--artifacts",
}


def _names(ctx: click.Context, param: click.Parameter, values: Sequence[str]) -> list[str]:
    """Each value may list several, separated by commas (as its variable does)."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


class ServerOptions(TypedDict):
    """The server's own options, handed to ``asyncbook.web.serve`` as given."""

    host: str
    port: int
    allowed_hosts: list[str]
    proxy_headers: bool
    forwarded_allow_ips: str | None
    log_level: str
    own_queue: str
    max_streams: int


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", type=click.IntRange(0, 65535), default=5566, show_default=True)
@click.option(
    "--token",
    envvar="ASYNCBOOK_API_TOKEN",
    default=None,
    help="The operator token: every endpoint but /metrics, changes (cancel) included; 16 "
    "characters at least (env ASYNCBOOK_API_TOKEN).",
)
@click.option(
    "--read-token",
    envvar="ASYNCBOOK_READ_TOKEN",
    default=None,
    help="The read token: pages, API reads, streams, the audit, never a change; 16 "
    "characters at least, not the operator token (env ASYNCBOOK_READ_TOKEN).",
)
@click.option(
    "--trusted-header",
    envvar="ASYNCBOOK_TRUSTED_HEADER",
    default=None,
    metavar="NAME",
    help="Behind an auth proxy: the header naming the user (X-Forwarded-User), believed "
    "only from --trusted-proxy (env ASYNCBOOK_TRUSTED_HEADER).",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    envvar="ASYNCBOOK_TRUSTED_PROXIES",
    callback=_names,
    metavar="ADDR",
    help="An address or CIDR of the auth proxy (repeatable; required with --trusted-header; "
    "env ASYNCBOOK_TRUSTED_PROXIES, comma-separated).",
)
@click.option(
    "--operators",
    multiple=True,
    envvar="ASYNCBOOK_OPERATORS",
    callback=_names,
    metavar="USERS",
    help="Users the trusted header names who get the operator role, comma-separated "
    "(everyone else it names reads only; env ASYNCBOOK_OPERATORS).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar="ASYNCBOOK_ALLOWED_HOSTS",
    callback=_names,
    metavar="NAME",
    help="A name clients reach the server by, besides localhost, 127.0.0.1 and [::1] "
    "(repeatable; *.example.com for subdomains; env ASYNCBOOK_ALLOWED_HOSTS, comma-separated).",
)
@click.option(
    "--proxy-headers/--no-proxy-headers",
    default=False,
    show_default=True,
    help="Trust X-Forwarded-For/-Proto from --forwarded-allow-ips (behind a reverse proxy).",
)
@click.option(
    "--forwarded-allow-ips",
    default=None,
    metavar="IPS",
    help="Proxy addresses trusted with --proxy-headers, comma-separated "
    "(default: env FORWARDED_ALLOW_IPS, or 127.0.0.1).",
)
@click.option("--log-level", default="info", show_default=True)
@click.option(
    "--max-streams",
    type=click.IntRange(min=1),
    default=1_000,
    show_default=True,
    envvar="ASYNCBOOK_MAX_STREAMS",
    help="Event streams (a task's, its output's, a group's) open at once; one more is "
    "answered 503 with Retry-After (env ASYNCBOOK_MAX_STREAMS).",
)
@artifacts_option
@broker_options(
    "its queues are shown (/queues, /api/queues) and resends are sent to it (without it, a "
    "resend answers 503 no-broker)"
)
@click.pass_obj
def serve(
    settings: GroupOptions,
    /,
    token: str | None,
    read_token: str | None,
    trusted_header: str | None,
    trusted_proxies: list[str],
    operators: list[str],
    broker_url: str | None,
    artifacts_url: str | None,
    **server: Unpack[ServerOptions],
) -> None:
    """Serve the JSON API, task streams, /metrics and the status page (with --broker,
    the broker's queues on /queues, and the Resend button and routes send tasks again
    through that broker: an ``asyncbook.celery.Resender``, which the server is handed)."""
    from ..web import AccessRules, feed_for
    from ..web import serve as run_server

    try:
        access = AccessRules.of(
            token or None, read_token or None, trusted_header, trusted_proxies, operators
        )
        # The server reads through the book's asyncio twin (the same client settings,
        # shards and home rule; Cluster and Sentinel included), as it would the book
        # (``reader_for``); the change feed follows the book's own client.
        book = settings.book
        served = book.async_twin() or book
        broker = broker_for(broker_url)
        artifacts = open_store(artifacts_url) if artifacts_url else None
    except AsyncBookError as error:
        hint = _OPTION_OF_FIELD.get(error.field or "", "--host")
        raise click.BadParameter(error.message, param_hint=hint) from None
    try:
        run_server(
            served,
            feed_for(book),
            on_ready=lambda url: click.echo(f"asyncbook status page: {url}"),
            access=access,
            broker=broker,
            resender=_resender(settings.book, broker_url),
            artifacts=artifacts,
            results_elsewhere=partial(meta_result, book.client),
            **server,
        )
    except AsyncBookError as error:
        hint = _OPTION_OF_FIELD.get(error.field or "", "--host")
        raise click.BadParameter(error.message, param_hint=hint) from None
    finally:
        if broker is not None:
            broker.close()


def _resender(book: RedisBook, broker_url: str | None) -> Resender | None:
    """What sends the server's resends through ``broker_url`` (None: no broker given)."""
    if not broker_url:
        return None
    from ..celery import Resender  # Celery's, loaded only when a broker is given

    return Resender(book, broker_url)
