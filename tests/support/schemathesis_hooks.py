"""schemathesis hooks for the status server's run against its own OpenAPI document
(``tests/web/test_schemathesis.py`` names this module in ``SCHEMATHESIS_HOOKS``)."""

from __future__ import annotations

from typing import Any

import schemathesis


@schemathesis.hook
def filter_query(context: Any, query: dict[str, Any] | None) -> bool:
    """No generated ``after``: a page cursor whose shape follows ``sort`` (digits by
    creation, ``<value>:<id>`` or ``~<digits>`` by another field), which an OpenAPI
    parameter cannot tie to another one; the web tests page with real cursors."""
    return not query or "after" not in query
