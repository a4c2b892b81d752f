"""Celery configuration of the project's worker app, ``workers/`` (``celery -A workers
worker -B``), loaded by ``app.config_from_object("celeryconfig")``; ``make demo`` runs its
real worker with it. A template for your own: copy it beside your app and keep what you
need (docs/quickstart.md).

Every value may come from the environment; unset, it is a Redis on the loopback:
``REDIS_URL`` (broker, results and book; default redis://127.0.0.1:6379/0),
``ASYNCBOOK_REDIS_URL`` (the book, if not on that Redis), ``ASYNCBOOK_NAMESPACE`` (the
book's key prefix), ``ASYNCBOOK_QUEUE`` (the task queue, default ``celery``; asyncbook's
own queue is then ``<it>-asyncbook``, else ``asyncbook``), ``ASYNCBOOK_WEBHOOK_URL`` (a
webhook that receives every notification) and ``ASYNCBOOK_WEBHOOK_SECRET`` (``whsec_…`` it
is signed with; two, space separated, while rotating: the current one first). For tests
and experiments: ``ASYNCBOOK_HEARTBEAT_INTERVAL`` and ``ASYNCBOOK_HEARTBEAT_TIMEOUT``
(seconds), ``ASYNCBOOK_SHARDS`` (the namespace's shard count), ``ASYNCBOOK_VISIBILITY_TIMEOUT``
(seconds before the broker gives an unacknowledged message of a dead worker to another
one; default: Celery's, one hour), ``ASYNCBOOK_WORKER_SWEEP=0`` (leave the sweep to beat).
Every ``asyncbook_*`` setting is listed in docs/celery.md ("Settings").
"""

import os
from datetime import timedelta

redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
queue = os.environ.get("ASYNCBOOK_QUEUE")

# Celery: the broker, and asyncbook as the result backend (Celery's Redis backend, whose
# end of a tracked task writes the book and Celery's result meta in one round trip).
broker_url = redis_url
result_backend = f"asyncbook+{redis_url}"  # redis://... -> asyncbook+redis://...
result_expires = timedelta(hours=24)
broker_connection_retry_on_startup = True
task_default_queue = queue or "celery"

# A task is acknowledged after it ran: a worker killed mid-task gives it back.
task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1

# asyncbook, read by the integration asyncbook.celery.install(app) connects (when it first
# needs them, so this module may be loaded after install).
# The book: on the broker's Redis unless told otherwise; the same namespace in every
# worker, beat, publisher, API and CLI of the deployment.
asyncbook_redis_url = os.environ.get("ASYNCBOOK_REDIS_URL", redis_url)
asyncbook_namespace = os.environ.get("ASYNCBOOK_NAMESPACE", "asyncbook")
# The deadline of a tracked task without a ttl of its own.
asyncbook_default_ttl = timedelta(hours=1)
# Where each task's end is notified (callables, dotted paths or webhook URLs), and what
# the webhooks are signed with (docs/webhooks.md).
asyncbook_sinks = [url for url in [os.environ.get("ASYNCBOOK_WEBHOOK_URL")] if url]
asyncbook_webhook_secret = os.environ.get("ASYNCBOOK_WEBHOOK_SECRET", "").split() or None
# The expiry sweep and notification delivery: every worker of this app (and beat) runs
# them in a thread of its main process, every second, one process per namespace at a time
# (a short Redis lease), so no -Q, route, busy pool or prefetch can hold them up.
# asyncbook_worker_sweep = False leaves them to beat alone. install() also puts
# asyncbook.sweep and asyncbook.deliver on beat's schedule (every second; an entry of
# yours for the same task wins), routed to asyncbook_queue; a worker without -Q consumes
# it, with -Q name it too (-Q celery,asyncbook), so that `asyncbook doctor` finds a
# consumer of it.
asyncbook_queue = f"{queue}-asyncbook" if queue else "asyncbook"
if os.environ.get("ASYNCBOOK_WORKER_SWEEP") == "0":
    asyncbook_worker_sweep = False
# Unset, the defaults apply: one heartbeat per worker process every 10 s, stalled after 60 s.
if os.environ.get("ASYNCBOOK_HEARTBEAT_INTERVAL"):
    asyncbook_heartbeat_interval = float(os.environ["ASYNCBOOK_HEARTBEAT_INTERVAL"])
if os.environ.get("ASYNCBOOK_HEARTBEAT_TIMEOUT"):
    asyncbook_heartbeat_timeout = float(os.environ["ASYNCBOOK_HEARTBEAT_TIMEOUT"])
# Unset, one shard; more spread the namespace over a Redis Cluster's masters (fixed at the
# namespace's first use, the same in every process).
if os.environ.get("ASYNCBOOK_SHARDS"):
    asyncbook_shards = int(os.environ["ASYNCBOOK_SHARDS"])
# What the console records of each task: its info, its args (bounded reprs) with the
# keyword arguments named here shown as '***'.
asyncbook_record_info = True
asyncbook_record_args = True
asyncbook_redact = ["password", "passwd", "secret", "token", "api_key", "apikey", "authorization"]
# Results by reference (docs/artifacts.md): a success of ASYNCBOOK_ARTIFACT_THRESHOLD bytes
# or more goes to the store at ASYNCBOOK_ARTIFACTS (file:///dir, or s3://bucket/prefix with
# boto3's AWS_* environment); unset, every result stays in Redis.
if os.environ.get("ASYNCBOOK_ARTIFACTS"):
    asyncbook_artifacts = os.environ["ASYNCBOOK_ARTIFACTS"]
    asyncbook_artifact_threshold = int(os.environ.get("ASYNCBOOK_ARTIFACT_THRESHOLD", "65536"))
if os.environ.get("ASYNCBOOK_VISIBILITY_TIMEOUT"):
    # A short visibility timeout gives a dead worker's unacknowledged message to the next
    # worker that starts. The unacked keys are this queue's own, so that a short timeout
    # never hands out a message another worker of the same Redis is still running.
    _own = queue or "celery"
    broker_transport_options = {
        "visibility_timeout": float(os.environ["ASYNCBOOK_VISIBILITY_TIMEOUT"]),
        "unacked_key": f"{_own}-unacked",
        "unacked_index_key": f"{_own}-unacked_index",
        "unacked_mutex_key": f"{_own}-unacked_mutex",
    }
