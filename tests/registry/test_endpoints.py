"""Models behind endpoints, end to end with a fake OpenAI-compatible server: registered
(command, service), made a target, written against, explained, evaluated and ranked;
the secret never stored, logged or answered; failures a clear 503 with nothing stored;
cost counted against a superuser's budget; a health check before promotion."""

import io
import json
import logging
from decimal import Decimal

import pytest
from django.core import serializers
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation.examples import signature_ok
from annotation.models import Example
from core.errors import Conflict, Forbidden, InvalidInput
from leaderboard import promotion
from leaderboard.evaluation import evaluate_model
from leaderboard.models import Evaluation
from registry import endpoint_budgets, endpoints
from registry.models import Endpoint, EndpointUsage, ModelVersion
from tasks.models import Round
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.django_db

SECRET = "sk-test-4f1c0ffee-never-stored"
ENV = "DYNABENCH_TEST_CHAT_KEY"
KEY = "chat"  # the key's name in the server's key map: what a researcher picks


def local_endpoints(settings):
    """The fake model servers listen on 127.0.0.1: allowed by name, as the make targets
    allow it for a development checkout; the test key is bound to that host."""
    settings.ENDPOINT_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.ENDPOINT_SECRETS = {KEY: {"env": ENV, "hosts": ("127.0.0.1",)}}


@pytest.fixture
def chat(settings):
    def answer(text):  # a word-spotting "LLM": deterministic, like temperature 0
        example = text.split("Possible labels")[0].lower()
        return "negative" if any(w in example for w in ("dull", "bad", "awful")) else "positive"

    local_endpoints(settings)
    with FakeOpenAI(api_key=SECRET, answer=answer, slow_seconds=1.0) as server:
        yield server


@pytest.fixture
def sentiment(demo_tasks):
    return demo_tasks["sentiment"]


@pytest.fixture
def chat_model(sentiment, chat, monkeypatch):
    monkeypatch.setenv(ENV, SECRET)
    out = io.StringIO()
    call_command("register_endpoint", "--task", "sentiment", "--name", "fake-llm", "--protocol", "openai",
                 "--url", chat.url, "--model", "fake-chat", "--secret-env", KEY, stdout=out)
    model = ModelVersion.objects.get(pk=int(out.getvalue().strip()))
    Endpoint.objects.filter(model_version=model).update(price_per_call=Decimal("0.01"),
                                                         price_per_1k_prompt_tokens=Decimal("0.5"))
    return model


@pytest.fixture
def target(sentiment, chat_model):
    sentiment.open_round().target_models.add(chat_model)
    return chat_model


def write(client, text, label="positive"):
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    return client.post("/api/tasks/sentiment/examples/", {
        "context": context["id"], "inputs": {"statement": text}, "target": {"label": label}}, format="json")


def test_the_command_registers_an_endpoint_and_prints_its_id(chat_model, chat):
    endpoint = chat_model.endpoint
    assert (endpoint.protocol, endpoint.url, endpoint.remote_model, endpoint.secret_env) == (
        "openai", chat.url, "fake-chat", KEY)
    assert chat_model.artifact_path == "" and chat_model.status == "ready"
    with pytest.raises(CommandError, match="already has a model named"):
        call_command("register_endpoint", "--task", "sentiment", "--name", "fake-llm", "--protocol", "openai",
                     "--url", chat.url, stdout=io.StringIO())
    with pytest.raises(CommandError, match="No task"):
        call_command("register_endpoint", "--task", "nope", "--name", "x", "--protocol", "v2", "--url", chat.url)


@pytest.mark.parametrize("changes, field", [
    ({"protocol": "grpc"}, "protocol"),
    ({"url": "ftp://example.org"}, "url"),
    ({"url": "not a url"}, "url"),
    ({"secret_env": SECRET}, "secret_env"),  # a key where its variable's name belongs
    ({"protocol": "v2", "model": ""}, "model"),
    ({"model": "x" * 201}, "model"),
    ({"timeout_s": 0}, "timeout_s"),
    ({"max_concurrency": 0}, "max_concurrency"),
    ({"price_per_call": "-1"}, "price_per_call"),
    ({"name": ""}, "name"),
])
def test_bad_registrations_are_refused_and_nothing_is_stored(sentiment, settings, changes, field):
    local_endpoints(settings)
    values = {"name": "remote", "protocol": "openai", "url": "http://127.0.0.1:9/", "model": "m",
              "secret_env": KEY, **changes}
    with pytest.raises(InvalidInput) as caught:
        endpoints.register_endpoint(sentiment, **values)
    assert field in caught.value.errors
    assert not Endpoint.objects.exists() and not ModelVersion.objects.filter(name="remote").exists()


