"""A submitted model, checked and evaluated by a real Celery worker on PostgreSQL: the
submitter watches its check job go from queued to done (the model unpacked, loaded and
run in a child process of the worker), then its evaluation, then finds it ranked with
intervals. The worker checks it inside bubblewrap."""

import time

import pytest

from jobs.models import Job
from registry.models import ModelVersion
from tasks.models import Round
from tests.leaderboard.test_board import LEANING  # a name and gender words: fairness is measured
from tests.leaderboard.test_models_and_jobs import add_examples
from tests.leaderboard.test_submissions_api import model_zip, upload
from tests.sandboxing import requires_bwrap

pytestmark = [pytest.mark.integration, requires_bwrap]


def wait_for(api, job_id: int, seen: list) -> dict:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        job = api.get(f"/api/jobs/{job_id}/").json()
        seen.append(job["status"])
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.3)
    return job


@pytest.mark.django_db(transaction=True)
def test_a_submitted_model_is_evaluated_by_the_worker_and_ranked(celery_worker_process, live_tasks, tiny_artifact,
                                                                  annotator, client_for, client):
    from django.core.cache import cache

    # The daily submission limit counts in the shared cache, by user and task id: a fresh
    # test database reuses the ids, so runs on one machine would add up (the fourth run
    # in a day was refused with 429).
    cache.clear()
    task = live_tasks["sentiment"]
    static = Round.objects.create(task=task, number=0, status=Round.Status.CLOSED)
    add_examples(task, static, LEANING, "test")
    api = client_for(annotator)
    response = upload(api, model_zip(tiny_artifact("sentiment").path), name="worker-evaluated")
    assert response.status_code == 202, response.content
    assert response.json()["kind"] == "check_submission"
    seen = []
    check = wait_for(api, response.json()["id"], seen)
    assert check["status"] == "succeeded", check.get("error")
    assert seen[0] in ("queued", "running")  # the submitter saw it waiting or running first
    assert "ran the model on a short input" in check["log"]
    assert Job.objects.get(pk=check["id"]).celery_task_id
    job = wait_for(api, check["result"]["evaluation_job"], [])
    assert job["status"] == "succeeded", job.get("error")

    model = ModelVersion.objects.get(name="worker-evaluated")
    board = client.get(f"/api/tasks/{task.slug}/leaderboard/").json()
    row = next(r for r in board["rows"] if r["model"]["id"] == model.pk)
    assert row["rank"] == 1 and row["model"]["owner"] == annotator.get_username()
    performance = row["metrics"]["performance"]
    assert performance["ci_low"] <= performance["value"] <= performance["ci_high"]
    assert row["datasets"]["static"]["num_examples"] == len(LEANING)
    for name in ("throughput", "memory", "robustness", "fairness", "calibration"):
        assert row["metrics"][name]["value"] is not None, name
    page = client.get(f"/models/{model.pk}/")
    assert page.status_code == 200 and b"worker-evaluated" in page.content
