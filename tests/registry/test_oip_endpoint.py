"""The platform's own trained classifier served through a real Open Inference Protocol
(v2) server, MLServer, registered as an endpoint, made the target, written against and
evaluated: its predictions equal the local model's, and it is ranked beside it.

MLServer runs as a subprocess from its own venv (``tests/mlserver_process.py``), with
the platform's runtime for it (``ml/serving/mlserver_runtime.py``); the tests skip
where it is not installed (``make install`` builds it), and fail there under CI."""

import io

import pytest
import requests
from django.core.management import call_command

import ml
from annotation.models import Example
from leaderboard.board import board
from leaderboard.evaluation import start_evaluation
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from registry.services import ref_for, register_model
from tests.mlserver_process import HOST, MLServerProcess, executable_or_skip

# The server imports torch and loads the model before the first request: seconds.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

TEXTS = [("A delight from start to end.", "positive"), ("Dull, slow and far too long.", "negative"),
         ("The best film this year.", "positive"), ("I want my money back.", "negative"),
         ("Lovely music, weak story.", "positive"), ("Nothing happens at all.", "negative")]


@pytest.fixture(scope="module", autouse=True)
def mlserver_installed():
    """Skips (or fails, under CI) before anything is trained where MLServer is missing."""
    executable_or_skip()


@pytest.fixture
def local_model(demo_tasks, tiny_artifacts):
    return register_model(demo_tasks["sentiment"], tiny_artifacts["sentiment"], name="local-tiny")


@pytest.fixture(scope="module")
def served(tiny_artifacts, tmp_path_factory):
    """One MLServer for the module, serving the artifact the local model is registered
    from (started once: it imports torch and loads the model, seconds on 2 cores)."""
    artifact = tiny_artifacts["sentiment"]
    folder = tmp_path_factory.mktemp("mlserver")
    with MLServerProcess("tiny-sentiment", artifact.path, artifact.sha256, folder) as server:
        yield server


@pytest.fixture
def v2_model(served, settings):
    settings.ENDPOINT_ALLOWED_HOSTS = [HOST]  # MLServer on this machine, allowed by name
    out = io.StringIO()
    call_command("register_endpoint", "--task", "sentiment", "--name", "served-tiny", "--protocol", "v2",
                 "--url", served.url, "--model", "tiny-sentiment", stdout=out)
    return ModelVersion.objects.get(pk=int(out.getvalue()))


def test_a_v2_endpoint_answers_as_the_local_model(demo_tasks, local_model, v2_model, served, client_for, annotator):
    task = demo_tasks["sentiment"]
    task.open_round().target_models.add(v2_model)
    client = client_for(annotator)
    calls_before = served.calls()
    local = ml.predict(ref_for(local_model), [{"statement": t} for t, _ in TEXTS])
    for (text, label), expected in zip(TEXTS, local, strict=True):
        context = client.get("/api/tasks/sentiment/contexts/next/").json()
        response = client.post("/api/tasks/sentiment/examples/", {
            "context": context["id"], "inputs": {"statement": text}, "target": {"label": label}}, format="json")
        assert response.status_code == 201, response.content
        example = Example.objects.get(pk=response.json()["id"])
        assert example.prediction["label"] == expected["label"]
        assert example.prediction["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-6)
        assert example.prediction["endpoint"]["protocol"] == "v2"
    assert served.calls() - calls_before == len(TEXTS)  # one inference request per example, counted by MLServer


def test_a_v2_endpoint_is_evaluated_and_ranked_beside_the_local_model(demo_tasks, local_model, v2_model, client,
                                                                     django_capture_on_commit_callbacks):
    task = demo_tasks["sentiment"]
    rnd = task.open_round()
    for i, (text, label) in enumerate(TEXTS):
        Example.objects.create(task=task, round=rnd, split="test", inputs={"statement": text},
                               target={"label": label}, source="import", validation_status="verified",
                               external_uid=f"v2-{i}")
    with django_capture_on_commit_callbacks(execute=True):  # the evaluation jobs, run inline
        start_evaluation(local_model)
        start_evaluation(v2_model)
    mine = Evaluation.objects.get(model_version=local_model, round=rnd)
    theirs = Evaluation.objects.get(model_version=v2_model, round=rnd)
    assert theirs.per_example == mine.per_example
    assert theirs.metrics["accuracy"] == mine.metrics["accuracy"]
    assert theirs.metrics["robustness"] == mine.metrics["robustness"]
    assert theirs.metrics["ece"] == pytest.approx(mine.metrics["ece"], abs=1e-6)
    assert mine.metrics["memory_mb"] is not None and theirs.metrics["memory_mb"] is None
    # Ranked together: memory, which the endpoint cannot have, leaves every model's
    # Dynascore (never a zero for the endpoint); the endpoint's row says "remote".
    ranked = board(task)
    rows = {row["name"]: row for row in ranked.rows if row["info"] is not None}
    assert set(rows) == {"local-tiny", "served-tiny"}
    assert rows["served-tiny"]["remote"] == ["memory"] and rows["local-tiny"]["remote"] == []
    assert all("memory" not in row["metrics"] for row in rows.values())
    assert all(row["dynascore"] is not None for row in rows.values())
    # The page shows the local model's memory and "remote" for the endpoint's, offers no
    # memory weight (it weighs nothing), and says why memory is left out.
    page = client.get("/tasks/sentiment/leaderboard/").content.decode()
    assert ">remote<" in page and 'name="memory"' not in page and 'name="throughput"' in page
    model_page = client.get(f"/models/{v2_model.pk}/").content.decode()
    assert "<td>remote</td>" in model_page and "<td>remote</td>" not in client.get(
        f"/models/{local_model.pk}/").content.decode()
    words = " ".join(page.split())
    assert "Memory (MB) is shown but weighed in no model's Dynascore: served-tiny answers from behind an endpoint" \
        in words
    assert Evaluation.objects.filter(model_version=v2_model).count() == 1


def test_the_runtime_describes_the_model_and_refuses_another_shape_with_the_reason(served):
    """MLServer's metadata route says what the runtime reads and answers; a request that
    is not one BYTES tensor [n] per field of the task is a 400 that says why."""
    metadata = requests.get(f"{served.url}/v2/models/tiny-sentiment", timeout=10).json()
    assert metadata["inputs"] == [{"name": "statement", "datatype": "BYTES", "shape": [-1]}]
    assert metadata["outputs"] == [{"name": "probabilities", "datatype": "FP64", "shape": [-1, 2]}]
    infer = f"{served.url}/v2/models/tiny-sentiment/infer"
    for inputs, reason in [
        ([{"name": "premise", "shape": [1], "datatype": "BYTES", "data": ["x"]}], "expected one input tensor"),
        ([{"name": "statement", "shape": [2], "datatype": "BYTES", "data": ["x"]}], "must be a BYTES tensor"),
        ([{"name": "statement", "shape": [1], "datatype": "INT64", "data": [3]}], "must be a BYTES tensor"),
    ]:
        response = requests.post(infer, json={"inputs": inputs}, timeout=10)
        assert response.status_code == 400, response.text
        assert reason in response.json()["error"]
    empty = requests.post(infer, json={"inputs": [{"name": "statement", "shape": [0], "datatype": "BYTES",
                                                   "data": []}]}, timeout=10)
    assert empty.status_code == 200, empty.text
    assert empty.json()["outputs"][0]["shape"] == [0, 2]
