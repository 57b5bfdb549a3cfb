"""The Celery app. Wiring only: what a worker does when it starts and stops is
``annotation.startup`` (``connect_worker_signals``).

Queues: ``inference`` (predictions, latency-bound, batched in the worker),
``explain`` (explanations: their own lane, so a slow one never delays a
prediction) and ``training`` (training and evaluation jobs, long). ``default`` carries small
housekeeping tasks such as the health check. With no broker configured
(embedded mode) tasks run in-process.
"""

import os

from celery import Celery

from annotation.startup import connect_worker_signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")

app = Celery("dynabench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Here, where the app is made: before Celery's Django fix-up connects its own receivers.
connect_worker_signals()
