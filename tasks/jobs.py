"""Long jobs: a Job row that pages show, and enqueueing after commit."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from contextlib import contextmanager

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from .models import Job

log = logging.getLogger(__name__)


def create_job(kind: str, *, params: dict | None = None, task=None, user=None) -> Job:
    return Job.objects.create(kind=kind, params=params or {}, task=task, created_by=user)


def enqueue(job: Job, celery_task, queue: str | None = None) -> None:
    """Send ``celery_task(job.id)`` once the current transaction commits.

    In embedded mode the task runs in-process at that point.
    """

    def send():
        options = {"queue": queue} if queue else {}
        result = celery_task.apply_async(args=[job.pk], **options)
        Job.objects.filter(pk=job.pk, celery_task_id="").update(celery_task_id=result.id or "")

    transaction.on_commit(send)


class JobReporter:
    """Writes progress and log lines to a Job row as the work goes on."""

    def __init__(self, job_id: int):
        self.job_id = job_id
        self._last_percent = -1

    def progress(self, percent: float, message: str = "") -> None:
        pct = max(0, min(100, int(percent)))
        updates = {}
        if pct != self._last_percent:
            updates["progress"] = pct
            self._last_percent = pct
        if message:
            stamp = timezone.now().strftime("%H:%M:%S")
            updates["log"] = Concat(F("log"), Value(f"[{stamp}] {message}\n"))
        if updates:
            Job.objects.filter(pk=self.job_id).update(**updates)

    __call__ = progress


@contextmanager
def running(job_id: int):
    """Mark a job running; on exit mark it succeeded or failed (with the error).

    Yields a JobReporter. Re-raises nothing: a failed job is recorded, not lost.
    The caller sets ``result`` through the yielded reporter's ``result`` dict.
    """
    Job.objects.filter(pk=job_id).update(
        status=Job.Status.RUNNING, started_at=timezone.now(), error="", progress=0
    )
    reporter = JobReporter(job_id)
    reporter.result = {}
    try:
        yield reporter
    except Exception as exc:
        log.exception("job %s failed", job_id)
        Job.objects.filter(pk=job_id).update(
            status=Job.Status.FAILED, finished_at=timezone.now(),
            error=f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc(limit=8)}",
        )
    else:
        Job.objects.filter(pk=job_id).update(
            status=Job.Status.SUCCEEDED, finished_at=timezone.now(), progress=100, result=reporter.result
        )


def run_job(job_id: int, work: Callable[[Job, JobReporter], dict]) -> Job:
    """Run ``work(job, reporter)`` under ``running``; idempotent for finished jobs."""
    job = Job.objects.get(pk=job_id)
    if job.status == Job.Status.SUCCEEDED:
        return job
    with running(job_id) as reporter:
        reporter.result = work(job, reporter) or {}
    return Job.objects.get(pk=job_id)
