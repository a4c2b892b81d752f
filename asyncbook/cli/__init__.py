"""The ``asyncbook`` command: look tasks up, follow them, sweep, deliver, serve."""

from ._commands import cli, main

__all__ = ["cli", "main"]
