"""Running the ``asyncbook`` command in the tests: through click's runner, on the CLI
tests' Redis (db 15) and a book's namespace."""

from __future__ import annotations

import os

from click.testing import CliRunner, Result

from asyncbook import RedisBook
from asyncbook.cli import cli

CLI_REDIS_URL = os.environ.get("ASYNCBOOK_TEST_CLI_REDIS_URL", "redis://127.0.0.1:6379/15")


def run(
    book: RedisBook,
    *args: str,
    url: str = CLI_REDIS_URL,
    columns: int | None = None,
    input: str | None = None,
) -> Result:
    """``asyncbook <args>`` on ``book``'s namespace at ``url`` (``columns`` wide if given;
    ``input`` typed in, for a prompt)."""
    env = {"ASYNCBOOK_REDIS_URL": url, "ASYNCBOOK_NAMESPACE": book.namespace}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return CliRunner().invoke(cli, list(args), env=env, input=input)
