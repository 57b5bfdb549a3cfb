"""Model submissions through the API: taken in the request, checked by a job, registered,
evaluated and ranked; refused archives say why and store nothing; per-user limits;
private models stay private on the board, the API and the exports. And from the
attacker's side: an oversized body is stopped while it is read, a config of 10,000
layers is refused before anything is built, a model that needs too much memory or
time fails its job while the worker carries on, and nothing is left behind; a
config that names a server file reads nothing (the check's sandbox), and without
its sandbox no model is checked at all. The tests that run a check need bubblewrap
(tests/sandboxing.py)."""

import io
import json
import threading
import zipfile
from pathlib import Path

import pytest
from django.core.cache import cache
from django.db import connection

from jobs.models import Job
from leaderboard.evaluation import start_evaluation
from leaderboard.submissions import checking_folder, incoming_folder, remove_leftovers
from registry.models import ModelVersion
from tasks.models import Round
from tests.leaderboard import upload_recorder
from tests.leaderboard.test_models_and_jobs import add_examples
from tests.sandboxing import requires_bwrap

pytestmark = pytest.mark.django_db

LEANING = [("What a lovely, warm film.", "positive"), ("Awful and far too long.", "negative")] * 4


@pytest.fixture(autouse=True)
def _fresh_limits():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(autouse=True)
def _own_models_dir(settings, tmp_path):
    """A models folder per test: what one test's uploads leave is not another's leftover."""
    settings.DYNABENCH_MODELS_DIR = tmp_path / "models"


