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


@pytest.mark.django_db(transaction=True)
def test_predictions_go_through_the_inference_queue(celery_worker_process, live_tasks):
    from annotation.inference import predict_for_round

    rnd = live_tasks["nli"].open_round()
    [result] = predict_for_round(rnd, [{"premise": "Two dogs run on a beach.", "hypothesis": "Animals are outside."}])
    assert result["label"] in ("entailment", "neutral", "contradiction")
    assert sum(result["probabilities"].values()) == pytest.approx(1, abs=1e-4)
    assert list(result["members"]) == [str(rnd.target_models.get().pk)]


@pytest.mark.django_db(transaction=True)
def test_a_training_job_runs_on_the_training_queue(celery_worker_process, demo_tasks):
    from annotation.models import Example
    from leaderboard.models import ModelVersion
    from leaderboard.services import start_training

    task = demo_tasks["sentiment"]
    rnd = task.open_round()
    for i, (text, label) in enumerate([("Lovely!", "positive"), ("Awful.", "negative")] * 4):
        Example.objects.create(task=task, round=rnd, split="train", source="import", external_uid=f"t{i}",
                               inputs={"statement": text}, target={"label": label})
    job = start_training(task, name="through-the-worker", max_steps=2, epochs=1, batch_size=4)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status in (Job.Status.SUCCEEDED, Job.Status.FAILED):
            break
        time.sleep(0.5)
    assert job.status == Job.Status.SUCCEEDED, job.error or job.log
    model = ModelVersion.objects.get(task=task, name="through-the-worker")
    assert job.result["model_version"] == model.pk
    assert model.artifact_dir.is_dir()
    assert "saved artifact" in job.log or "training on 8 train" in job.log
