"""Model submissions through the API: checked, registered, evaluated and ranked;
refused archives say why and store nothing; per-user limits; private models stay
private on the board, the API and the exports."""

import io
import zipfile

import pytest
from django.core.cache import cache

from tasks.models import ModelVersion, Round
from tests.leaderboard.test_models_and_jobs import add_examples

pytestmark = pytest.mark.django_db

LEANING = [("What a lovely, warm film.", "positive"), ("Awful and far too long.", "negative")] * 4


@pytest.fixture(autouse=True)
def _fresh_limits():
    cache.clear()
    yield
    cache.clear()


def model_zip(artifact_dir, *, extra: dict | None = None) -> bytes:
    """The HF files of a trained artifact (what a submitter uploads), zipped in a folder."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(artifact_dir.iterdir()):
            if path.name != "metadata.json":
                zf.write(path, f"my-model/{path.name}")
        for name, content in (extra or {}).items():
            zf.writestr(name, content)
    return out.getvalue()


def upload(client, body: bytes, name="my-model", public=True, slug="sentiment"):
    return client.post(f"/api/tasks/{slug}/models/", {
        "file": io.BytesIO(body), "name": name, "public": "true" if public else "false"}, format="multipart")


@pytest.fixture
def scored_task(live_tasks):
    task = live_tasks["sentiment"]
    static = Round.objects.create(task=task, number=0, status=Round.Status.CLOSED)
    add_examples(task, static, LEANING, "test")
    return task


def test_a_user_submits_a_model_that_is_evaluated_and_ranked(scored_task, tiny_artifact, annotator, client_for,
                                                               client, django_capture_on_commit_callbacks):
    api = client_for(annotator)
    with django_capture_on_commit_callbacks(execute=True):
        response = upload(api, model_zip(tiny_artifact("sentiment").path))
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["model"]["name"] == "my-model" and body["job"]["kind"] == "evaluate_model"
    assert body["job"]["status"] == "queued" and "queue_position" in body["job"]
    model = ModelVersion.objects.get(name="my-model")
    assert model.submitted and model.is_public and model.created_by == annotator
    job = api.get(f"/api/jobs/{body['job']['id']}/")  # the submitter watches it go from queued to done
    assert job.status_code == 200 and job.json()["status"] == "succeeded"
    board = client.get("/api/tasks/sentiment/leaderboard/").json()
    row = next(r for r in board["rows"] if r["model"]["name"] == "my-model")
    assert row["model"]["owner"] == "annotator" and row["rank"] is not None
    assert row["metrics"]["performance"]["ci_low"] is not None


@pytest.mark.parametrize("extra, reason", [
    ({"../evil.txt": b"x"}, "'..' is not allowed"),
    ({"my-model/pytorch_model.bin": b"\\x80\\x04pickle"}, "pickle-based weights are never loaded"),
    ({"my-model/train.py": b"print(1)"}, "code is never run"),
])
def test_a_malicious_archive_is_refused_with_a_reason_and_nothing_is_stored(scored_task, tiny_artifact, annotator,
                                                                           client_for, settings, extra, reason):
    before = sorted(p for p in settings.DYNABENCH_MODELS_DIR.rglob("*"))
    response = upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path, extra=extra))
    assert response.status_code == 400 and reason in response.json()["errors"]["file"][0]
    assert not ModelVersion.objects.filter(name="my-model").exists()
    after = [p for p in settings.DYNABENCH_MODELS_DIR.rglob("*") if "submissions" not in p.parts or p.is_dir()]
    assert set(after) - set(before) <= {p for p in after if p.is_dir()}  # at most the empty submissions folder


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


def test_private_models_show_only_to_their_owner_and_researchers(scored_task, tiny_artifact, annotator,
                                                                  second_annotator, researcher, client_for, client,
                                                                  django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert upload(client_for(annotator), model_zip(tiny_artifact("sentiment").path), name="secret",
                      public=False).status_code == 201

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
    assert upload(anonymous, body).status_code in (401, 403)


def test_the_upload_page_and_the_model_page(scored_task, tiny_artifact, annotator, second_annotator, client,
                                            django_capture_on_commit_callbacks):
    from django.core.files.uploadedfile import SimpleUploadedFile

    assert client.get("/tasks/sentiment/submit/").status_code == 302  # sign in first
    client.force_login(annotator)
    page = client.get("/tasks/sentiment/submit/")
    assert page.status_code == 200 and "0: negative, 1: positive" in page.content.decode()
    refused = client.post("/tasks/sentiment/submit/", {"name": "junk", "file": SimpleUploadedFile("m.zip", b"no")})
    assert refused.status_code == 400 and "not a zip archive" in refused.content.decode()
    archive = SimpleUploadedFile("m.zip", model_zip(tiny_artifact("sentiment").path))
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/tasks/sentiment/submit/", {"name": "mine", "file": archive})
    model = ModelVersion.objects.get(name="mine")
    assert response.status_code == 302 and response.url == f"/models/{model.pk}/"
    assert not model.is_public  # the checkbox was not sent
    own = client.get(f"/models/{model.pk}/").content.decode()
    assert "<svg" in own and "static" in own and "Evaluation log" in own and "round 0: 8 test examples" in own
    client.force_login(second_annotator)
    assert client.get(f"/models/{model.pk}/").status_code == 404  # private
    ModelVersion.objects.filter(pk=model.pk).update(is_public=True)
    public = client.get(f"/models/{model.pk}/").content.decode()
    assert "model-metrics" in public and "Evaluation log" not in public  # the log is its owner's


def test_an_evaluation_past_its_time_limit_fails_with_a_readable_error(scored_task, settings,
                                                                       django_capture_on_commit_callbacks):
    from leaderboard import services
    from tasks.models import Job

    settings.EVALUATION_TIME_LIMIT = -1  # already past: stops at the first batch
    model = scored_task.open_round().target_models.get()
    with django_capture_on_commit_callbacks(execute=True):
        job = services.start_evaluation(model)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "ran past its time limit" in job.error
