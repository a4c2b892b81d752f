"""Objects named by a dotted path in settings (sinks, result-ref callables)."""

from __future__ import annotations

import importlib
from typing import Any

from .errors import invalid

__all__ = ["import_path"]


def import_path(path: str) -> Any:
    """The object ``package.module:attribute`` (or ``package.module.attribute``) names."""
    module, _, attribute = path.partition(":") if ":" in path else path.rpartition(".")
    if not module or not attribute:
        raise invalid(f"{path!r} is not a dotted path to an object", field="path")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise invalid(f"{path!r} cannot be imported: {error}", field="path") from None
