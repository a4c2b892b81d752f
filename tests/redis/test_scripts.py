"""Each script's ARGV record has exactly the slots its Lua header documents."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from importlib import resources

import pytest

from asyncbook.celery._execution_args import ExecutionArgs
from asyncbook.redis._keys import KeySchema
from asyncbook.redis._script_args import (
    AT_DEADLINE,
    ApplyArgs,
    AuditArgs,
    CancelArgs,
    CreateArgs,
    DeliverArgs,
    GetManyArgs,
    IndexArgs,
    InfoArgs,
    InfoBlockArgs,
    RecordAuditArgs,
    ResumeArgs,
    ScriptArgs,
    SealGroupArgs,
    SearchArgs,
    StatsArgs,
    TaskIdsArgs,
    WorkersArgs,
)
from asyncbook.redis._scripts import SCRIPT_ARGS, ScriptStatus, load_source

SAMPLES: list[ScriptArgs] = [
    CreateArgs("t", '"t"', "10", 1, False, "ch"),
    ApplyArgs("t", True, True, AT_DEADLINE, "", "ch", False),
    CancelArgs(
        ApplyArgs("t", True, True, AT_DEADLINE, "", "ch", False),
        AuditArgs("token:operator", "cancel", True, "why", 10_000, 100),
    ),
    RecordAuditArgs("t", AuditArgs("cli:ann", "retry", False, "", 10_000, 100), "retried"),
    ResumeArgs(0, 8, True),
    DeliverArgs('"k"', "1", ""),
    GetManyArgs(True),
    SealGroupArgs('"g"', 3, 10, ""),
    InfoArgs(100),
    SearchArgs("[]", "desc", 50, "", "", "", "", None, 5, 10_000, "card"),
    StatsArgs(60_000, None, 7),
    WorkersArgs(0, 500, 10_000, "[]", "[]"),
    InfoBlockArgs(""),
    IndexArgs("1-0", "1-0"),
    ExecutionArgs("{}", 0, "json", "|expired|"),
]


def _lua(package: str, name: str) -> str:
    return (resources.files(package) / "lua" / name).read_text(encoding="utf-8")


def _records() -> dict[str, tuple[str, type[ScriptArgs]]]:
    """Each script's file and its ARGV record."""
    records: dict[str, tuple[str, type[ScriptArgs]]] = {
        f"{name}.lua": ("asyncbook.redis", record) for name, record in SCRIPT_ARGS.items()
    }
    records["execution.lua"] = ("asyncbook.celery", ExecutionArgs)
    return records


def _slots(record: type[ScriptArgs]) -> list[str]:
    """The record's ARGV slots by name, a field that is a record standing for its own."""
    names: list[str] = []
    for field in dataclasses.fields(record):
        inner = typing.get_type_hints(record)[field.name]
        if (
            isinstance(inner, type)
            and typing.get_origin(inner) is None
            and issubclass(inner, ScriptArgs)
        ):
            names += _slots(inner)
        else:
            names.append(field.name)
    return names


BINDING = re.compile(r"^local (\w+) = (?:tonumber\()?ARGV(?:\[(\d+)\])?(?:\)| |$)")


def _bound(text: str) -> list[str]:
    """The names a script's header binds to its ARGV (``local <name> = ARGV[<n>]``, in
    order from 1; ``local <name> = ARGV`` for all of it), or the fields ``apply_args``
    reads (apply.lua's)."""
    names: list[str] = []
    first = 1
    if "apply_args(ARGV, 1," in text:  # apply.lua's slots, then the script's own (cancel.lua)
        names = _apply_args()
        first = 1 + len(names)
    for line in text.splitlines():
        found = BINDING.match(line)
        if found is None:
            continue
        slot = found.group(2)
        assert slot == str(len(names) + 1) or (slot is None and len(names) < first), line
        names.append(found.group(1))
    return names


