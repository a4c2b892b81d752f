"""The Celery integration: tracked tasks, their signals, progress reports and beat tasks.

```python
from asyncbook.celery import install, report_progress

install(app)  # once; settings are read when first needed

@app.task(bind=True, tracked=True, ttl=timedelta(minutes=30), max_retries=2)
def generate(self, prompt): ...; report_progress(self, 40, cursor="chunk-4"); ...

tracked(thirdparty.tasks.resize, ttl=600)  # a task defined elsewhere
book = book_of(app)  # the book install(app) writes to
```
"""

from ._amqp_broker import AmqpBroker
from ._backend import AsyncBookBackend, AsyncBookSentinelBackend, TaskEndedInBook, TaskExpired
from ._concurrency import OverLimit
from ._controls import apply_group, cancel, last_cursor
from ._integration import CREATED_HEADER, DEADLINE_HEADER, Integration
from ._lifecycle import TaskCancelled
from ._one_run import DuplicateRun
from ._progress import report_output, report_progress
from ._redis_broker import RedisBroker
from ._registry import async_book_of, book_of, install, installed, uninstall
from ._resender import Resender, Retrier
from ._result_ref import default_result_ref
from ._settings import Settings
from ._startup import SettingsError
from ._tracked import TrackTasks, tracked
from ._tracking import celery_home

__all__ = [
    "install",
    "uninstall",
    "installed",
    "book_of",
    "async_book_of",
    "tracked",
    "TrackTasks",
    "report_progress",
    "report_output",
    "cancel",
    "last_cursor",
    "apply_group",
    "TaskCancelled",
    "DuplicateRun",
    "OverLimit",
    "AsyncBookBackend",
    "AsyncBookSentinelBackend",
    "TaskExpired",
    "TaskEndedInBook",
    "Integration",
    "Settings",
    "SettingsError",
    "default_result_ref",
    "CREATED_HEADER",
    "DEADLINE_HEADER",
    "AmqpBroker",
    "RedisBroker",
    "celery_home",
    "Resender",
    "Retrier",
]
