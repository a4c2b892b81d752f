"""Deprecated: import ``install``, ``uninstall`` and ``installed`` from ``asyncbook.celery``."""

import warnings

from .celery import install as install
from .celery import installed as installed
from .celery import uninstall as uninstall

warnings.warn(
    "asyncbook.signals is deprecated and will be removed in 0.2.0; "
    "use `from asyncbook.celery import install, uninstall`",
    DeprecationWarning,
    stacklevel=2,
)
