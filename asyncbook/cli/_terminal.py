"""What the command prints of stored values, made safe for a terminal.

A task's id, name, arguments, queue, worker, error, traceback or cancel reason is text
anyone who can publish a task chose. Printed raw, an ESC in it could clear the screen,
move the cursor, set the window's title or plant a link (OSC 8), and a bidi override
could make it read backwards. ``shown`` is the one place that escapes them: every C0
and C1 control character and DEL as ``\\x1b``, the bidi controls (U+061C, U+200E,
U+200F, U+202A to U+202E, U+2066 to U+2069) and the line and paragraph separators
(U+2028, U+2029) as ``\\u202e``. Backslashes are left as they are, so an id prints as
the text to copy. ``--json`` output stays exact JSON: the same characters are written as
``\\u`` escapes there (``json_text``), which decode to the stored value.

Every path out goes through ``shown``: the rich console (``TerminalConsole``, which
also reads no markup and no emoji codes, so ``[red]x[/red]`` prints as it is), its
cells (``cell``), the plain lines (``echo``, ``echo_fields``) and ``json_text``.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.text import Text

__all__ = ["TerminalConsole", "cell", "echo", "echo_fields", "json_text", "shown"]

_BIDI = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_ESCAPED = (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029, *_BIDI)
"""The characters never printed as they are."""


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ONE_LINE = {code: _escape(code) for code in _ESCAPED}
_LINES = {code: text for code, text in _ONE_LINE.items() if code != 0x0A}
_JSON = {code: f"\\u{code:04x}" for code in _ESCAPED}


def shown(value: object, *, lines: bool = False) -> str:
    """``value`` as text safe to print: the characters above escaped (newlines kept
    when ``lines``, as in a traceback)."""
    return str(value).translate(_LINES if lines else _ONE_LINE)


def cell(value: object, *, lines: bool = False) -> Text:
    """``value`` as a rich cell: escaped (``shown``), never read as markup."""
    return Text(shown(value, lines=lines))


def echo(message: object, *, err: bool = False) -> None:
    """Print one line (``shown``, newlines kept) on stdout, or stderr with ``err``."""
    click.echo(shown(message, lines=True), err=err)


def echo_fields(*fields: object) -> None:
    """Print one line of tab-separated fields, each escaped (a tab in one is ``\\x09``)."""
    click.echo("\t".join(shown(field) for field in fields))


def json_text(data: Any) -> str:
    """``data`` as JSON (UTF-8 as is) with the characters above as ``\\u`` escapes:
    the same value to a parser, nothing a terminal acts on. They can only stand in
    strings, where such an escape means the character itself."""
    return json.dumps(data, ensure_ascii=False).translate(_JSON)


class TerminalConsole(Console):
    """A rich console that escapes every string it renders (``shown``, newlines kept)
    and reads no markup, emoji codes or highlights in them."""

    def __init__(self, **options: Any) -> None:
        super().__init__(markup=False, emoji=False, highlight=False, **options)

    def render_str(self, text: str, **options: Any) -> Text:
        """The string as text: escaped, then as rich would (without markup)."""
        return super().render_str(
            shown(text, lines=True), **{**options, "emoji": False, "markup": False}
        )