def model_zip(artifact_dir, *, extra: dict | None = None, config: dict | None = None) -> bytes:
    """The HF files of a trained artifact (what a submitter uploads), zipped in a folder;
    ``config`` changes config.json. The weights are stored uncompressed (deflating 90 MB
    took seconds per archive, and float weights hardly compress); the rest is deflated."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(artifact_dir.iterdir()):
            if path.name == "config.json" and config:
                zf.writestr(f"my-model/{path.name}", json.dumps({**json.loads(path.read_text()), **config}))
            elif path.suffix == ".safetensors":
                zf.write(path, f"my-model/{path.name}", compress_type=zipfile.ZIP_STORED)
            elif path.name != "metadata.json":
                zf.write(path, f"my-model/{path.name}")
        for name, content in (extra or {}).items():
            zf.writestr(name, content)
    return out.getvalue()


def upload(client, body: bytes, name="my-model", public=True, slug="sentiment", **extra):
    return client.post(f"/api/tasks/{slug}/models/", {
        "file": io.BytesIO(body), "name": name, "public": "true" if public else "false"}, format="multipart",
        **extra)


def finished(response) -> Job:
    """The check job a 202 answered with, as it ended (jobs run inline in the tests)."""
    assert response.status_code == 202, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert job.kind == Job.Kind.CHECK_SUBMISSION and job.status in Job.FINISHED, job.status
    return job


def leftovers(models_dir: Path) -> list[str]:
    """Anything a check may leave: incoming archives, work folders, unpacking folders."""
    work = [str(p) for folder in (incoming_folder(), checking_folder()) if folder.is_dir() for p in folder.iterdir()]
    return work + [str(p) for p in models_dir.rglob(".*") if ".upload-" in p.name or ".tmp-" in p.name]


@pytest.fixture
def scored_task(live_tasks):
    task = live_tasks["sentiment"]
    static = Round.objects.create(task=task, number=0, status=Round.Status.CLOSED)
    add_examples(task, static, LEANING, "test")
    return task


@requires_bwrap
def test_a_user_submits_a_model_that_is_checked_evaluated_and_ranked(scored_task, tiny_artifact, annotator,
                                                                      client_for, client, settings,
                                                                      django_capture_on_commit_callbacks):
    api = client_for(annotator)
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(api, model_zip(tiny_artifact("sentiment").path))
    body = response.json()
    assert response.status_code == 202 and body["kind"] == "check_submission"
    assert body["status"] == "queued" and "queue_position" in body  # answered before the check ran
    job = api.get(f"/api/jobs/{body['id']}/").json()  # the submitter watches it
    assert job["status"] == "succeeded", job["error"]
    assert "ran the model on a short input" in job["log"] and "checking the model in a separate process" in job["log"]
    model = ModelVersion.objects.get(name="my-model")
    assert job["result"]["model_version"] == model.pk
    assert model.submitted and model.is_public and model.created_by == annotator
    evaluation = api.get(f"/api/jobs/{job['result']['evaluation_job']}/").json()
    assert evaluation["kind"] == "evaluate_model" and evaluation["status"] == "succeeded"
    board = client.get("/api/tasks/sentiment/leaderboard/").json()
    row = next(r for r in board["rows"] if r["model"]["name"] == "my-model")
    assert row["model"]["owner"] == "annotator" and row["rank"] is not None
    assert row["metrics"]["performance"]["ci_low"] is not None
    assert leftovers(settings.DYNABENCH_MODELS_DIR) == []


@pytest.mark.parametrize("extra, reason", [
    ({"../evil.txt": b"x"}, "'..' is not allowed"),
    ({"my-model/pytorch_model.bin": b"\\x80\\x04pickle"}, "pickle-based weights are never loaded"),
    ({"my-model/train.py": b"print(1)"}, "code is never run"),
])
def test_a_malicious_archive_is_refused_with_a_reason_and_nothing_is_stored(scored_task, tiny_artifact, annotator,
                                                                           client_for, settings, extra, reason):
    before = sorted(p for p in settings.DYNABENCH_MODELS_DIR.rglob("*") if p.is_file())
    response = upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path, extra=extra))
    assert response.status_code == 400 and reason in response.json()["errors"]["file"][0]  # in the request
    assert not ModelVersion.objects.filter(name="my-model").exists()
    assert not Job.objects.filter(kind=Job.Kind.CHECK_SUBMISSION).exists()
    assert sorted(p for p in settings.DYNABENCH_MODELS_DIR.rglob("*") if p.is_file()) == before


def test_not_a_zip_and_too_large(scored_task, annotator, client_for, settings):
    api = client_for(annotator)
    response = upload(api, b"just some text")
    assert response.status_code == 400 and "not a zip archive" in response.json()["errors"]["file"][0]
    settings.SUBMISSION_MAX_BYTES = 10
    assert upload(api, b"x" * 11, name="big").status_code == 413


def test_at_most_n_a_day_for_users_and_researchers_are_exempt(scored_task, annotator, researcher, client_for,
                                                             settings):
    settings.SUBMISSIONS_PER_DAY = 2
    api = client_for(annotator)
    for n in range(2):
        assert upload(api, b"not a zip", name=f"try-{n}").status_code == 400  # refused ones count
    refused = upload(api, b"not a zip", name="try-3")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    owner = client_for(researcher)
    for n in range(3):
        assert upload(owner, b"not a zip", name=f"r-{n}").status_code == 400  # never 429


@requires_bwrap
def test_private_models_show_only_to_their_owner_and_researchers(scored_task, tiny_artifact, annotator,
                                                                  second_annotator, researcher, client_for, client,
                                                                  django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path), name="secret",
                          public=False)
    assert finished(response).status == Job.Status.SUCCEEDED

    def names(api, fmt="json"):
        response = api.get(f"/api/tasks/sentiment/leaderboard/?format={fmt}")
        return response.content.decode() if fmt == "csv" else [r["model"]["name"] for r in response.json()["rows"]]

    assert "secret" in names(client_for(annotator)) and "secret" in names(client_for(researcher))
    assert "secret" not in names(client_for(second_annotator)) and "secret" not in names(client)
    assert "secret" not in names(client, "csv")
    assert "secret" not in client.get("/tasks/sentiment/leaderboard/").content.decode()


def test_duplicate_names_and_anonymous_uploads_are_refused(scored_task, tiny_artifact, annotator, client_for,
                                                          anonymous):
    api = client_for(annotator)
    body = model_zip(tiny_artifact("sentiment").path)
    assert upload(api, body, name="sentiment-tiny").status_code == 409  # the demo target's name
    assert upload(api, body, name="pending").status_code == 202  # its check job waits (no on_commit here)
    taken = upload(api, body, name="pending")
    assert taken.status_code == 409 and "is being checked" in taken.json()["detail"]
    assert upload(anonymous, body).status_code in (401, 403)


@requires_bwrap
def test_the_upload_page_and_the_model_page(scored_task, tiny_artifact, annotator, second_annotator, client,
                                            django_capture_on_commit_callbacks):
    from django.core.files.uploadedfile import SimpleUploadedFile

    assert client.get("/tasks/sentiment/submit/").status_code == 302  # sign in first
    client.force_login(annotator)
    page = client.get("/tasks/sentiment/submit/")
    assert page.status_code == 200 and "0: negative, 1: positive" in page.content.decode()
    assert "at most 600 MB" in page.content.decode()
    refused = client.post("/tasks/sentiment/submit/", {"name": "junk", "file": SimpleUploadedFile("m.zip", b"no")})
    assert refused.status_code == 400 and "not a zip archive" in refused.content.decode()
    archive = SimpleUploadedFile("m.zip", model_zip(tiny_artifact("sentiment").path))
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/tasks/sentiment/submit/", {"name": "mine", "file": archive})
    job = Job.objects.get(kind=Job.Kind.CHECK_SUBMISSION, params__name="mine")
    assert response.status_code == 302 and response.url == f"/jobs/{job.pk}/"  # the submitter follows the check
    model = ModelVersion.objects.get(name="mine")
    job_page = client.get(response.url).content.decode()
    assert "Check a submitted model" in job_page and f"/models/{model.pk}/" in job_page
    assert not model.is_public  # the checkbox was not sent
    own = client.get(f"/models/{model.pk}/").content.decode()
    assert "<svg" in own and "static" in own and "Evaluation log" in own and "round 0: 8 test examples" in own
    client.force_login(second_annotator)
    assert client.get(f"/models/{model.pk}/").status_code == 404  # private
    ModelVersion.objects.filter(pk=model.pk).update(is_public=True)
    public = client.get(f"/models/{model.pk}/").content.decode()
    assert "model-metrics" in public and "Evaluation log" not in public  # the log is its owner's
    # Fairness and robustness are measured only where a swap or a typo changed the text: how many.
    from leaderboard.models import Evaluation

    stored = Evaluation.objects.get(model_version=model, split="test").metrics
    assert stored["robustness_n"] > 0 and f"on {stored['robustness_n']} changed" in public
    assert ("fairness_n" not in stored) or f"on {stored['fairness_n']} changed" in public
    assert public.count(" changed") == 1 + ("fairness_n" in stored)


def test_an_evaluation_past_its_time_limit_fails_with_a_readable_error(scored_task, settings,
                                                                       django_capture_on_commit_callbacks):

    settings.EVALUATION_TIME_LIMIT = -1  # already past: stops at the first batch
    model = scored_task.open_round().target_models.get()
    with django_capture_on_commit_callbacks(execute=True):
        job = start_evaluation(model)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "ran past its time limit" in job.error


# --- the attacker's side: uploads cannot exhaust the web tier --------------------------------------


LIMIT = 200_000


@pytest.fixture
def recorded_uploads(settings, tmp_path):
    """A small size limit, files stored on disk in a folder of the test's own, and a
    recorder before the storing handlers: what it is passed is what could be kept."""
    settings.SUBMISSION_MAX_BYTES = LIMIT
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 1024
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path / "uploads")
    (tmp_path / "uploads").mkdir()
    settings.FILE_UPLOAD_HANDLERS = ["tests.leaderboard.upload_recorder.RecordingHandler",
                                     "django.core.files.uploadhandler.MemoryFileUploadHandler",
                                     "django.core.files.uploadhandler.TemporaryFileUploadHandler"]
    upload_recorder.PASSED.clear()
    yield tmp_path / "uploads"
    upload_recorder.PASSED.clear()


def csrf_token(client) -> str:
    client.get("/tasks/sentiment/submit/")  # sets the CSRF cookie
    return client.cookies["csrftoken"].value


def test_an_upload_one_byte_over_the_limit_gets_413_and_never_more_than_the_limit_is_stored(
        scored_task, annotator, recorded_uploads):
    from rest_framework.test import APIClient

    # A browser-like session: the CSRF check reads the body before the view runs.
    api = APIClient(enforce_csrf_checks=True)
    api.force_login(annotator)
    response = upload(api, b"x" * (LIMIT + 1), HTTP_X_CSRFTOKEN=csrf_token(api))
    assert 0 < upload_recorder.PASSED[-1] <= LIMIT  # reading stopped at the limit
    assert list(recorded_uploads.iterdir()) == []  # the temporary file is gone
    assert response.status_code == 413, response.content
    assert response.json()["code"] == "too_large"
    assert response.json()["detail"] == f"The file is over the limit of {LIMIT:,} bytes; nothing was kept."
    assert not Job.objects.exists()

    upload_recorder.PASSED.clear()
    at_the_limit = upload(api, b"x" * LIMIT, name="exactly", HTTP_X_CSRFTOKEN=csrf_token(api))
    assert at_the_limit.status_code == 400  # read whole, then refused: not a zip
    assert upload_recorder.PASSED[-1] == LIMIT


def test_a_body_declared_over_the_limit_is_refused_before_a_byte_is_read(scored_task, annotator, client_for,
                                                                         recorded_uploads):
    response = upload(client_for(annotator), b"x" * (3 * LIMIT))
    assert sum(upload_recorder.PASSED) == 0
    assert response.status_code == 413


def test_the_upload_page_stops_an_oversized_upload_while_reading_it(scored_task, annotator, recorded_uploads):
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    browser.force_login(annotator)
    token = csrf_token(browser)
    response = browser.post("/tasks/sentiment/submit/", {
        "csrfmiddlewaretoken": token, "name": "big", "file": SimpleUploadedFile("m.zip", b"x" * (LIMIT + 1))})
    assert 0 < upload_recorder.PASSED[-1] <= LIMIT
    assert list(recorded_uploads.iterdir()) == []
    assert response.status_code == 413 and "is over the limit of 200,000 bytes" in response.content.decode()
    # The CSRF check still holds for uploads within the limit.
    forged = browser.post("/tasks/sentiment/submit/", {"name": "forged", "file": SimpleUploadedFile("m.zip", b"x")})
    assert forged.status_code == 403


@requires_bwrap
def test_a_config_of_ten_thousand_layers_fails_its_check_with_the_reason(scored_task, tiny_artifact, annotator,
                                                                         client_for, settings,
                                                                         django_capture_on_commit_callbacks):
    body = model_zip(tiny_artifact("sentiment").path, config={"num_hidden_layers": 10_000})
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(annotator), body, name="deep")
    job = finished(response)
    assert job.status == Job.Status.FAILED
    assert job.error.startswith("config.json: num_hidden_layers is 10,000, over this task's limit of "
                                "48 (max_layers); the model was refused before anything was built")
    assert "loaded the model" not in job.log
    assert not ModelVersion.objects.filter(name="deep").exists()
    assert leftovers(settings.DYNABENCH_MODELS_DIR) == []


@requires_bwrap
def test_a_task_sets_its_own_limits_on_submitted_models(scored_task, tiny_artifact, annotator, client_for,
                                                        django_capture_on_commit_callbacks):
    scored_task.config = {**scored_task.config, "model_limits": {"max_layers": 4}}
    scored_task.save()
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path))
    job = finished(response)
    assert job.status == Job.Status.FAILED and "num_hidden_layers is 6, over this task's limit of 4" in job.error


@pytest.fixture
def hostile_zip(tiny_artifact, tmp_path) -> bytes:
    """A model that passes every check but needs far more memory to load than the tiny
    one: a vocabulary of 150,000 (within the bounds), its embeddings stored in full."""
    import torch
    from safetensors.torch import load_file, save_file

    source = tiny_artifact("sentiment").path
    state = load_file(source / "model.safetensors")
    [key] = [k for k in state if k.endswith("word_embeddings.weight")]
    state[key] = torch.zeros(150_000, state[key].shape[1])
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("config.json", json.dumps({**json.loads((source / "config.json").read_text()),
                                                "vocab_size": 150_000}))
        zf.write(tmp_path / "model.safetensors", "model.safetensors")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            zf.write(source / name, name)
    (tmp_path / "model.safetensors").unlink()
    return out.getvalue()


@requires_bwrap
def test_a_model_whose_loading_blows_the_memory_limit_fails_and_the_worker_carries_on(
        scored_task, tiny_artifact, hostile_zip, annotator, client_for, settings,
        django_capture_on_commit_callbacks):
    import os

    api = client_for(annotator)
    settings.SUBMISSION_CHECK_MEMORY_MB = 1200  # enough to start torch, not to load 150,000 embeddings
    worker = os.getpid()
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(api, hostile_zip, name="hungry")
    job = finished(response)
    assert job.status == Job.Status.FAILED, job.log
    assert job.error.startswith("checking the model needed more than the memory limit of 1,200 MB")
    assert not ModelVersion.objects.filter(name="hungry").exists()
    assert leftovers(settings.DYNABENCH_MODELS_DIR) == []
    # The worker (this process: jobs run inline in the tests) lives on and checks the next one.
    settings.SUBMISSION_CHECK_MEMORY_MB = 6144
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(api, model_zip(tiny_artifact("sentiment").path), name="modest")
    job = finished(response)
    assert os.getpid() == worker and job.status == Job.Status.SUCCEEDED, job.error
    assert ModelVersion.objects.filter(name="modest").exists()


@requires_bwrap
def test_a_check_past_its_time_limit_is_killed_and_leaves_nothing(scored_task, tiny_artifact, annotator,
                                                                  client_for, settings,
                                                                  django_capture_on_commit_callbacks):
    settings.SUBMISSION_CHECK_SECONDS = 1
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path), name="slow")
    job = finished(response)
    assert job.status == Job.Status.FAILED
    assert job.error.startswith("checking the model took longer than the time limit of 1 s")
    assert not ModelVersion.objects.filter(name="slow").exists()
    assert leftovers(settings.DYNABENCH_MODELS_DIR) == []


@requires_bwrap
def test_what_a_killed_worker_left_is_removed_by_the_next_check(scored_task, annotator, client_for, tiny_artifact,
                                                                settings, django_capture_on_commit_callbacks):
    """A worker killed mid-check leaves its job's work folder and archive; the sweeper
    fails the job, and the next check removes them (a running check's are kept)."""
    from jobs.engine import create_job

    dead = create_job(Job.Kind.CHECK_SUBMISSION, task=scored_task, user=annotator,
                      params={"name": "lost", "archive": "a" * 32 + ".zip"})
    running = create_job(Job.Kind.CHECK_SUBMISSION, task=scored_task, user=annotator,
                         params={"name": "elsewhere", "archive": "b" * 32 + ".zip"})
    Job.objects.filter(pk=dead.pk).update(status=Job.Status.FAILED)
    Job.objects.filter(pk=running.pk).update(status=Job.Status.RUNNING)
    for job in (dead, running):
        unpacking = checking_folder() / f"job-{job.pk}" / ".artifact.upload-x1y2"
        unpacking.mkdir(parents=True)
        (unpacking / "model.safetensors").write_bytes(b"\0" * 1000)
        incoming_folder().mkdir(parents=True, exist_ok=True)
        (incoming_folder() / job.params["archive"]).write_bytes(b"PK")
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path,
                                                               config={"vocab_size": 10**7}), name="next")
    job = finished(response)
    assert job.status == Job.Status.FAILED and "vocab_size is 10,000,000" in job.error
    assert sorted(p.name for p in checking_folder().iterdir()) == [f"job-{running.pk}"]
    assert sorted(p.name for p in incoming_folder().iterdir()) == ["b" * 32 + ".zip"]
    Job.objects.filter(pk=running.pk).update(status=Job.Status.FAILED)
    assert sorted(remove_leftovers()) == ["b" * 32 + ".zip", f"job-{running.pk}"]


