"""Each script's ARGV record has exactly the slots its Lua header documents."""

from __future__ import annotations

import re
from importlib import resources

import pytest

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
        load_source(name) for name in ("create.lua", "apply.lua", "deliver.lua", "resume.lua")
    )
    bang = set(re.findall(r"'(![a-z]+)'", source))
    assert bang == {s.value for s in ScriptStatus if s.value.startswith("!")}
