"""Artifacts in object storage between machines: the real worker trains a model and
writes it to moto's S3 server (its own cache), evaluates it there, and this process,
another machine with an empty cache of its own, downloads, checks and uses it."""

import time

import boto3
import pytest

from jobs.models import Job

pytestmark = pytest.mark.integration


def wait_for(job, seconds=240):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job.refresh_from_db()
        if job.status in (Job.Status.SUCCEEDED, Job.Status.FAILED):
            return job
        time.sleep(0.5)
    pytest.fail(f"job {job.pk} still {job.status} after {seconds} s: {job.log[-2000:]}")


@pytest.mark.django_db(transaction=True)
def test_a_model_trained_and_evaluated_by_the_worker_is_loaded_here_from_the_store(
        celery_worker_process, worker_store, demo_tasks, settings, tmp_path):
    import ml
    from annotation import inference
    from annotation.models import Example
    from leaderboard.models import Evaluation
    from leaderboard.training import start_training
    from registry.models import ModelVersion
    from registry.services import ref_for, target_model

    task = demo_tasks["sentiment"]
    rnd = task.open_round()
    for i, (text, label) in enumerate([("Lovely!", "positive"), ("Awful.", "negative")] * 6):
        Example.objects.create(task=task, round=rnd, split="train" if i < 8 else "test", source="import",
                               external_uid=f"s3-{i}", validation_status="verified", inputs={"statement": text},
                               target={"label": label})
    job = wait_for(start_training(task, name="through-the-store", max_steps=2, epochs=1, batch_size=4))
    assert job.status == Job.Status.SUCCEEDED, job.error or job.log
    model = ModelVersion.objects.get(task=task, name="through-the-store")
    bucket = worker_store["url"].removeprefix("s3://").split("/")[0]
    assert model.artifact_path == f"{worker_store['url']}/artifacts/{model.sha256}"
    stored = boto3.client("s3", endpoint_url=worker_store["endpoint"], region_name="us-east-1").list_objects_v2(
        Bucket=bucket, Prefix=f"ci/artifacts/{model.sha256}/")
    assert f"ci/artifacts/{model.sha256}/metadata.json" in {o["Key"] for o in stored.get("Contents", [])}

    # Its evaluation ran on the worker too, reading the artifact from its own cache.
    evaluation = wait_for(Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL, params__model_version=model.pk).get())
    assert evaluation.status == Job.Status.SUCCEEDED, evaluation.error or evaluation.log
    assert Evaluation.objects.filter(model_version=model).exists()

    # This machine has none of it: it downloads into its own cache, checked, and predicts.
    settings.DYNABENCH_ARTIFACTS_CACHE = str(tmp_path / "web-cache")
    [answer] = ml.predict(ref_for(model), [{"statement": "What a lovely day."}])
    assert answer["label"] in ("positive", "negative")
    ml.verify_artifact(tmp_path / "web-cache" / model.sha256, model.sha256)
    # And the worker answers with it on the inference queue.
    [result] = inference.predict_with([target_model(model)], [{"statement": "What a lovely day."}])
    assert result["probabilities"] == pytest.approx(answer["probabilities"], abs=1e-4)