def test_a_check_job_is_not_run_again(scored_task, annotator, researcher, client_for):
    from jobs.engine import create_job

    job = create_job(Job.Kind.CHECK_SUBMISSION, task=scored_task, user=annotator, params={"name": "once"})
    Job.objects.filter(pk=job.pk).update(status=Job.Status.FAILED, celery_task_name="leaderboard.check_submission")
    response = client_for(researcher).post(f"/api/jobs/{job.pk}/rerun/")
    assert response.status_code == 409 and "uploaded again" in response.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_twenty_parallel_uploads_from_one_account_make_at_most_the_daily_limit(live_tasks, annotator, settings):
    if connection.vendor != "postgresql":
        pytest.skip("parallel requests are tested on PostgreSQL (DATABASE_URL=postgres://..., as in CI); "
                    "the in-memory SQLite test database locks whole tables")
    from rest_framework.test import APIClient

    settings.SUBMISSIONS_PER_DAY = 3
    barrier = threading.Barrier(20)
    statuses = []

    def send(n):
        from django.db import connection as thread_connection

        try:
            api = APIClient()
            api.force_login(annotator)
            barrier.wait()
            statuses.append(upload(api, b"not a zip", name=f"racer-{n}").status_code)
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=send, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [400] * 3 + [429] * 17  # counted and checked at once, never more than the limit