def test_writing_against_an_endpoint_target(target, client_for, annotator, chat):
    client = client_for(annotator)
    response = write(client, "What a delight of a film.", label="negative")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["prediction"] == "positive" and body["fooled"] is True and body["model"] == "fake-llm"
    example = Example.objects.get(pk=body["id"])
    member = example.model_predictions[str(target.pk)]
    assert member["endpoint"]["raw"] == "positive" and member["endpoint"]["prompt_tokens"] > 0
    assert member["endpoint"]["completion_tokens"] == 1 and member["endpoint"]["latency_ms"] > 0
    assert signature_ok(example)
    tampered = Example.objects.get(pk=example.pk)
    tampered.model_predictions[str(target.pk)]["endpoint"]["raw"] = "negative"
    assert not signature_ok(tampered)  # the raw answer is signed with the example

    usage = EndpointUsage.objects.get(endpoint=target.endpoint, round=example.round)
    assert usage.calls == 1 and usage.prompt_tokens == member["endpoint"]["prompt_tokens"]
    assert usage.cost == Decimal("0.01") + Decimal("0.5") * usage.prompt_tokens / 1000
    assert chat.requests[-1]["body"]["temperature"] == 0


def test_the_secret_is_never_stored_logged_or_answered(target, client_for, annotator, researcher, chat, caplog):
    caplog.set_level(logging.DEBUG)
    assert write(client_for(annotator), "A fine film.").status_code == 201
    chat.fail("503", "503", "503", "503", "503")
    assert write(client_for(annotator), "Another film.").status_code == 503
    chat.api_key = "sk-rotated"  # the server now refuses the old key, and its error echoes it
    refused = write(client_for(annotator), "Third film.")
    assert refused.status_code == 503 and "refused the key (HTTP 401)" in refused.json()["detail"]
    assert SECRET not in refused.content.decode() and "Incorrect API key" not in refused.content.decode()
    owner = client_for(researcher)
    answers = [owner.get(f"/api/models/{target.pk}/").content.decode(),
               owner.get("/api/tasks/sentiment/models/").content.decode(), refused.content.decode()]
    stored = serializers.serialize("json", [*ModelVersion.objects.all(), *Endpoint.objects.all(),
                                            *EndpointUsage.objects.all(), *Example.objects.all()])
    for text in [*answers, stored, caplog.text]:
        assert SECRET not in text
    assert f'"secret_env": "{KEY}"' in stored  # only its name in the key map


def test_failures_are_a_clear_503_and_nothing_is_stored(target, client_for, annotator, chat, settings):
    settings.INFERENCE_TIMEOUT = 1.5
    chat.fail(*["503"] * 20)
    response = write(client_for(annotator), "A film.")
    assert response.status_code == 503 and response.has_header("Retry-After")
    detail = response.json()["detail"]
    assert "fake-llm could not answer" in detail and "Nothing was stored" in detail
    assert not Example.objects.exists()
    assert EndpointUsage.objects.get(endpoint=target.endpoint, round__number=1).failed_calls == 1
    chat.faults.clear()
    chat.fail("timeout", "timeout", "timeout")
    Endpoint.objects.filter(pk=target.endpoint.pk).update(timeout_s=0.4)
    response = write(client_for(annotator), "A film.")
    assert response.status_code == 503 and not Example.objects.exists()
    chat.faults.clear()
    chat.fail("drop", "429")  # transient: retried within the wait
    assert write(client_for(annotator), "A film.").status_code == 201


def test_an_unset_secret_is_a_503_that_names_the_key(target, client_for, annotator, monkeypatch, chat):
    monkeypatch.delenv(ENV)
    response = write(client_for(annotator), "A film.")
    detail = response.json()["detail"]
    assert response.status_code == 503 and f"key '{KEY}'" in detail and "unset" in detail
    assert ENV not in detail  # the operator's variable is not the researcher's business
    assert not Example.objects.exists() and chat.requests == []


def test_an_answer_that_cannot_be_read_fools_the_model_only_where_the_task_says_so(
        target, sentiment, client_for, annotator, chat):
    chat.answer = lambda text: "Hard to say!"
    response = write(client_for(annotator), "A film.", label="negative")
    assert response.status_code == 201
    example = Example.objects.get(pk=response.json()["id"])
    assert example.prediction["unparseable"] is True and example.fooled is False
    assert response.json()["prediction"] is None
    assert response.json()["unreadable_answer"] == "Hard to say!"
    assert EndpointUsage.objects.get(endpoint=target.endpoint, round=example.round).unparseable == 1
    sentiment.config = {**sentiment.config, "endpoint_models": {"unparseable_is_error": True}}
    sentiment.save()
    response = write(client_for(annotator), "A film.", label="negative")
    assert response.json()["fooled"] is True


