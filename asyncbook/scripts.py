"""The Lua scripts, read from ``asyncbook/lua`` and registered once per book."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.commands.core import Script

__all__ = ["BookScripts", "load_source"]

_SHARED = "_task.lua"


def load_source(name: str) -> str:
    """A script's source, with the shared task helpers in front of it."""
    folder = resources.files("asyncbook") / "lua"
    shared = (folder / _SHARED).read_text(encoding="utf-8")
    return shared + "\n" + (folder / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class BookScripts:
    """One registered ``Script`` per operation (EVALSHA, reloaded after SCRIPT FLUSH)."""

    create: Script
    apply: Script
    get: Script
    get_many: Script
    resume: Script
    deliver: Script
    drain: Script
    prune: Script

    @classmethod
    def register(cls, client: Any) -> BookScripts:
        """Register every script on ``client`` (no round trip until first use)."""
        names = ["create", "apply", "get", "get_many", "resume", "deliver", "drain", "prune"]
        return cls(**{name: client.register_script(load_source(f"{name}.lua")) for name in names})