def test_one_account_cannot_fill_the_training_workers_queue_with_checks(scored_task, tiny_artifact, annotator,
                                                                          researcher, client_for, settings):
    """Checks run on the training worker; one account holds at most
    SUBMISSION_CHECKS_QUEUED of them queued or running, on any task, researcher or not."""
    settings.SUBMISSION_CHECKS_QUEUED, settings.SUBMISSIONS_PER_DAY = 2, 10
    body = model_zip(tiny_artifact("sentiment").path)
    api = client_for(annotator)
    for n in range(2):  # queued: nothing runs them here (no commit hooks in a test transaction)
        assert upload(api, body, name=f"queued-{n}").status_code == 202
    refused = upload(api, body, name="queued-2")
    assert refused.status_code == 429 and "2 submitted models waiting" in refused.json()["detail"]
    assert int(refused["Retry-After"]) > 0
    assert Job.objects.filter(kind=Job.Kind.CHECK_SUBMISSION, created_by=annotator).count() == 2
    # Another account is not held up; a finished check makes room.
    assert upload(client_for(researcher), body, name="theirs").status_code == 202
    oldest = Job.objects.filter(created_by=annotator).order_by("pk").first()
    Job.objects.filter(pk=oldest.pk).update(status=Job.Status.FAILED)
    assert upload(api, body, name="queued-3").status_code == 202


