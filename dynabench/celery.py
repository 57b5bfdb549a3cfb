"""The Celery app.

Queues: ``inference`` (predictions and explanations, latency-bound) and
``training`` (training and evaluation jobs, long). ``default`` carries small
housekeeping tasks such as the health check. With no broker configured
(embedded mode) tasks run in-process.

Models load in ``worker_process_init``, in each pool child after the fork:
a process that ran a torch forward pass and then forks gets children that
hang (see DESIGN.md), so the parent never touches torch.
"""

import logging
import os
import socket

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")

app = Celery("dynabench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

log = logging.getLogger(__name__)


@worker_process_init.connect
def load_models_in_child(**_kwargs):
    """Warm the model cache with the open rounds' target models."""
    from tasks.services import warm_up_target_models

    try:
        loaded = warm_up_target_models()
    except Exception:  # a broken artifact must not stop the worker from serving others
        log.exception("warming up target models failed")
    else:
        log.info("worker process %s loaded %d target model(s)", os.getpid(), loaded)


@app.task(name="dynabench.health_check")
def health_check() -> dict:
    """Round trip through broker, worker, database and result backend."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        db_ok = cursor.fetchone()[0] == 1
    return {"ok": db_ok, "hostname": socket.gethostname(), "pid": os.getpid(),
            "database": connection.vendor}