def _helpers() -> str:
    return "\n".join(_lua("asyncbook.redis", f) for f in ("_task.lua", "_info.lua", "_apply.lua"))


def _lua_list(name: str) -> list[str]:
    """The strings of a list a helper defines (``local NAME = {'a', 'b', ...}``)."""
    found = re.search(r"^local " + name + r" = \{([^}]*)\}", _helpers(), flags=re.M)
    assert found is not None, name
    return re.findall(r"'(\w+)'", found.group(1))


def _apply_args() -> list[str]:
    """The fields apply_args (_apply.lua) reads, in order (``name = ARGV[at + i]``)."""
    body = (
        _helpers().split("local function apply_args(ARGV, at, marker)", 1)[1].split("\nend", 1)[0]
    )
    slots = re.findall(r"(\w+) = ARGV\[at(?: \+ (\d+))?\]", body)
    assert [int(offset or 0) for _, offset in slots] == list(range(len(slots)))
    argc = re.search(r"^local APPLY_ARGC = (\d+)", _helpers(), flags=re.M)
    assert argc is not None
    assert int(argc.group(1)) == len(slots)
    return [name for name, _ in slots]


def test_every_script_has_a_record() -> None:
    scripts = {path.rsplit("/", 1)[-1] for path in _scripts()}
    assert {name for name in scripts if not name.startswith("_")} == set(_records())
    assert len(_records()) == 24


@pytest.mark.parametrize("name", sorted(_records()))
def test_argv_record_matches_the_script_header(name: str) -> None:
    """Same field names, same order, same count; the body reads ARGV only by name."""
    package, record = _records()[name]
    text = _lua(package, name)
    assert _bound(text) == _slots(record), name
    bindings = [line for line in text.splitlines() if BINDING.match(line)]
    body = text.split(bindings[-1], 1)[1] if bindings else text
    assert not re.search(r"ARGV\[", body), name


HEADER = re.compile(r"^-- ARGV: (\w+) \(([\w/]+)\.py\)", flags=re.M)


@pytest.mark.parametrize("name", sorted(_records()))
def test_the_header_names_the_module_that_defines_its_record(name: str) -> None:
    """``-- ARGV: <Record> (<module>.py)``: the record the script is called with, and the
    module (from ``asyncbook/``) that defines it, so a reader of the script finds it."""
    package, record = _records()[name]
    found = HEADER.search(_lua(package, name))
    assert found is not None, name
    assert found.group(1) == record.__name__, name
    assert "asyncbook." + found.group(2).replace("/", ".") == record.__module__, name


def test_the_info_block_record_matches_its_helper() -> None:
    assert _lua_list("INFO_ARGV") == _slots(InfoBlockArgs)
    assert _apply_args() == _slots(ApplyArgs)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda sample: type(sample).__name__)
def test_a_record_gives_one_text_per_slot(sample: ScriptArgs) -> None:
    argv = sample.argv()
    assert len(argv) == len(_slots(type(sample)))
    assert all(isinstance(value, str) for value in argv)


def test_a_variable_tail_gives_its_items() -> None:
    assert TaskIdsArgs(("a", "b")).argv() == ["a", "b"]
    assert TaskIdsArgs(()).argv() == []
    assert SearchArgs("[]", "oldest", 5, "", "", "", "", 15, None, 9, "count").argv()[7:9] == [
        "15",
        "",
    ]


def test_every_status_a_script_answers_is_known() -> None:
    """The '!...' and outcome statuses in the scripts are the ScriptStatus members."""
    source = "\n".join(
        load_source(name)
        for name in (
            "create.lua", "apply.lua", "deliver.lua", "resume.lua", "search.lua", "stats.lua",
            "workers.lua", "index.lua",
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
        if (
            member.startswith("_")
            or member in CHANNELS
            or (not callable(value) and not isinstance(value, property))
        ):
            continue  # the dataclass's fields (which shard) are no keys
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
