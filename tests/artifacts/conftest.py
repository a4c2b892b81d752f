"""The artifact stores' fixtures: ``s3`` (a moto server for the module) and ``store``,
parametrized over both kinds (a directory, a bucket on that server)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from asyncbook.artifacts import ArtifactStore, LocalStore, S3Store

from ..support.s3 import S3Server, s3_server


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture(params=["file", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    if request.param == "file":
        return LocalStore(tmp_path / "artifacts")
    server: S3Server = request.getfixturevalue("s3")
    return S3Store(f"s3://{server.bucket()}/results", server.options)
