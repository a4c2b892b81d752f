"""The Lua scripts, read from ``asyncbook/lua`` and registered once per book."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.commands.core import Script
from redis.exceptions import NoScriptError

__all__ = ["BookScript", "BookScripts", "load_source"]

_SHARED = "_task.lua"


def load_source(name: str) -> str:
    """A script's source, with the shared task helpers in front of it."""
    folder = resources.files("asyncbook.redis") / "lua"
    shared = (folder / _SHARED).read_text(encoding="utf-8")
    return shared + "\n" + (folder / name).read_text(encoding="utf-8")


class BookScript:
    """One script, called by EVALSHA; after NOSCRIPT, by EVAL with its source.

    NOSCRIPT means the script did not run, so calling again is safe. EVAL (rather than
    SCRIPT LOAD then EVALSHA, which another client's ``SCRIPT FLUSH`` can race) always
    runs, and caches the script for the next EVALSHA.
    """

    def __init__(self, script: Script, client: Any) -> None:
        self.script = script
        self.client = client

    @property
    def sha(self) -> str:
        """The SHA1 Redis knows the script by."""
        return str(self.script.sha)

    @property
    def source(self) -> str:
        """The Lua source."""
        return str(self.script.script)

    def __call__(self, keys: Sequence[str], args: Sequence[Any] = ()) -> Any:
        try:
            return self.client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return self.client.eval(self.source, len(keys), *keys, *args)


@dataclass(frozen=True)
class BookScripts:
    """One registered script per operation."""

    create: BookScript
    apply: BookScript
    get: BookScript
    get_many: BookScript
    resume: BookScript
    deliver: BookScript
    drain: BookScript
    prune: BookScript

    @classmethod
    def register(cls, client: Any) -> BookScripts:
        """Register every script on ``client`` (no round trip until first use)."""
        names = ["create", "apply", "get", "get_many", "resume", "deliver", "drain", "prune"]
        return cls(
            **{
                name: BookScript(client.register_script(load_source(f"{name}.lua")), client)
                for name in names
            }
        )
