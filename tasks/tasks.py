"""Celery tasks of the tasks app: thin, they take ids and call services."""

from celery import shared_task

from dynabench.celery import health_check

from .jobs import run_job


@shared_task(name="tasks.health_check_job", acks_late=True)
def health_check_job(job_id: int) -> int:
    """Run the health check as a Job, so its result shows where jobs show."""

    def work(job, reporter):
        reporter.progress(50, "checking the database from the worker")
        return health_check()

    run_job(job_id, work)
    return job_id
