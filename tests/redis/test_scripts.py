"""Each script's ARGV record has exactly the slots its Lua header documents."""

from __future__ import annotations

import inspect
import re
from importlib import resources

import pytest

from asyncbook.redis._keys import KeySchema
from asyncbook.redis._scripts import (
    AT_DEADLINE,
    ApplyArgs,
    CreateArgs,
    DeliverArgs,
    GetManyArgs,
    ResumeArgs,
    ScriptStatus,
    load_source,
)

SAMPLES: dict[str, CreateArgs | ApplyArgs | ResumeArgs | DeliverArgs | GetManyArgs] = {
    "create.lua": CreateArgs("t", '"t"', "10", 1, False, "ch"),
    "apply.lua": ApplyArgs("t", True, True, AT_DEADLINE, "", "ch", False),
    "resume.lua": ResumeArgs(0, 8, True),
    "deliver.lua": DeliverArgs('"k"', "1", ""),
    "get_many.lua": GetManyArgs(True),
}


def _header(name: str) -> str:
    text = (resources.files("asyncbook.redis") / "lua" / name).read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def _argv_slots(header: str) -> list[int]:
    argv = header.split("-- ARGV:", 1)[1].split("-- Returns:", 1)[0]
    return [int(n) for n in re.findall(r"(?:^|,|--)\s+(\d+)\s", " " + argv, flags=re.M)]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_argv_record_matches_the_script_header(name: str) -> None:
    slots = _argv_slots(_header(name))
    assert slots == list(range(1, len(slots) + 1)), slots
    assert len(SAMPLES[name].argv()) == len(slots)
    assert all(isinstance(value, str) for value in SAMPLES[name].argv())


def test_every_status_a_script_answers_is_known() -> None:
    """The '!...' and outcome statuses in the scripts are the ScriptStatus members."""
    source = "\n".join(
        load_source(name)
        for name in (
            "create.lua", "apply.lua", "deliver.lua", "resume.lua", "search.lua", "stats.lua",
            "workers.lua",
        )
    )  # fmt: skip
    bang = set(re.findall(r"'(![a-z]+)'", source))
    assert bang == {s.value for s in ScriptStatus if s.value.startswith("!")}


CHANNELS = ("tag", "namespace", "changes_channel", "cancels_channel")
"""KeySchema members that name no key (the tag, pub/sub channels)."""


def _key_prefixes() -> set[str]:
    """How each kind of key of KeySchema begins after the hash tag (':t:', ':workers')."""
    schema = KeySchema("ns")
    names: list[str] = []
    for member, value in vars(KeySchema).items():
        if member.startswith("_") or member in CHANNELS:
            continue
        if isinstance(value, property):
            found = getattr(schema, member)
        else:
            parameters = list(inspect.signature(value).parameters.values())[1:]
            for text in ("x", None):  # None too where a parameter takes it (stats of all)
                args = [
                    1 if p.annotation == "int" else text if "None" in p.annotation else "x"
                    for p in parameters
                ]
                found = value(schema, *args)
                names += found if isinstance(found, list) else [found]
            continue
        names += found if isinstance(found, list) else [found]
    prefixes = set()
    for name in names:
        assert name.startswith(schema.tag)
        prefix = re.match(r":[a-z]+:?", name[len(schema.tag) :])
        assert prefix is not None, name
        prefixes.add(prefix.group())
    return prefixes


def _scripts() -> list[str]:
    folders = [
        resources.files("asyncbook.redis") / "lua",
        resources.files("asyncbook.celery") / "lua",
    ]
    return sorted(
        str(entry)
        for folder in folders
        for entry in folder.iterdir()
        if entry.name.endswith(".lua")
    )


def test_the_key_prefixes_are_found() -> None:
    assert {
        ":t:",
        ":h:",
        ":workers",
        ":wc:",
        ":sa:",
        ":s:",
        ":n:",
        ":i:",
        ":idx:",
    } <= _key_prefixes()


@pytest.mark.parametrize("path", _scripts(), ids=lambda path: path.rsplit("/", 1)[-1])
def test_no_script_builds_a_key_name(path: str) -> None:
    """Every key a script touches arrives in KEYS (Redis Cluster's rule; Dragonfly refuses
    undeclared keys): no script spells a key of KeySchema, nor reads the hash tag. The
    strict-keys guard (tests/support/strict_keys.py) checks the same while the tests run."""
    with open(path, encoding="utf-8") as source:
        text = source.read()
    for prefix in _key_prefixes():
        end = "" if prefix.endswith(":") else "['\"]"
        assert not re.search("['\"]" + re.escape(prefix) + end, text), (path, prefix)
    assert "{[^}]*}" not in text, path  # parsing the hash tag out of a key


@pytest.mark.parametrize("path", _scripts(), ids=lambda path: path.rsplit("/", 1)[-1])
def test_every_script_header_names_its_keys(path: str) -> None:
    with open(path, encoding="utf-8") as source:
        text = source.read()
    header = "\n".join(line for line in text.splitlines() if line.startswith("--"))
    if "KEYS" in text.replace(header, ""):
        assert "KEYS" in header, path
