"""A runnable Celery app with example tracked tasks: ``celery -A workers worker -B``."""

from .main import app
from .tasks import flaky_fetch, generate, outlive, reject_input

__all__ = ["app", "flaky_fetch", "generate", "outlive", "reject_input"]
