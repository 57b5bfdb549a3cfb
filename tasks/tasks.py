"""Celery tasks of the tasks app: thin, they take ids and call services."""

import os
import socket

from celery import shared_task

from core import celery_names
from jobs.engine import run_job

from .health import database_health


@shared_task(name=celery_names.HEALTH_CHECK)
def health_check() -> dict:
    """Round trip through broker, worker, database and result backend."""
    return {**database_health(), "hostname": socket.gethostname(), "pid": os.getpid()}


@shared_task(name=celery_names.HEALTH_CHECK_JOB, acks_late=True)
def health_check_job(job_id: int) -> int:
    """Run the health check as a Job, so its result shows where jobs show."""

    def work(job, reporter):
        reporter.progress(50, "checking the database from the worker")
        return health_check()

    run_job(job_id, work)
    return job_id

