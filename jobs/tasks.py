"""Celery tasks of the job engine: thin, they call the engine."""

from celery import shared_task

from core import celery_names

from . import engine


# Named "tasks.sweep_stale_jobs" (celery_names.SWEEP_STALE_JOBS) as when it lived in
# tasks/: messages already in a broker name it so; the name is kept stable across the move.
@shared_task(name=celery_names.SWEEP_STALE_JOBS)
def sweep_stale_jobs() -> dict:
    """The beat schedule runs it every minute (``CELERY_BEAT_SCHEDULE``)."""
    report = engine.sweep_stale_jobs()
    return {"requeued": report.requeued, "failed": report.failed, "closed": report.closed}