def test_the_round_budget_is_a_superusers_and_stops_the_endpoint(target, client_for, annotator, researcher,
                                                                 superuser, chat):
    Endpoint.objects.filter(pk=target.endpoint.pk).update(price_per_1k_prompt_tokens=None)  # 0.01 a call
    endpoint = Endpoint.objects.get(pk=target.endpoint.pk)
    with pytest.raises(Forbidden):
        endpoint_budgets.set_round_budget(endpoint, "0.02", researcher)
    endpoint_budgets.set_round_budget(endpoint, "0.02", superuser)
    assert [write(client_for(annotator), "A film.").status_code for _ in range(2)] == [201, 201]
    usage = EndpointUsage.objects.get(endpoint=endpoint, round__number=1)
    assert usage.cost == Decimal("0.02") and usage.reserved == 0
    asked = len(chat.requests)
    response = write(client_for(annotator), "A film.")
    assert response.status_code == 503 and "budget" in response.json()["detail"]
    assert len(chat.requests) == asked  # refused before any call
    endpoint_budgets.set_round_budget(endpoint, None, superuser)  # back to ENDPOINT_DEFAULT_BUDGET (10.00)
    assert write(client_for(annotator), "A film.").status_code == 201


def test_concurrency_is_bounded(target, settings):
    settings.INFERENCE_REPLY_URL = ""
    endpoint = target.endpoint
    endpoint.max_concurrency = 1
    endpoint.save()
    with endpoints._slot(endpoint, wait=0), pytest.raises(endpoints.EndpointUnavailable, match="in flight"):
        endpoints.predict(endpoint, target.task.parsed_config, [{"statement": "x"}], budget=0.2)