def test_the_daily_limit_fails_closed_when_its_cache_is_down(scored_task, annotator, settings):
    """With the cache unreachable the daily count cannot be taken: no submission is
    taken either (503), rather than every upload passing uncounted."""
    from django.test import override_settings

    from core.errors import Unavailable
    from leaderboard.submissions import take_daily

    task = scored_task
    down = {"default": {"BACKEND": "core.cache.SignedRedisCache", "LOCATION": "redis://127.0.0.1:1/0",
                        "OPTIONS": {"socket_connect_timeout": 0.5}}}
    with override_settings(CACHES=down), pytest.raises(Unavailable) as refused:
        take_daily(annotator, task)
    assert refused.value.retry_after == 60 and "nothing was stored" in refused.value.message
    take_daily(annotator, task)  # the cache is back: counted


# --- the attacker's side: what the check can reach, and no check without its sandbox ---------------


def vocabulary_from_a_server_file(artifact_dir: Path, path: Path) -> bytes:
    """A model that passes every check of the archive, whose tokenizer_config.json names a
    file of the server's as its vocabulary ("vocab"): transformers reads whatever file it
    names. vocab.txt is there for the archive's checks (a tokenizer file is required)."""
    vocabulary = json.loads((artifact_dir / "tokenizer.json").read_text())["model"]["vocab"]
    tokenizer_config = {**json.loads((artifact_dir / "tokenizer_config.json").read_text()), "vocab": str(path)}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.write(artifact_dir / "config.json", "config.json")
        zf.write(artifact_dir / "model.safetensors", "model.safetensors", compress_type=zipfile.ZIP_STORED)
        zf.writestr("vocab.txt", "\n".join(sorted(vocabulary, key=vocabulary.get)) + "\n")
        zf.writestr("tokenizer_config.json", json.dumps(tokenizer_config))
    return out.getvalue()


