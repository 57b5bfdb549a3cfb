"""A Celery round trip through real Redis to a real worker process, on PostgreSQL."""

import os
import time

import pytest

from dynabench.celery import health_check
from tasks.jobs import create_job, enqueue
from tasks.models import Job
from tasks.tasks import health_check_job

pytestmark = pytest.mark.integration


def test_the_suite_runs_on_postgresql(services):
    from django.db import connection

    assert connection.vendor == "postgresql"
    assert connection.settings_dict["NAME"].startswith("test_")


def test_health_check_round_trip_through_redis(celery_worker_process):
    result = health_check.apply_async().get(timeout=30)
    assert result["ok"] is True
    assert result["database"] == "postgresql"
    assert result["pid"] != os.getpid()  # ran in the worker's pool process


@pytest.mark.django_db(transaction=True)
def test_a_job_enqueued_on_commit_runs_in_the_worker(celery_worker_process):
    job = create_job(Job.Kind.HEALTH_CHECK)
    enqueue(job, health_check_job)  # autocommit: sent at once
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status in (Job.Status.SUCCEEDED, Job.Status.FAILED):
            break
        time.sleep(0.2)
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert job.result["pid"] != os.getpid()
    assert job.celery_task_id
    assert "checking the database from the worker" in job.log
