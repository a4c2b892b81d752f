"""The seam into Celery's result backend (``asyncbook/celery/_celery_seam.py``), checked on
the installed Celery: ``.ci/celery-matrix`` runs this module on every supported minor, so
a Celery that changes what the seam relies on fails here, loudly, before a user's worker.

asyncbook's backend uses no private Celery name. It relies on how the public
``store_result`` of Celery's ``RedisBackend`` uses the public key-value hooks, which
Celery does not document; each numbered point of ``_celery_seam``'s docstring has its test:

1. ``store_result`` writes a task's meta with one ``set(get_key_for_task(id), encode(meta))``
   (and, on 5.7, ``expires=failure_expires`` for a FAILURE);
2. it first reads the stored meta with ``get`` of that key, and keeps a stored SUCCESS;
3. ``RedisBackend.set`` refuses a ``str`` longer than Redis's 512 MiB with
   ``BackendStoreError``.

Also: the signatures of the public methods called, the JSON spelling of a stored SUCCESS
that ``lua/execution.lua`` falls back to, and Celery 5.7's ``compression`` attribute.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, states
from celery.app.task import Context
from celery.backends import base
from celery.backends.redis import RedisBackend
from celery.exceptions import BackendStoreError

from asyncbook.celery import AsyncBookBackend
from asyncbook.celery import _celery_seam as seam
from asyncbook.celery._celery_seam import REDIS_STRING_LIMIT, CelerySeamError

from ..support.celery import CELERY_URL as URL
from ..support.celery import CELERY_VERSION, close_result_backend, unique

pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore:Call to deprecated setex:DeprecationWarning"),
]


def make_app(namespace: str, backend: str, **conf: Any) -> Celery:
    app = Celery(unique("seam"), broker="memory://", backend=backend, set_as_current=False)
    app.conf.update(
        {
            "result_expires": 600,
            "result_backend_thread_safe": True,
            "result_backend_transport_options": {"global_keyprefix": f"{namespace}:"},
            **conf,
        }
    )
    return app


@pytest.fixture
def app(namespace: str) -> Iterator[Celery]:
    app = make_app(namespace, f"asyncbook+{URL}", result_failure_expires=60)
    yield app
    close_result_backend(app)
    app.close()


def request(task_id: str) -> Context:
    return Context(id=task_id, task="seam.t", group="g-1", parent_id="p-1", retries=0)


class Recording(RedisBackend):
    """Celery's own RedisBackend, its key-value hooks recorded instead of sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, Any, Any, dict[str, Any]]] = []
        self.stored: Any = None

    def get(self, key: Any) -> Any:
        self.calls.append(("get", key, None, {}))
        return self.stored

    def set(self, key: Any, value: Any, **kwargs: Any) -> Any:
        self.calls.append(("set", key, value, kwargs))


def recording(namespace: str) -> Recording:
    app = make_app(namespace, URL, result_failure_expires=60)
    return Recording(app=app, url=URL)


# -- 1. one set of the task's key, with the meta Celery builds ----------------------------


@pytest.mark.parametrize("state", [states.SUCCESS, states.FAILURE, states.RETRY])
def test_celery_writes_the_meta_with_one_set_of_the_tasks_key(namespace: str, state: str) -> None:
    backend = recording(namespace)
    task_id = unique("t")
    result: Any = 7 if state == states.SUCCESS else ValueError("no luck")
    backend.store_result(task_id, result, state, "tb", request(task_id))
    key = backend.get_key_for_task(task_id)
    assert isinstance(key, bytes)
    assert key.endswith(task_id.encode())  # how the capture knows the task's key
    assert [(call[0], call[1]) for call in backend.calls] == [("get", key), ("set", key)]
    _, _, value, kwargs = backend.calls[-1]
    meta = backend.decode(value)
    assert meta["status"] == state
    assert meta["task_id"] == task_id
    assert meta["traceback"] == "tb"
    assert meta["group_id"] == "g-1"
    assert meta["parent_id"] == "p-1"
    assert "children" in meta
    assert "date_done" in meta
    if state == states.SUCCESS:
        assert meta["result"] == 7
    else:
        assert meta["result"]["exc_type"] == "ValueError"
    if state == states.FAILURE and CELERY_VERSION >= (5, 7):
        assert kwargs == {"expires": 60}  # result_failure_expires
    else:
        assert kwargs.get("expires") is None  # the backend's result_expires