def test_why_for_an_endpoint_is_occlusion_or_not_available(target, sentiment, client_for, annotator, chat):
    client = client_for(annotator)
    example_id = write(client, "A dull film.", label="positive").json()["id"]
    asked = len(chat.requests)
    response = client.post(f"/api/examples/{example_id}/explanation/", {}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["method"] == "occlusion" and body["convergence_delta"] is None
    heat = {w["text"]: w["attribution"] for w in body["words"]}
    assert heat["dull"] == 1.0 and heat["A"] == 0.0 and {w["field"] for w in body["words"]} == {"statement"}
    assert len(chat.requests) - asked == 4  # the input and each of its three words left out
    assert client.post(f"/api/examples/{example_id}/explanation/", {}, format="json").status_code == 200
    assert len(chat.requests) - asked == 4  # cached
    sentiment.config = {**sentiment.config, "endpoint_models": {"occlusion_max_calls": 0}}
    sentiment.save()
    other = write(client, "A fine film.").json()["id"]
    refused = client.post(f"/api/examples/{other}/explanation/", {}, format="json")
    assert refused.status_code == 409 and "not available" in refused.json()["detail"]


def test_a_health_check_comes_before_promotion(sentiment, chat_model, chat):
    endpoint = chat_model.endpoint
    report = endpoints.health_check(endpoint, sentiment.parsed_config)
    assert report["probes"] == 1
    endpoint.refresh_from_db()
    assert endpoint.healthy_at is not None
    chat.answer = lambda text: "I would rather not say."
    with pytest.raises(Conflict, match="not in the task's answer format"):
        endpoints.health_check(endpoint, sentiment.parsed_config)
    chat.answer = lambda text: "positive"
    chat.fail(*["timeout"] * 5)
    Endpoint.objects.filter(pk=endpoint.pk).update(timeout_s=0.3)
    endpoint.refresh_from_db()
    with pytest.raises(Conflict, match="health check"):
        endpoints.health_check(endpoint, sentiment.parsed_config)
    chat.faults.clear()
    with pytest.raises(Conflict, match="no finished evaluation"):
        promotion.check_promotable(sentiment, [chat_model])


def test_evaluated_and_ranked_like_any_model(sentiment, chat_model, client_for, researcher,
                                             django_capture_on_commit_callbacks):
    static = sentiment.open_round()
    texts = [("A delight.", "positive"), ("Dull and bad.", "negative"), ("Awful acting.", "negative"),
             ("Lovely.", "positive"), ("Great fun.", "negative")]
    for i, (text, label) in enumerate(texts):
        Example.objects.create(task=sentiment, round=static, split="test", inputs={"statement": text},
                               target={"label": label}, source="import", validation_status="verified",
                               external_uid=f"t{i}")
    owner = client_for(researcher)
    with django_capture_on_commit_callbacks(execute=True):
        assert owner.post(f"/api/models/{chat_model.pk}/evaluate/").status_code == 202
    evaluation = Evaluation.objects.get(model_version=chat_model, round=static)
    assert evaluation.metrics["accuracy"] == pytest.approx(0.8)
    assert evaluation.metrics["memory_mb"] is None and evaluation.metrics["remote"] == ["memory_mb", "parameters_mb"]
    assert evaluation.metrics["robustness"] is not None
    board = owner.get("/api/tasks/sentiment/leaderboard/").json()
    [row] = [r for r in board["rows"] if r["model"]["name"] == "fake-llm"]
    assert row["remote_metrics"] == ["memory"] and "memory" not in row["metrics"]
    assert row["metrics"]["performance"]["value"] == pytest.approx(0.8) and row["dynascore"] is not None
    usage = EndpointUsage.objects.get(endpoint=chat_model.endpoint, round=None)
    assert usage.calls >= len(texts)


def test_unreadable_answers_are_left_out_of_the_scores_unless_the_task_counts_them(sentiment, chat_model, chat):
    static = sentiment.open_round()
    for i, text in enumerate(["A delight.", "Lovely.", "Great fun."]):
        Example.objects.create(task=sentiment, round=static, split="test", inputs={"statement": text},
                               target={"label": "positive"}, source="import", validation_status="verified",
                               external_uid=f"u{i}")
    chat.answer = lambda text: "positive" if "Lovely" not in text else "no idea"
    [evaluation] = evaluate_model(chat_model, [static], measure=False)
    assert evaluation.metrics["unparseable"] == 1 and evaluation.num_examples == 2
    assert evaluation.metrics["accuracy"] == 1.0
    sentiment.config = {**sentiment.config, "endpoint_models": {"unparseable_is_error": True}}
    sentiment.save()
    chat_model.task.refresh_from_db()
    [evaluation] = evaluate_model(chat_model, [static], measure=False)
    assert evaluation.num_examples == 3 and evaluation.metrics["accuracy"] == pytest.approx(2 / 3)
    assert json.dumps(evaluation.metrics)  # stored as JSON


def test_an_endpoint_in_an_ensemble_with_a_local_model(target, sentiment, tiny_artifacts, client_for, annotator):
    import ml
    from registry.services import ref_for, register_model

    local = register_model(sentiment, tiny_artifacts["sentiment"], name="local-tiny")
    rnd = sentiment.open_round()
    rnd.target_models.add(local)
    Round.objects.filter(pk=rnd.pk).update(ensemble_mode=Round.EnsembleMode.MEAN)
    response = write(client_for(annotator), "What a delight.", label="negative")
    assert response.status_code == 201, response.content
    example = Example.objects.get(pk=response.json()["id"])
    assert set(example.model_predictions) == {str(local.pk), str(target.pk)}
    [mine] = ml.predict(ref_for(local), [{"statement": "What a delight."}])
    expected = {label: (p + (label == "positive")) / 2 for label, p in mine["probabilities"].items()}
    assert example.prediction["probabilities"] == pytest.approx(expected)
    assert example.prediction["label"] == max(expected, key=expected.get) and signature_ok(example)


def test_an_unreadable_member_is_left_out_of_the_ensembles_answer():
    from annotation.remote import combine

    readable = {"label": "negative", "probabilities": {"negative": 0.7, "positive": 0.3}}
    unreadable = {"label": None, "probabilities": {"negative": 0.0, "positive": 0.0}, "unparseable": True,
                  "endpoint": {"raw": "?"}}
    assert combine([readable, unreadable], qa=False) == readable
    assert combine([unreadable, unreadable], qa=False)["unparseable"] is True
    spans = [{"answer": "a", "start": 0, "end": 1, "score": 0.2}, {"answer": "b", "start": 2, "end": 3, "score": 0.9}]
    assert combine(spans, qa=True)["answer"] == "b"


def test_the_rate_limit_refuses_beyond_its_requests_a_minute(target, client_for, annotator, chat, monkeypatch):
    import time
    from types import SimpleNamespace

    clock = SimpleNamespace(time=lambda: 6_000_030.0, monotonic=time.monotonic, sleep=time.sleep)
    monkeypatch.setattr(endpoints, "time", clock)  # one minute, whatever the wall clock does
    Endpoint.objects.filter(pk=target.endpoint.pk).update(rate_limit_per_minute=2)
    client = client_for(annotator)
    assert [write(client, f"Film {i}.").status_code for i in range(2)] == [201, 201]
    asked = len(chat.requests)
    refused = write(client, "One more film.")
    assert refused.status_code == 503 and "limit of 2 requests a minute" in refused.json()["detail"]
    assert int(refused["Retry-After"]) == 30 and len(chat.requests) == asked and Example.objects.count() == 2
    clock.time = lambda: 6_000_090.0  # the next minute
    assert write(client, "One more film.").status_code == 201
