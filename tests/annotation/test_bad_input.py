"""Bad input gets a 4xx with field-level messages, and nothing stored changes."""

import pytest

from annotation.models import Example
from tasks.models import Context, Round

pytestmark = pytest.mark.django_db


def snapshot():
    rounds = list(Round.objects.order_by("pk").values_list("examples_collected", "examples_fooled"))
    return Example.objects.count(), rounds


@pytest.fixture
def nli_client(live_tasks, client_for, annotator):
    client = client_for(annotator)
    context = client.get("/api/tasks/nli/contexts/next/").json()
    return client, context


def post(client, slug, context_id, inputs, target):
    return client.post(f"/api/tasks/{slug}/examples/", {"context": context_id, "inputs": inputs, "target": target},
                       format="json")


@pytest.mark.parametrize("inputs, target, field, message", [
    ({"hypothesis": ""}, {"label": "neutral"}, "inputs.hypothesis", "Must not be empty."),
    ({"hypothesis": "   \n\t "}, {"label": "neutral"}, "inputs.hypothesis", "Must not be empty."),
    ({"hypothesis": "x" * 1001}, {"label": "neutral"}, "inputs.hypothesis", "at most 1000 characters (got 1001)"),
    ({"hypothesis": "fine"}, {"label": "maybe"}, "target.label", "'maybe' is not one of"),
    ({"hypothesis": "fine"}, {}, "target.label", "None is not one of"),
    ({"hypothesis": "fine", "extra": "x"}, {"label": "neutral"}, "inputs", "Unknown fields ['extra']"),
    ({}, {"label": "neutral"}, "inputs.hypothesis", "This field is required."),
])
def test_bad_classification_inputs(nli_client, inputs, target, field, message):
    client, context = nli_client
    before = snapshot()
    response = post(client, "nli", context["id"], inputs, target)
    assert response.status_code == 400, response.content
    assert message in " ".join(response.json()[field])
    assert snapshot() == before


def test_unknown_and_foreign_contexts(nli_client, live_tasks):
    client, _context = nli_client
    before = snapshot()
    foreign = Context.objects.filter(task=live_tasks["qa"]).first()
    for context_id in [999999, foreign.pk, "1; DROP TABLE", None]:
        response = post(client, "nli", context_id, {"hypothesis": "x"}, {"label": "neutral"})
        assert response.status_code == 400
        assert "context" in response.json()
    inactive = Context.objects.filter(task=live_tasks["nli"]).last()
    inactive.is_active = False
    inactive.save()
    response = post(client, "nli", inactive.pk, {"hypothesis": "x"}, {"label": "neutral"})
    assert response.status_code == 400 and "not an active context" in response.json()["context"][0]
    assert snapshot() == before


def test_closed_round_refuses_with_409(nli_client, live_tasks):
    client, context = nli_client
    from tasks.services import close_round

    close_round(live_tasks["nli"].open_round())
    before = snapshot()
    response = post(client, "nli", context["id"], {"hypothesis": "x"}, {"label": "neutral"})
    assert response.status_code == 409 and "no open round" in response.json()["detail"]
    assert client.get("/api/tasks/nli/contexts/next/").status_code == 409
    assert snapshot() == before


def test_unknown_task_is_404(nli_client):
    client, context = nli_client
    assert post(client, "nope", context["id"], {"hypothesis": "x"}, {"label": "neutral"}).status_code == 404


@pytest.mark.parametrize("target, field", [
    ({"text": "zzz-not-in-passage", "start": 0}, "target.text"),
    ({"text": "a", "start": -1}, "target.start"),
    ({"text": "a", "start": 10**6}, "target.start"),
    ({"text": "", "start": 0}, "target"),
    ({"text": "a", "start": "0"}, "target"),
    ({"label": "x"}, "target"),
])
def test_bad_qa_spans(live_tasks, client_for, annotator, target, field):
    client = client_for(annotator)
    context = client.get("/api/tasks/qa/contexts/next/").json()
    before = snapshot()
    response = post(client, "qa", context["id"], {"question": "What?"}, target)
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert snapshot() == before


def test_emoji_and_other_scripts_are_stored_exactly(live_tasks, client_for, annotator):
    client = client_for(annotator)
    context = client.get("/api/tasks/hate/contexts/next/").json()
    text = "Καλημέρα 世界 — ¡hola! 👩🏽‍🔬🏳️‍🌈 <img src=x onerror=alert(1)>"
    response = post(client, "hate", context["id"], {"statement": text}, {"label": "not-hateful"})
    assert response.status_code == 201, response.content
    assert Example.objects.get(pk=response.json()["id"]).inputs["statement"] == text


def test_throttling_answers_429_per_user(live_tasks, client_for, annotator, settings):
    from django.core.cache import cache
    from rest_framework.settings import api_settings
    from rest_framework.throttling import ScopedRateThrottle

    cache.clear()
    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "examples": "2/min"}
    original = ScopedRateThrottle.THROTTLE_RATES
    ScopedRateThrottle.THROTTLE_RATES = rates
    try:
        client = client_for(annotator)
        context = client.get("/api/tasks/nli/contexts/next/").json()
        codes = [post(client, "nli", context["id"], {"hypothesis": f"try {i}"}, {"label": "neutral"}).status_code
                 for i in range(3)]
    finally:
        ScopedRateThrottle.THROTTLE_RATES = original
        cache.clear()
    assert codes == [201, 201, 429]
    assert Example.objects.count() == 2


def test_no_model_answer_is_a_clear_503(live_tasks, client_for, annotator):
    live_tasks["nli"].open_round().target_models.clear()
    client = client_for(annotator)
    context = client.get("/api/tasks/nli/contexts/next/").json()
    before = snapshot()
    response = post(client, "nli", context["id"], {"hypothesis": "x"}, {"label": "neutral"})
    assert response.status_code == 503 and "no target model" in response.json()["detail"]
    assert snapshot() == before


def test_round_closed_while_the_model_answers_stores_nothing(nli_client, live_tasks, monkeypatch):
    from annotation import services
    from annotation.models import AnnotationSession
    from tasks.services import close_round

    client, context = nli_client
    answer = services.predict_with

    def close_then_answer(model_ids, rows):
        close_round(live_tasks["nli"].open_round())
        return answer(model_ids, rows)

    monkeypatch.setattr(services, "predict_with", close_then_answer)
    before = snapshot()
    times_fooled = Context.objects.get(pk=context["id"]).times_fooled
    response = post(client, "nli", context["id"], {"hypothesis": "x"}, {"label": "neutral"})
    assert response.status_code == 409 and "closed while the model was answering" in response.json()["detail"]
    assert snapshot() == before
    assert Context.objects.get(pk=context["id"]).times_fooled == times_fooled
    assert AnnotationSession.objects.get(task__slug="nli").examples_written == 0


def test_a_single_context_is_served_again(live_tasks, client_for, annotator):
    task = live_tasks["nli"]
    only = Context.objects.filter(task=task).order_by("pk").first()
    Context.objects.filter(task=task).exclude(pk=only.pk).update(is_active=False)
    client = client_for(annotator)
    served = [client.get("/api/tasks/nli/contexts/next/").json()["id"] for _ in range(3)]
    assert served == [only.pk] * 3
