"""Celery tasks of the tasks app: thin, they take ids and call services."""

import os
import socket

from celery import shared_task

from jobs.engine import run_job


@shared_task(name="dynabench.health_check")
def health_check() -> dict:
    """Round trip through broker, worker, database and result backend."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        db_ok = cursor.fetchone()[0] == 1
    return {"ok": db_ok, "hostname": socket.gethostname(), "pid": os.getpid(), "database": connection.vendor}


@shared_task(name="tasks.health_check_job", acks_late=True)
def health_check_job(job_id: int) -> int:
    """Run the health check as a Job, so its result shows where jobs show."""

    def work(job, reporter):
        reporter.progress(50, "checking the database from the worker")
        return health_check()

    run_job(job_id, work)
    return job_id

