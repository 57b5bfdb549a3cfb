"""Extractive QA through a model behind an OpenAI-compatible endpoint, end to end: the
span the endpoint answers is located in the passage, the example written against it is
scored by the task's rule, and the model is evaluated and ranked by F1 like any QA model."""

import io

import pytest
from django.core.management import call_command

from annotation.models import Example
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.django_db

SECRET = "sk-test-qa-never-stored"
ENV = "DYNABENCH_TEST_QA_CHAT_KEY"


def first_word_of_the_passage(prompt: str) -> str:
    """A deterministic "LLM": the passage's first word, copied from the prompt."""
    return prompt.split("Passage:\n", 1)[1].split()[0]


@pytest.fixture
def qa_endpoint(demo_tasks, monkeypatch, settings):
    monkeypatch.setenv(ENV, SECRET)
    settings.ENDPOINT_ALLOWED_HOSTS = ["127.0.0.1"]  # the fake's address, allowed by name
    settings.ENDPOINT_SECRETS = {"qa-chat": {"env": ENV, "hosts": ["127.0.0.1"]}}
    with FakeOpenAI(api_key=SECRET, answer=first_word_of_the_passage) as server:
        out = io.StringIO()
        call_command("register_endpoint", "--task", "qa", "--name", "fake-reader", "--protocol", "openai",
                     "--url", server.url, "--model", "fake-chat", "--secret-env", "qa-chat",
                     "--price-per-call", "0.001", stdout=out)
        yield demo_tasks["qa"], ModelVersion.objects.get(pk=int(out.getvalue().strip())), server


def test_a_qa_example_written_against_an_endpoint_gets_the_span_it_answered(qa_endpoint, client_for, annotator):
    task, model, server = qa_endpoint
    task.open_round().target_models.set([model])
    client = client_for(annotator)
    context = client.get("/api/tasks/qa/contexts/next/").json()
    passage = context["fields"]["passage"]
    first, other = passage.split()[0], passage.split()[3]
    assert first != other
    response = client.post("/api/tasks/qa/examples/", {
        "context": context["id"], "inputs": {"question": "Which word comes fourth?"},
        "target": {"text": other, "start": passage.index(other)}}, format="json")
    assert response.status_code == 201, response.content
    example = Example.objects.get(pk=response.json()["id"])
    answered = example.model_predictions[str(model.pk)]
    assert (answered["answer"], answered["start"], answered["end"]) == (first, 0, len(first))
    assert answered["endpoint"]["raw"] == first
    assert example.fooled is True  # the model's span shares no word with the writer's answer
    assert "Passage:\n" + passage in server.requests[-1]["body"]["messages"][-1]["content"]


def test_a_qa_endpoint_is_evaluated_by_f1_and_ranked(qa_endpoint, client_for, researcher,
                                                     django_capture_on_commit_callbacks):
    task, model, _ = qa_endpoint
    static = task.open_round()
    passages = ["Paris is the capital of France.", "Water boils at one hundred degrees.",
                "Seven bridges cross the river."]
    golds = ["Paris", "Water", "river"]  # the reader's first word is right twice, wrong once
    for i, (passage, gold) in enumerate(zip(passages, golds, strict=True)):
        context = task.contexts.create(round=static, fields={"passage": passage})
        Example.objects.create(task=task, round=static, context=context, split="test",
                               inputs={"question": f"Question {i}?"},
                               target={"text": gold, "start": passage.index(gold)}, source="import",
                               validation_status="verified", external_uid=f"qa-endpoint-{i}")
    owner = client_for(researcher)
    with django_capture_on_commit_callbacks(execute=True):
        assert owner.post(f"/api/models/{model.pk}/evaluate/").status_code == 202
    evaluation = Evaluation.objects.get(model_version=model, round=static)
    assert evaluation.metrics["f1"] == pytest.approx(2 / 3)
    assert evaluation.metrics["exact_match"] == pytest.approx(2 / 3)
    assert evaluation.metrics["unparseable"] == 0 and evaluation.metrics["memory_mb"] is None
    board = owner.get("/api/tasks/qa/leaderboard/").json()
    [row] = [r for r in board["rows"] if r["model"]["name"] == "fake-reader"]
    assert row["remote_metrics"] == ["memory"]
