"""Deprecated: import ``report_progress`` from ``asyncbook.celery``."""

import warnings

from .celery import report_progress as report_progress

warnings.warn(
    "asyncbook.progress is deprecated and will be removed in 0.2.0; "
    "use `from asyncbook.celery import report_progress`",
    DeprecationWarning,
    stacklevel=2,
)
