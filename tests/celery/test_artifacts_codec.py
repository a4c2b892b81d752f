"""What the result backend stores by reference and reads back (``_artifacts``), in
process on a local store: bytes as they are, JSON canonical (its hash the one a result
kept in Redis records), anything else through the result serializer; the thresholds."""

from __future__ import annotations

import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from asyncbook import ArtifactError
from asyncbook.celery._artifacts import Artifacts, ArtifactSettings, artifact_of, discard_refused
from asyncbook.celery._tracking import result_hash


@pytest.fixture
def artifacts(tmp_path: Path) -> Artifacts:
    return Artifacts(ArtifactSettings(url=(tmp_path / "store").as_uri(), threshold=8), "ns")


def stored(artifacts: Artifacts, result: Any, task: Any = None) -> dict[str, Any]:
    marker = artifacts.offloaded("t/1", result, task, "json")
    fields = artifact_of(marker)
    assert fields is not None, marker
    return dict(fields)


@pytest.mark.parametrize(
    "result",
    [
        b"\x00\x01\x02 binary audio",
        {"text": "é" * 20, "segments": [1, 2.5, None]},
        "a transcript long enough",
        [0.25] * 16,
    ],
)
def test_a_result_comes_back_as_it_went(artifacts: Artifacts, result: Any) -> None:
    fields = stored(artifacts, result)
    assert artifacts.restore(fields, {"application/json"}) == result
    if not isinstance(result, bytes):
        assert fields["hash"] == result_hash(result)  # as a result kept in Redis records


def test_what_json_cannot_hold_goes_through_the_serializer(artifacts: Artifacts) -> None:
    when = datetime.datetime(2026, 12, 7, 20, 0, tzinfo=datetime.UTC)
    fields = stored(artifacts, {"at": when})
    assert fields["codec"] == "kombu"
    assert artifacts.restore(fields, {"application/json"}) == {"at": when}


def test_thresholds_of_the_app_and_of_a_task(artifacts: Artifacts) -> None:
    assert artifacts.offloaded("t", "x", None, "json") == "x"  # 3 bytes < 8: in Redis
    always = SimpleNamespace(artifact_threshold=0)
    assert artifact_of(artifacts.offloaded("t", "x", always, "json")) is not None
    never = SimpleNamespace(artifact_threshold=10**9)
    assert artifacts.offloaded("t", "x" * 100, never, "json") == "x" * 100
    marker = artifacts.offloaded("t", "y" * 100, None, "json")
    assert artifacts.offloaded("t", marker, None, "json") is marker  # stored once


def test_a_refused_success_deletes_its_artifact(artifacts: Artifacts) -> None:
    marker = artifacts.offloaded("t", "z" * 100, None, "json")
    fields = artifact_of(marker)
    assert fields is not None
    assert len(list(artifacts.store.list(""))) == 1
    discard_refused(artifacts, marker)
    discard_refused(artifacts, "not a marker")  # nothing to delete
    assert list(artifacts.store.list("")) == []
    with pytest.raises(ArtifactError) as caught:
        artifacts.restore(fields, None)
    assert caught.value.code == "not-found"