def test_capture_takes_celerys_write_and_sends_nothing(app: Celery, client: redis.Redis) -> None:
    backend: Any = app.backend
    task_id = unique("t")
    meta = backend.capture(task_id, 7, states.SUCCESS, None, request(task_id), read_stored=False)
    assert meta.key == backend.get_key_for_task(task_id)
    assert client.exists(meta.key) == 0  # taken, not written
    stored = backend.decode(meta.value)
    assert (stored["status"], stored["result"], stored["task_id"]) == ("SUCCESS", 7, task_id)
    assert stored["group_id"] == "g-1"
    assert meta.expires is None
    assert meta.encoded == 7
    failed = backend.capture(
        task_id, ValueError("x"), states.FAILURE, None, None, read_stored=False
    )
    assert failed.expires == (60 if CELERY_VERSION >= (5, 7) else None)
    # Outside a capture, get and set are Celery's: the write lands, and is read back.
    backend.store_result(task_id, 8, states.SUCCESS)
    assert backend.get_task_meta(task_id, cache=False)["result"] == 8


def test_capture_is_this_threads_only(app: Celery, client: redis.Redis) -> None:
    """A capture in one thread leaves another thread's write of the same key to Celery."""
    backend: Any = app.backend
    task_id = unique("t")
    key = backend.get_key_for_task(task_id)
    entered, release = threading.Event(), threading.Event()
    real_encode = backend.encode

    def encode_and_wait(data: Any) -> Any:
        entered.set()
        release.wait(5)
        return real_encode(data)

    backend.encode = encode_and_wait  # the capture holds, mid store_result
    captured: list[Any] = []
    worker = threading.Thread(
        target=lambda: captured.append(
            backend.capture(task_id, 1, states.SUCCESS, read_stored=False)
        )
    )
    worker.start()
    assert entered.wait(5)
    del backend.encode
    backend.store_result(task_id, 2, states.SUCCESS)  # this thread: written by Celery
    release.set()
    worker.join(5)
    assert backend.decode(client.get(key))["result"] == 2
    assert backend.decode(captured[0].value)["result"] == 1


# -- 2. the guard's read -------------------------------------------------------------------


def test_celery_reads_the_key_first_and_keeps_a_stored_success(namespace: str) -> None:
    backend = recording(namespace)
    task_id = unique("t")
    backend.stored = backend.encode({"status": states.SUCCESS, "result": 1})
    backend.store_result(task_id, ValueError("late"), states.FAILURE)
    assert [call[0] for call in backend.calls] == ["get"]  # kept: no set


def test_capture_reads_the_stored_meta_only_when_asked(app: Celery, client: redis.Redis) -> None:
    backend: Any = app.backend
    task_id = unique("t")
    backend.store_result(task_id, 1, states.SUCCESS)
    kept = backend.capture(task_id, 2, states.SUCCESS, read_stored=True)
    assert kept.value is None  # Celery's guard found the SUCCESS
    unread = backend.capture(task_id, 2, states.SUCCESS, read_stored=False)
    assert backend.decode(unread.value)["result"] == 2  # no read: the caller guards
    fresh = backend.capture(unique("t"), 3, states.SUCCESS, read_stored=True)
    assert backend.decode(fresh.value)["result"] == 3


