"""Scripts run strict in the tests: a command whose key is not among KEYS raises.

``STRICT_PRELUDE`` goes in front of every script the book registers, and of the helpers
of its Functions library (conftest's autouse fixture): it shadows ``redis`` with a table
whose ``call`` and ``pcall`` check each command's keys against KEYS first (the KEYS of
the call: a library's top level runs once, at FUNCTION LOAD, where only ``redis`` is
there: no ``ipairs``, no ``setmetatable``), as Redis Cluster's rule and Dragonfly's default
(no undeclared keys) require. The key positions come from a table of the commands the
scripts use; a command missing from it raises too, so a new one must be placed there.
"""

from __future__ import annotations

from pathlib import Path

KEYLESS = ("PUBLISH", "TIME")
"""Commands that touch no key (PUBLISH names a channel)."""
EVERY_ARGUMENT = ("DEL", "EXISTS", "UNLINK", "MGET", "TOUCH")
"""Commands whose every argument is a key."""
SECOND_ARGUMENT = ("XINFO",)
"""Commands whose key follows a subcommand (XINFO GROUPS key)."""
FIRST_ARGUMENT = (
    "GET", "GETRANGE", "SET", "INCR", "PEXPIRE", "EXPIRE",
    "HGET", "HMGET", "HSET", "HEXISTS", "HSETNX", "HINCRBY", "HGETALL", "HDEL",
    "LLEN", "LRANGE", "LPOP", "LINDEX", "RPUSH", "LTRIM", "PTTL", "PERSIST",
    "ZADD", "ZREM", "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE", "ZSCORE", "ZCARD",
    "ZREMRANGEBYRANK", "ZREVRANGE", "ZRANK", "ZREVRANK", "ZCOUNT", "ZMSCORE",
    "XADD", "XRANGE", "XTRIM", "XPENDING", "XREVRANGE", "PEXPIREAT",
)  # fmt: skip
"""Commands whose first argument is their one key."""


def _lua_set(name: str, commands: tuple[str, ...]) -> str:
    return f"local {name} = {{" + ", ".join(f"{c} = true" for c in commands) + "}"


STRICT_PRELUDE = "\n".join(
    [
        "-- strict keys (tests): every key a command touches must be among KEYS",
        "local __declared, __of = {}, nil  -- KEYS as a set, made again for each call's KEYS",
        "local function __redis() return redis end  -- the global, as when it is called",
        _lua_set("__keyless", KEYLESS),
        _lua_set("__every", EVERY_ARGUMENT),
        _lua_set("__second", SECOND_ARGUMENT),
        _lua_set("__first", FIRST_ARGUMENT),
        (Path(__file__).parent / "strict_keys.lua").read_text(encoding="utf-8"),
    ]
)
