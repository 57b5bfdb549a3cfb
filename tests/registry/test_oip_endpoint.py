"""The platform's own trained classifier served through an Open Inference Protocol
(v2) server, registered as an endpoint, made the target, written against and
evaluated: its predictions equal the local model's, and it is ranked beside it.

MLServer is not on this machine's package registry; ``tests/oip_server.py`` is a small
server that follows the protocol's REST spec (see its docstring)."""

import io

import pytest
from django.core.management import call_command

import ml
from annotation.models import Example
from leaderboard.board import board
from leaderboard.evaluation import start_evaluation
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from registry.services import ref_for, register_model
from tests.oip_server import OIPServer

pytestmark = pytest.mark.django_db

TEXTS = [("A delight from start to end.", "positive"), ("Dull, slow and far too long.", "negative"),
         ("The best film this year.", "positive"), ("I want my money back.", "negative"),
         ("Lovely music, weak story.", "positive"), ("Nothing happens at all.", "negative")]


@pytest.fixture
def local_model(demo_tasks, tiny_artifacts):
    return register_model(demo_tasks["sentiment"], tiny_artifacts["sentiment"], name="local-tiny")


@pytest.fixture
def served(local_model):
    with OIPServer("tiny-sentiment", ref_for(local_model)) as server:
        yield server


@pytest.fixture
def v2_model(served):
    out = io.StringIO()
    call_command("register_endpoint", "--task", "sentiment", "--name", "served-tiny", "--protocol", "v2",
                 "--url", served.url, "--model", "tiny-sentiment", stdout=out)
    return ModelVersion.objects.get(pk=int(out.getvalue()))


def test_a_v2_endpoint_answers_as_the_local_model(demo_tasks, local_model, v2_model, served, client_for, annotator):
    task = demo_tasks["sentiment"]
    task.open_round().target_models.add(v2_model)
    client = client_for(annotator)
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
    assert served.calls == len(TEXTS)


@pytest.mark.slow
def test_a_v2_endpoint_is_evaluated_and_ranked_beside_the_local_model(demo_tasks, local_model, v2_model,
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
    assert Evaluation.objects.filter(model_version=v2_model).count() == 1
