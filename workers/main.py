"""The Celery app: configured from ``celeryconfig``, with asyncbook installed."""

from celery import Celery

from asyncbook.celery import install

app = Celery("workers")
app.config_from_object("celeryconfig")
integration = install(app)