def test_a_celery_that_writes_no_meta_through_set_fails_loudly(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend: Any = app.backend
    monkeypatch.setattr(base.Backend, "store_result", lambda self, task_id, result, *a, **k: result)
    with pytest.raises(CelerySeamError, match="wrote no meta"):
        backend.capture(unique("t"), 1, states.SUCCESS, read_stored=False)
    with pytest.raises(CelerySeamError, match="wrote no meta"):
        backend.capture(unique("t"), 1, states.SUCCESS, read_stored=True)


# -- 3. the size limit ---------------------------------------------------------------------


class _Longest(str):
    """A one-character str that says it is as long as a Redis string may be (no 512 MiB
    string is built)."""

    def __len__(self) -> int:
        return REDIS_STRING_LIMIT


class _Longer(str):
    """One character more than a Redis string may hold, it says."""

    def __len__(self) -> int:
        return REDIS_STRING_LIMIT + 1


def test_celerys_limit_is_redis_string_limit(app: Celery, namespace: str) -> None:
    backend: Any = app.backend
    key = f"{namespace}:sized"
    with pytest.raises(BackendStoreError, match="too large"):
        RedisBackend.set(backend, key, _Longer("x"))
    RedisBackend.set(backend, key, _Longest("x"))  # not refused: written
    assert backend.get(key) == b"x"


def test_a_captured_meta_too_large_is_refused_as_celery_refuses_it(
    app: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend: Any = app.backend
    monkeypatch.setattr(seam, "REDIS_STRING_LIMIT", 20)
    task_id = unique("t")
    with pytest.raises(BackendStoreError, match="too large") as raised:
        backend.capture(task_id, "x" * 40, states.SUCCESS, read_stored=False)
    error: Any = raised.value  # celery-types lacks its attributes
    assert (error.state, error.task_id) == (states.SUCCESS, task_id)


# -- the public methods called, and what the script reads ----------------------------------


def parameters(function: Any) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_the_public_methods_called_keep_their_signatures() -> None:
    assert parameters(RedisBackend.store_result)[:6] == [
        "self",
        "task_id",
        "result",
        "state",
        "traceback",
        "request",
    ]
    assert parameters(RedisBackend.get) == ["self", "key"]
    assert parameters(RedisBackend.set)[:3] == ["self", "key", "value"]
    assert parameters(RedisBackend.get_key_for_task)[:2] == ["self", "task_id"]
    assert parameters(RedisBackend.get_task_meta)[:3] == ["self", "task_id", "cache"]
    assert parameters(RedisBackend.encode_result) == ["self", "result", "state"]
    assert parameters(RedisBackend.ensure)[:3] == ["self", "fun", "args"]
    assert parameters(RedisBackend.on_chord_part_return)[:4] == [
        "self",
        "request",
        "state",
        "result",
    ]


def test_a_stored_success_is_spelled_as_the_script_falls_back_to(app: Celery) -> None:
    """``lua/execution.lua`` reads a JSON meta's status with cjson, and when cjson cannot
    (too deep) looks for Celery's own spelling, ``"status": "SUCCESS"``."""
    backend: Any = app.backend
    assert backend.serializer == "json"
    meta = backend.capture(unique("t"), [[1]], states.SUCCESS, read_stored=False)
    text = meta.value if isinstance(meta.value, str) else meta.value.decode()
    assert '"status": "SUCCESS"' in text
    assert json.loads(text)["status"] == "SUCCESS"


def test_compressed_metas_are_guarded_by_celery(namespace: str) -> None:
    """``result_compression`` (Celery 5.7, the backend's ``compression``): a meta the
    script cannot read, so Celery's own guard reads it."""
    app = make_app(namespace, f"asyncbook+{URL}", result_compression="zlib")
    try:
        backend: Any = app.backend
        assert isinstance(backend, AsyncBookBackend)
        if CELERY_VERSION >= (5, 7):
            assert backend.compression
            assert backend._json_meta is False
        else:
            assert getattr(backend, "compression", None) is None
            assert backend._json_meta is True
    finally:
        close_result_backend(app)
        app.close()
