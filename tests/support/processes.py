"""A worker subprocess's processes, found in ``/proc``, signalled and killed by PID."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from .celery import CeleryWorker, wait_for

__all__ = ["alive", "children", "kill_worker", "signal_worker"]


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a worker's pool), from ``/proc``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def signal_worker(worker: CeleryWorker, signum: int) -> list[int]:
    """Send ``signum`` to the worker's main process, then to each of its pool processes
    (listed first, so the main process cannot replace one in between). Returns the PIDs."""
    process = worker.process
    assert process is not None
    pool = children(process.pid)
    for pid in [process.pid, *pool]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
    return [process.pid, *pool]


def kill_worker(worker: CeleryWorker) -> None:
    """SIGKILL the whole worker (a stopped one too) and reap its main process."""
    process = worker.process
    if process is None or process.poll() is not None:
        return
    pids = signal_worker(worker, signal.SIGKILL)
    process.wait(timeout=10)
    wait_for(lambda: not any(alive(pid) for pid in pids), 10)
