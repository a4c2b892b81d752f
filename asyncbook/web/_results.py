"""A task's result through the server: ``GET /api/tasks/{id}/result`` (the read role)
answers the bytes of a result stored by reference, fetched from the server's artifact
store without blocking the loop and checked against the task's ``resultHash``; and the
presigned URL a delivery hands over beside its receipt (``download``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._models import AsyncState, DeliveryReceipt
from ..artifacts import ArtifactStore, aread, download_for
from ..errors import ArtifactError, UnknownTaskError
from ._paths import raw_path, split_task_path
from ._reader import Reader
from ._responses import error_response

__all__ = ["READS_AT_ONCE", "ResultApi", "ResultReading", "with_download"]

READS_AT_ONCE = 4
"""Results read at once by one server (each is held whole while its hash is checked):
many clients asking for a large result wait their turn instead of filling memory."""

ResultReading = Callable[[str, str], "bytes | None"]
"""``(ref, digest) -> checked bytes``, or None for a ref it does not read."""

_STATUS_OF_CODE = {"not-found": 404, "unavailable": 503, "damaged": 502, "invalid-request": 404}
"""An ``ArtifactError``'s answer: a stored result that does not match its hash is the
store's fault (502), never the server's (500)."""


def _media(data: bytes) -> str:
    """JSON when the bytes are JSON, text when UTF-8, else bytes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream"
    try:
        json.loads(text)
    except ValueError:
        return "text/plain; charset=utf-8"
    return "application/json"


class ResultApi:
    """Results by reference over HTTP, from ``store`` (None: the server has none, and
    answers 404 ``no-store``)."""

    def __init__(
        self,
        reader: Reader,
        store: ArtifactStore | None,
        url_expiry_s: int,
        elsewhere: ResultReading | None = None,
    ) -> None:
        self.reader = reader
        self.store = store
        self.url_expiry_s = url_expiry_s
        self.elsewhere = elsewhere
        """Reads a result kept outside the store (a Celery meta in Redis: ``asyncbook
        serve`` hands one over); None when it is not one it knows."""
        self._reading = asyncio.Semaphore(READS_AT_ONCE)
        """A result is held whole while it is checked: so many at once, at most."""

    async def result(self, request: Request) -> Response:
        task_id = split_task_path(raw_path(request.scope), request.query_params.get("id"))[0]
        task = await self.reader.get(task_id)
        if task is None:
            raise UnknownTaskError(task_id)
        ref, digest = task.result_ref, task.result_hash
        if task.state is not AsyncState.SUCCEEDED or ref is None or digest is None:
            message = f"task {task_id!r} has no result ({task.state.value})"
            return error_response(409, "no-result", message)
        try:
            async with self._reading:
                data = await self._read(ref, digest)
        except ArtifactError as error:
            status = _STATUS_OF_CODE.get(error.code, 502)
            return error_response(status, error.code, error.message, "resultRef")
        if data is None:
            message = "this server has no artifact store (asyncbook serve --artifacts)"
            return error_response(404, "no-store", message, "resultRef")
        media = _media(data)
        name = quote(task_id, safe="") + (".json" if media == "application/json" else "")
        headers = {
            "Content-Disposition": f"attachment; filename*=UTF-8''{name}",
            "X-Result-Hash": digest,
            "Cache-Control": "no-store",
        }
        return Response(data, media_type=media, headers=headers)

    async def _read(self, ref: str, digest: str) -> bytes | None:
        """The checked bytes at ``ref``: from the store, or elsewhere; None when neither
        holds it."""
        if self.elsewhere is not None:
            found = await asyncio.to_thread(self.elsewhere, ref, digest)
            if found is not None:
                return found
        if self.store is None:
            return None
        return await aread(self.store, ref, digest)

    async def download(self, receipt: DeliveryReceipt) -> dict[str, Any] | None:
        """The presigned URL of a receipt's result and when it expires (None when the
        result is not in an S3 store of this server's); signed off the loop."""
        if self.store is None:
            return None
        found = await asyncio.to_thread(
            download_for, self.store, receipt.result_ref, self.url_expiry_s
        )
        return None if found is None else found.wire()


def with_download(body: dict[str, Any], download: dict[str, Any] | None) -> JSONResponse:
    """A delivery's answer: the receipt as the book gave it, and beside it (never in it:
    the receipt is the reference's) the presigned URL when there is one."""
    if download is not None:
        body = {**body, "download": download}
    return JSONResponse(body)
