"""A Celery round trip through real Redis to a real worker process, on PostgreSQL."""

import os
import time

import pytest

from jobs.engine import create_job, enqueue
from jobs.models import Job
from tasks.tasks import health_check, health_check_job

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
def test_an_export_job_runs_in_the_worker_and_its_file_is_served_here(celery_worker_process, worker_job_files,
                                                                      demo_tasks, researcher, client, settings):
    from django.urls import reverse

    from annotation.exporting import Selection
    from annotation.exports import start_export
    from annotation.models import Example
    from jobs.engine import wait_for_job

    settings.STORAGES = {**settings.STORAGES, "job_files": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": worker_job_files}}}
    task = demo_tasks["nli"]
    rnd = task.open_round()
    Example.objects.bulk_create([
        Example(task=task, round=rnd, inputs={"hypothesis": f"h, \"{i}\"\n<b>x</b>"}, target={"label": "neutral"},
                retracted=i % 50 == 0) for i in range(150)])
    job = start_export(researcher, task, Selection(task_id=task.pk, round_number=rnd.number), "csv")
    job = wait_for_job(job, timeout=120, poll_seconds=0.2)
    assert job.status == Job.Status.SUCCEEDED, job.error or job.log
    assert job.result["rows"] == 147 and job.progress == 100 and job.celery_task_id
    client.force_login(researcher)
    response = client.get(reverse("job-file", args=[job.pk]))
    body = b"".join(response.streaming_content).decode()
    assert response.status_code == 200 and body.count('"h, ""') == 147


@pytest.mark.django_db(transaction=True)
def test_predictions_go_through_the_inference_queue(celery_worker_process, live_tasks):
    from annotation.inference import predict_with
    from tasks.targets import round_target_models

    rnd = live_tasks["nli"].open_round()
    [result] = predict_with(round_target_models(rnd), [{"premise": "Two dogs run on a beach.",
                                                        "hypothesis": "Animals are outside."}])
    assert result["label"] in ("entailment", "neutral", "contradiction")
    assert sum(result["probabilities"].values()) == pytest.approx(1, abs=1e-4)
    assert list(result["members"]) == [str(rnd.target_models.get().pk)]


@pytest.mark.django_db(transaction=True)
def test_a_training_job_runs_on_the_training_queue(celery_worker_process, demo_tasks):
    from annotation.models import Example
    from leaderboard.training import start_training
    from registry.models import ModelVersion

    task = demo_tasks["sentiment"]
    rnd = task.open_round()
    for i, (text, label) in enumerate([("Lovely!", "positive"), ("Awful.", "negative")] * 4):
        Example.objects.create(task=task, round=rnd, split="train", source="import", external_uid=f"t{i}",
                               validation_status="verified",
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


@pytest.mark.django_db(transaction=True)
def test_worker_answers_come_back_on_a_reply_list_and_failures_say_why(celery_worker_process, live_tasks, settings):
    from annotation import inference
    from core import replies
    from registry.services import TargetModel
    from tasks.targets import open_round_with_models

    assert settings.INFERENCE_REPLY_URL.startswith("redis://")  # the direct-reply path is the one in use
    task = live_tasks["sentiment"]
    _, models = open_round_with_models(task)
    [result] = inference.predict_with(models, [{"statement": "What a lovely day."}])
    assert set(result["probabilities"]) == {"positive", "negative"}
    explanation = inference.explain_with(models[0], {"statement": "What a lovely day."}, result["label"], 4)
    assert [w["text"] for w in explanation["words"]][:2] == ["What", "a"]

    # The worker fails (an artifact that is not there): the caller gets the reason, not a timeout.
    broken = TargetModel(models[0].id, "broken", "/nonexistent/artifact", models[0].sha256)
    with pytest.raises(inference.InferenceFailed, match="ArtifactError.*nonexistent"):
        inference.predict_with([broken], [{"statement": "Anything."}])

    # Nobody waits any more (the caller timed out): the late answer expires instead of lingering.
    # The model is a fresh copy the worker must load first (a second or so): the answer
    # is surely late (Redis times blocked reads out on its 100 ms clock, and a loaded
    # model can answer within that).
    import shutil

    copy = settings.DYNABENCH_MODELS_DIR / f"late-copy-{time.time_ns()}"
    shutil.copytree(models[0].path, copy)
    settings.INFERENCE_TIMEOUT = 0.001
    keys_before = set(replies.client(settings.INFERENCE_REPLY_URL).keys("dynabench:reply:*"))
    with pytest.raises(inference.InferenceUnavailable, match="No model answer within"):
        inference.predict_with([TargetModel(models[0].id, "late", str(copy), models[0].sha256)],
                               [{"statement": "Too slow for this caller."}])
    redis = replies.client(settings.INFERENCE_REPLY_URL)
    deadline = time.monotonic() + 5
    late = set()
    while time.monotonic() < deadline and not late:
        late = set(redis.keys("dynabench:reply:*")) - keys_before
        time.sleep(0.1)
    for key in late:  # the worker may have been told to skip it (revoked): then there is none
        assert 0 < redis.ttl(key) <= replies.REPLY_TTL


def test_an_answer_slower_than_the_redis_socket_default_still_comes_back(services):
    """redis-py 8 gives a client a 5 s socket timeout: a BLPOP waiting longer died with
    a TimeoutError (an HTTP 500 in service mode) unless the wait sets its own."""
    import threading

    from core import replies

    url = services.INFERENCE_REPLY_URL
    key = replies.new_key("slow-test")
    pusher = threading.Timer(6.0, replies.push, args=(url, key, {"ok": True, "result": "late but here"}))
    pusher.start()
    started = time.monotonic()
    try:
        payload = replies.wait(url, key, timeout=20)
    finally:
        pusher.cancel()
    assert payload == {"ok": True, "result": "late but here"}
    assert 5.5 < time.monotonic() - started < 15


@pytest.mark.django_db(transaction=True)
def test_an_explanation_on_its_queue_does_not_hold_up_predictions(celery_worker_process, live_tasks):
    """Through the real queues: an explanation (the ``explain`` queue) is running in the
    worker while predictions (``inference``) come back, batched on its model thread."""
    import threading

    from annotation import inference
    from tasks.targets import open_round_with_models

    [model] = open_round_with_models(live_tasks["qa"])[1]
    inputs = {"passage": "Water boils at 100 degrees at sea level. " * 20,
              "question": "At what temperature does water boil?"}
    inference.predict_with([model], [inputs])  # loaded in the worker
    done = {}

    def explain():
        done["explanation"] = inference.explain_with(model, inputs, None, 50)
        done["at"] = time.monotonic()

    explaining = threading.Thread(target=explain)
    explaining.start()
    time.sleep(0.2)  # the worker has taken the explanation
    answered = []
    for _ in range(3):
        [result] = inference.predict_with([model], [inputs])
        assert "answer" in result
        answered.append(time.monotonic())
    explaining.join(timeout=120)
    assert done["explanation"]["n_steps"] == 50
    assert max(answered) < done["at"]  # every prediction came back while it was still explaining
