"""Helpers the tests import (never test modules themselves): the test Redis and books on it
(``books``), event builders (``events``), throwaway servers (``servers``, ``cluster``,
``valkey``), the status server (``web_server``), Celery apps and workers (``celery``), the
command line (``cli``)."""

from __future__ import annotations

from pathlib import Path

from .process_redis import start_for_this_process

ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the example ``workers`` app and ``celeryconfig.py`` live here."""

# Under pytest-xdist, this test process's own Redis, before any helper reads a test URL.
start_for_this_process()