@requires_bwrap
def test_a_model_whose_tokenizer_reads_the_servers_secret_key_is_refused_and_reads_nothing(
        scored_task, tiny_artifact, annotator, client_for, settings, tmp_path, django_capture_on_commit_callbacks):
    """Unconfined, the check opened var/secret_key as the vocabulary: its refusal then
    told a file that exists from one that does not (here: no [UNK] token in it), and a
    file with an [UNK] line among its lines became the registered model's tokens, saved
    in its tokenizer.json. In the sandbox var/ is not there: the tokenizer cannot be
    loaded, and that is the reason the model is refused."""
    settings.VAR_DIR = tmp_path  # var/ as on a server: the key beside the models folder
    secret = "not-for-uploads-7f3a9c1e"
    (tmp_path / "secret_key").write_text(secret + "\n")
    body = vocabulary_from_a_server_file(tiny_artifact("sentiment").path, tmp_path / "secret_key")
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(annotator), body, name="curious")
    job = finished(response)
    assert job.status == Job.Status.FAILED, job.log
    assert job.error.startswith("the tokenizer could not be loaded: ") and "No such file or directory" in job.error
    assert not ModelVersion.objects.filter(name="curious").exists()
    assert leftovers(settings.DYNABENCH_MODELS_DIR) == []
    assert not [p for p in settings.DYNABENCH_MODELS_DIR.rglob("*") if p.is_file() and secret in p.read_text("latin-1")]


