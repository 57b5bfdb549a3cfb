"""Celery tasks for the leaderboard's jobs (training, evaluation and submission checks on the
``training`` queue, data releases on ``default``): thin, they take a Job id."""

from celery import shared_task

from core import celery_names
from leaderboard.jobs import run_evaluation_job, run_training_job

from . import submissions
from .releases.service import run_release_job

# acks_late: a job whose worker dies is redelivered; the services are idempotent.
JOB_OPTIONS = {"acks_late": True, "reject_on_worker_lost": True, "soft_time_limit": 6 * 3600,
               "time_limit": 6 * 3600 + 300}


@shared_task(name=celery_names.TRAIN_MODEL, **JOB_OPTIONS)
def train_model(job_id: int) -> int:
    run_training_job(job_id)
    return job_id


@shared_task(name=celery_names.EVALUATE_MODEL, **JOB_OPTIONS)
def evaluate_model(job_id: int) -> int:
    run_evaluation_job(job_id)
    return job_id


@shared_task(name=celery_names.CHECK_SUBMISSION, **JOB_OPTIONS)
def check_submission(job_id: int) -> int:
    """Unpack, load and run a submitted model in a child process with limits; register it if it passes."""
    submissions.run_submission_check_job(job_id)
    return job_id


@shared_task(name=celery_names.RELEASE_DATASET, **JOB_OPTIONS)
def release_dataset(job_id: int) -> int:
    """Write a data release's files, store them and record the release (leaderboard.releases)."""
    run_release_job(job_id)
    return job_id
