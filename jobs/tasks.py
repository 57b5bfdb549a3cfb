"""Celery tasks of the job engine: thin, they call the engine."""

from celery import shared_task


# Named "tasks.sweep_stale_jobs" as when it lived in tasks/: the beat schedule and the
# routes (CELERY_BEAT_SCHEDULE, CELERY_TASK_ROUTES) and messages already in a broker
# name it so; the registered name is kept stable across the move.
@shared_task(name="tasks.sweep_stale_jobs")
def sweep_stale_jobs() -> dict:
    """The beat schedule runs it every minute (``CELERY_BEAT_SCHEDULE``)."""
    from .engine import sweep_stale_jobs as sweep

    report = sweep()
    return {"requeued": report.requeued, "failed": report.failed, "closed": report.closed}