def test_without_its_sandbox_a_submitted_model_is_not_checked_at_all(scored_task, tiny_artifact, annotator,
                                                                     client_for, settings, tmp_path, caplog,
                                                                     django_capture_on_commit_callbacks):
    """bubblewrap missing on the worker: the check refuses to run, rather than run
    unconfined; the submitter is told their model was not checked, the log says why."""
    from leaderboard.submissions import NOT_CHECKED

    settings.SUBMISSION_SANDBOX = str(tmp_path / "bin" / "bwrap")
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path), name="unchecked")
    job = finished(response)
    assert job.status == Job.Status.FAILED and job.error == NOT_CHECKED
    assert "unpacked" not in job.log and "allowed" not in job.log  # nothing of it was run
    assert not ModelVersion.objects.filter(name="unchecked").exists()
    assert leftovers(settings.DYNABENCH_MODELS_DIR) == []
    assert f"the sandbox program '{tmp_path / 'bin' / 'bwrap'}' (bubblewrap) is not installed" in caplog.text


def test_no_sandbox_is_refused_with_debug_off(scored_task, tiny_artifact, annotator, client_for, settings, caplog,
                                              django_capture_on_commit_callbacks):
    from leaderboard.submissions import NOT_CHECKED

    settings.SUBMISSION_SANDBOX, settings.DEBUG = "none", False
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path), name="bare")
    job = finished(response)
    assert job.status == Job.Status.FAILED and job.error == NOT_CHECKED
    assert not ModelVersion.objects.filter(name="bare").exists()
    assert "SUBMISSION_SANDBOX=none (no sandbox) is allowed only with DEBUG on" in caplog.text


def test_no_sandbox_with_debug_on_checks_unconfined_and_says_so(scored_task, tiny_artifact, annotator, client_for,
                                                                settings, caplog,
                                                                django_capture_on_commit_callbacks):
    """A development checkout without bubblewrap may opt out, and every check it runs says so."""
    from leaderboard.submissions import UNCONFINED

    settings.SUBMISSION_SANDBOX, settings.DEBUG = "none", True
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path), name="local")
    job = finished(response)
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert UNCONFINED in job.log and UNCONFINED in caplog.text
    assert "in a sandbox" not in job.log
