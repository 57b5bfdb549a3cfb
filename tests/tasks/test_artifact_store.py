"""Artifacts in object storage (registry.artifacts), against moto's S3 server mode: a real
S3 endpoint over HTTP in a process of its own (the ``s3_endpoint`` fixture)."""

import json
import socket

import boto3
import pytest
from django.core.exceptions import ImproperlyConfigured

import ml
from registry import artifacts
from registry.artifacts import StoreUnavailable, parse_store_url


def bucket_client(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def keys(endpoint, bucket) -> set[str]:
    found = bucket_client(endpoint).list_objects_v2(Bucket=bucket).get("Contents", [])
    return {item["Key"] for item in found}


def with_training_rows(task):
    from annotation.models import Example

    rnd = task.open_round()
    for i, (text, label) in enumerate([("Lovely!", "positive"), ("Awful.", "negative")] * 4):
        Example.objects.create(task=task, round=rnd, split="train", source="import", external_uid=f"t{i}",
                               validation_status="verified", inputs={"statement": text}, target={"label": label})
    return task


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the probe is closed


@pytest.fixture
def registered(s3_store, demo_tasks, tiny_artifacts):
    """The sentiment tiny model registered with the S3 store (machine A's cache)."""
    from registry.services import register_model

    return register_model(demo_tasks["sentiment"], tiny_artifacts["sentiment"], name="in-the-store")


@pytest.fixture
def machine_b(settings, tmp_path):
    """Another machine: the same store, an empty cache of its own."""
    settings.DYNABENCH_ARTIFACTS_CACHE = str(tmp_path / "cache-b")
    ml.default_cache().clear()
    return tmp_path / "cache-b"


def test_store_urls_are_file_folders_or_s3_buckets_and_anything_else_says_why():
    assert parse_store_url("s3://bucket/some/prefix/") == artifacts.StoreURL("s3", bucket="bucket",
                                                                              prefix="some/prefix")
    assert parse_store_url("s3://bucket").url("artifacts", "ab") == "s3://bucket/artifacts/ab"
    assert parse_store_url("file:///srv/models").path.as_posix() == "/srv/models"
    for bad, says in [("s3://", "s3://bucket"), ("file://relative/x", "absolute folder"),
                      ("gs://bucket", "file:/// folder or an s3:// bucket"), ("s3://b/p?x=1", "s3://bucket")]:
        with pytest.raises(ImproperlyConfigured, match="DYNABENCH_ARTIFACTS_URL") as raised:
            parse_store_url(bad)
        assert says in str(raised.value)


def test_the_file_store_is_the_default_and_keeps_todays_relative_paths(demo_tasks, tiny_artifact, settings):
    import shutil

    from registry.services import models_root, register_model

    assert not artifacts.in_object_storage()
    info = tiny_artifact("sentiment")
    working = models_root() / "sentiment" / "file-store-copy"
    shutil.copytree(info.path, working)
    model = register_model(demo_tasks["sentiment"], ml.verify_artifact(working), name="on-disk")
    assert model.artifact_path == "sentiment/file-store-copy"
    assert model.artifact_dir == working and working.is_dir()  # nothing moved, nothing downloaded


def test_a_registered_model_is_uploaded_and_registered_by_its_url(registered, s3_store, s3_endpoint,
                                                                  tiny_artifacts, settings):
    sha = registered.sha256
    assert registered.artifact_path == f"s3://{s3_store}/store/artifacts/{sha}"
    files = json.loads((tiny_artifacts["sentiment"].path / "metadata.json").read_text())["files"]
    assert keys(s3_endpoint, s3_store) == {f"store/artifacts/{sha}/{name}" for name in [*files, "metadata.json"]}
    # Machine A keeps a verified copy in its cache; the session's own artifact is untouched.
    assert ml.verify_artifact(registered.artifact_dir, sha).path.parent.as_posix().endswith("cache-a")
    assert tiny_artifacts["sentiment"].path.is_dir()


def test_another_machine_downloads_it_into_its_own_cache_and_answers_with_it(registered, machine_b):
    from registry.services import ref_for

    assert not machine_b.exists()
    [prediction] = ml.predict(ref_for(registered), [{"statement": "What a lovely day."}])
    assert prediction["label"] in ("positive", "negative")
    assert sorted(p.name for p in machine_b.iterdir()) == [registered.sha256]  # no temporary folder left
    ml.verify_artifact(machine_b / registered.sha256, registered.sha256)


@pytest.mark.django_db
def test_a_new_example_loads_the_target_from_the_store_on_a_machine_that_lacks_it(
        registered, machine_b, client_for, annotator):
    from annotation.models import Example

    task = registered.task
    task.open_round().target_models.set([registered])
    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    body = {"context": context["id"], "inputs": {"statement": "Lovely."}, "target": {"label": "positive"}}
    response = client.post("/api/tasks/sentiment/examples/", body, format="json")
    assert response.status_code == 201, response.content
    example = Example.objects.get()
    assert example.prediction["label"] in ("positive", "negative")
    assert list(example.model_versions.all()) == [registered]
    assert (machine_b / registered.sha256 / "model.safetensors").is_file()


def tamper(endpoint, bucket, model, name, body: bytes):
    bucket_client(endpoint).put_object(Bucket=bucket, Key=f"store/artifacts/{model.sha256}/{name}", Body=body)


def nothing_cached(cache) -> bool:
    return not cache.exists() or list(cache.iterdir()) == []


@pytest.mark.parametrize("damage", ["tampered", "truncated"])
def test_a_tampered_or_truncated_object_is_refused_and_never_loaded(registered, machine_b, s3_store, s3_endpoint,
                                                                    tiny_artifacts, damage):
    from registry.services import ref_for

    weights = (tiny_artifacts["sentiment"].path / "model.safetensors").read_bytes()
    body = weights[:-8] + b"\x00" * 8 if damage == "tampered" else weights[: len(weights) // 2]
    tamper(s3_endpoint, s3_store, registered, "model.safetensors", body)
    with pytest.raises(ml.ArtifactError, match="is not the registered artifact: sha256 mismatch for model.safetensors"):
        ref_for(registered)
    assert nothing_cached(machine_b)  # nothing half-downloaded either: the temporary folder is gone


def test_a_rewritten_metadata_file_is_refused_before_any_name_in_it_is_used(registered, machine_b, s3_store,
                                                                           s3_endpoint, tiny_artifacts):
    metadata = json.loads((tiny_artifacts["sentiment"].path / "metadata.json").read_text())
    metadata["files"] = {"../../outside.txt": "0" * 64}
    metadata["sha256"] = ml.artifact_sha256(metadata)  # consistent in itself, not what was registered
    tamper(s3_endpoint, s3_store, registered, "metadata.json", json.dumps(metadata).encode())
    with pytest.raises(ml.ArtifactError, match="metadata.json is not the registered artifact's"):
        registered.artifact_dir  # noqa: B018 - the property downloads
    assert nothing_cached(machine_b) and not (machine_b.parent / "outside.txt").exists()


def test_a_missing_object_says_it_is_not_in_the_store(registered, machine_b, s3_store, s3_endpoint):
    bucket_client(s3_endpoint).delete_object(Bucket=s3_store,
                                             Key=f"store/artifacts/{registered.sha256}/model.safetensors")
    with pytest.raises(ml.ArtifactError, match="model.safetensors is not in the artifact store"):
        registered.artifact_dir  # noqa: B018
    assert nothing_cached(machine_b)


@pytest.mark.django_db
def test_an_unreachable_store_is_a_503_with_retry_after_and_nothing_is_stored(
        registered, machine_b, settings, client_for, annotator):
    from annotation.models import Example

    registered.task.open_round().target_models.set([registered])
    settings.AWS_ENDPOINT_URL_S3 = f"http://127.0.0.1:{closed_port()}"
    settings.ARTIFACTS_CONNECT_TIMEOUT = 1.0
    with pytest.raises(StoreUnavailable, match="artifact store is unreachable"):
        registered.artifact_dir  # noqa: B018
    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    body = {"context": context["id"], "inputs": {"statement": "Lovely."}, "target": {"label": "positive"}}
    response = client.post("/api/tasks/sentiment/examples/", body, format="json")
    assert response.status_code == 503, response.content
    assert "artifact store is unreachable" in response.json()["detail"]
    assert int(response["Retry-After"]) == 30
    assert Example.objects.count() == 0 and nothing_cached(machine_b)


@pytest.mark.django_db
def test_a_training_job_that_cannot_reach_the_store_is_queued_again_then_registers(
        s3_store, s3_endpoint, demo_tasks, settings, django_capture_on_commit_callbacks):
    from jobs.engine import celery_task
    from jobs.models import Job
    from leaderboard.training import start_training
    from registry.models import ModelVersion

    settings.AWS_ENDPOINT_URL_S3 = f"http://127.0.0.1:{closed_port()}"
    settings.ARTIFACTS_CONNECT_TIMEOUT = 1.0
    with django_capture_on_commit_callbacks(execute=True):
        job = start_training(with_training_rows(demo_tasks["sentiment"]), name="after-the-outage", max_steps=2,
                             epochs=1, batch_size=4, evaluate=False)
    job.refresh_from_db()
    assert job.status == Job.Status.QUEUED and job.attempts == 1, (job.status, job.error)
    assert "artifact store is unreachable" in job.log and "Queued again in 30 s (attempt 2 of 2)" in job.log
    assert not ModelVersion.objects.filter(name="after-the-outage").exists()

    settings.AWS_ENDPOINT_URL_S3 = s3_endpoint  # the store is back: the retry registers the model
    with django_capture_on_commit_callbacks(execute=True):
        celery_task(job.celery_task_name).apply(args=[job.pk])
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    model = ModelVersion.objects.get(name="after-the-outage")
    assert model.artifact_path == f"s3://{s3_store}/store/artifacts/{model.sha256}"
    assert f"store/artifacts/{model.sha256}/metadata.json" in keys(s3_endpoint, s3_store)


@pytest.mark.django_db
def test_a_job_fails_once_its_attempts_are_spent_on_an_unreachable_store(s3_store, demo_tasks, settings,
                                                                         django_capture_on_commit_callbacks):
    from jobs.models import Job
    from leaderboard.training import start_training

    settings.AWS_ENDPOINT_URL_S3 = f"http://127.0.0.1:{closed_port()}"
    settings.ARTIFACTS_CONNECT_TIMEOUT = 1.0
    settings.JOB_MAX_ATTEMPTS = 1
    with django_capture_on_commit_callbacks(execute=True):
        job = start_training(with_training_rows(demo_tasks["sentiment"]), name="never", max_steps=2, epochs=1,
                             batch_size=4, evaluate=False)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "artifact store is unreachable" in job.error


def _settings_in_a_fresh_process(tmp_path, **env_vars):
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = ("import django; from django.conf import settings; django.setup(); "
             "print(settings.DYNABENCH_MODELS_DIR, repr(settings.DYNABENCH_ARTIFACTS_URL))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNABENCH_")}
    env.update(DJANGO_SETTINGS_MODULE="dynabench.settings", DEBUG="true", DYNABENCH_VAR_DIR=str(tmp_path / "var"),
               **env_vars)
    return subprocess.run([sys.executable, "-c", probe], cwd=Path(__file__).resolve().parents[2], env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_file_url_names_the_models_folder_and_a_conflict_or_bad_url_stops_the_start(tmp_path):
    ran = _settings_in_a_fresh_process(tmp_path, DYNABENCH_ARTIFACTS_URL=f"file://{tmp_path}/shared%20models")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == f"{tmp_path}/shared models ''"
    ran = _settings_in_a_fresh_process(tmp_path, DYNABENCH_ARTIFACTS_URL=f"file://{tmp_path}/a",
                                       DYNABENCH_MODELS_DIR=str(tmp_path / "b"))
    assert ran.returncode != 0 and "name different folders; set one of them" in ran.stderr
    ran = _settings_in_a_fresh_process(tmp_path, DYNABENCH_ARTIFACTS_URL="gs://elsewhere")
    assert ran.returncode != 0 and "the artifact store is a file:/// folder or an s3:// bucket" in ran.stderr


def test_a_replay_report_is_uploaded_beside_the_models(s3_store, s3_endpoint, tmp_path):
    report = tmp_path / "report.json"
    report.write_text('{"task": "hate"}\n')
    (tmp_path / "report.md").write_text("| model |\n")
    urls = artifacts.publish_files([report, tmp_path / "report.md"], "replays/20261202-hate-report")
    assert urls == [f"s3://{s3_store}/store/replays/20261202-hate-report/report.json",
                    f"s3://{s3_store}/store/replays/20261202-hate-report/report.md"]
    body = bucket_client(s3_endpoint).get_object(Bucket=s3_store, Key="store/replays/20261202-hate-report/report.json")
    assert body["Body"].read() == b'{"task": "hate"}\n'


def test_with_the_file_store_a_report_stays_where_it_was_written(tmp_path):
    report = tmp_path / "report.json"
    report.write_text("{}\n")
    assert artifacts.publish_files([report], "replays/x") == [] and report.read_text() == "{}\n"


def test_a_board_never_downloads_an_artifact_and_shows_the_count_its_evaluation_stored(registered, machine_b):
    from django.core.cache import cache

    from leaderboard.board import _parameters_of
    from leaderboard.evaluation import parameters_key, parameters_mb
    from registry.services import ref_for

    cache.delete(parameters_key(registered.sha256))
    assert _parameters_of([registered]) == {registered.pk: None}  # not on this machine: no count, no download
    assert not machine_b.exists()
    size = parameters_mb(ref_for(registered))  # what the evaluation (on a worker) measures
    count = cache.get(parameters_key(registered.sha256))
    assert size == round(count * 4 / 1e6, 1) and count > 1000
    assert _parameters_of([registered]) == {registered.pk: count}
