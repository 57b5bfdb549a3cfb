"""Bad input gets a 4xx with field-level messages, and nothing stored changes."""

import pytest

from annotation.models import AnnotationSession, Example
from tasks.models import Context, Round

pytestmark = pytest.mark.django_db


def snapshot():
    """Everything a bad request must leave as it was."""
    return (Example.objects.count(), list(Round.objects.order_by("pk").values_list("status", flat=True)),
            list(Context.objects.order_by("pk").values_list("times_fooled", flat=True)),
            list(AnnotationSession.objects.order_by("pk").values_list("examples_written", "examples_fooled")))


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
    body = response.json()
    assert body["code"] == "invalid" and message in " ".join(body["errors"][field])
    assert field in body["detail"]  # the message names the field
    assert snapshot() == before


def test_unknown_and_foreign_contexts(nli_client, live_tasks):
    client, _context = nli_client
    before = snapshot()
    foreign = Context.objects.filter(task=live_tasks["qa"]).first()
    for context_id in [999999, foreign.pk, "1; DROP TABLE", None]:
        response = post(client, "nli", context_id, {"hypothesis": "x"}, {"label": "neutral"})
        assert response.status_code == 400
        assert list(response.json()["errors"]) == ["context"]
    inactive = Context.objects.filter(task=live_tasks["nli"]).last()
    inactive.is_active = False
    inactive.save()
    response = post(client, "nli", inactive.pk, {"hypothesis": "x"}, {"label": "neutral"})
    assert response.status_code == 400 and "not an active context" in response.json()["errors"]["context"][0]
    assert snapshot() == before


@pytest.mark.parametrize("strategy", ["least_used", "uniform", "least_fooled"])
def test_no_open_round_serves_no_context_whatever_the_strategy(live_tasks, client_for, annotator, strategy):
    """The candidates' query leaves the open round's check to the row it chose: with the
    round closed, every strategy answers 409 and counts no serving."""
    from tasks.services import close_round

    task = live_tasks["nli"]
    task.config = {**task.config, "context_sampling": strategy}
    task.save()
    client = client_for(annotator)
    close_round(task.open_round())
    used = list(Context.objects.filter(task=task).order_by("pk").values_list("times_used", flat=True))
    response = client.get("/api/tasks/nli/contexts/next/")
    assert response.status_code == 409 and "no open round" in response.json()["detail"]
    assert list(Context.objects.filter(task=task).order_by("pk").values_list("times_used", flat=True)) == used


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
    ({"text": "", "start": 0}, "target.text"),
    ({"text": "a", "start": "zero"}, "target.start"),
    ({"label": "x"}, "target.text"),
])
def test_bad_qa_spans(live_tasks, client_for, annotator, target, field):
    client = client_for(annotator)
    context = client.get("/api/tasks/qa/contexts/next/").json()
    before = snapshot()
    response = post(client, "qa", context["id"], {"question": "What?"}, target)
    assert response.status_code == 400, response.content
    assert field in response.json()["errors"]
    assert snapshot() == before


@pytest.mark.parametrize("target", [
    {"text": "purple elephants", "start": None},  # what the page sends for an answer it did not find
    {"text": "purple elephants"},
    {"text": "purple elephants", "start": 3},
])
def test_an_answer_not_in_the_passage_is_told_it_must_be_a_span(live_tasks, client_for, annotator, target):
    client = client_for(annotator)
    context = client.get("/api/tasks/qa/contexts/next/").json()
    before = snapshot()
    response = post(client, "qa", context["id"], {"question": "What colour was the sky?"}, target)
    assert response.status_code == 400, response.content
    body = response.json()
    assert list(body["errors"]) == ["target.text"]
    [message] = body["errors"]["target.text"]
    assert message.startswith("The answer must be a span of the passage") and "'purple elephants'" in message
    assert "null" not in body["detail"] and body["detail"].startswith("target.text: ")  # it names the field
    assert snapshot() == before


def test_a_passage_text_without_its_offset_says_where_it_is(live_tasks, client_for, annotator):
    client = client_for(annotator)
    context = client.get("/api/tasks/qa/contexts/next/").json()
    passage = context["fields"]["passage"]
    answer = max(passage.split(), key=len)
    before = snapshot()
    for target in ({"text": answer, "start": None}, {"text": answer, "start": passage.index(answer) + 1}):
        response = post(client, "qa", context["id"], {"question": "Which word?"}, target)
        assert response.status_code == 400, response.content
        [message] = response.json()["errors"]["target.start"]
        assert f"first occurs at {passage.index(answer)}" in message
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
    from annotation import examples
    from tasks.services import close_round

    client, context = nli_client
    answer = examples.predict_with

    def close_then_answer(model_ids, rows, **where):  # the real pass, after a researcher closes the round
        close_round(live_tasks["nli"].open_round())
        return answer(model_ids, rows, **where)

    monkeypatch.setattr(examples, "predict_with", close_then_answer)
    before = snapshot()
    times_fooled = Context.objects.get(pk=context["id"]).times_fooled
    response = post(client, "nli", context["id"], {"hypothesis": "x"}, {"label": "neutral"})
    assert response.status_code == 409 and "closed while the model was answering" in response.json()["detail"]
    after = snapshot()
    assert (after[0], after[2], after[3]) == (before[0], before[2], before[3])  # only the round changed
    assert Context.objects.get(pk=context["id"]).times_fooled == times_fooled
    assert AnnotationSession.objects.get(task__slug="nli").examples_written == 0
    assert response["Content-Type"] == "application/json"


def test_a_single_context_is_served_again(live_tasks, client_for, annotator):
    task = live_tasks["nli"]
    only = Context.objects.filter(task=task).order_by("pk").first()
    Context.objects.filter(task=task).exclude(pk=only.pk).update(is_active=False)
    client = client_for(annotator)
    served = [client.get("/api/tasks/nli/contexts/next/").json()["id"] for _ in range(3)]
    assert served == [only.pk] * 3


def test_a_qa_task_judged_by_exact_match_works(live_tasks, client_for, annotator):
    """``model_wrong_metric: exact_match`` on a QA task: fooled means no SQuAD exact match."""
    from ml.metrics import exact_match

    task = live_tasks["qa"]
    task.config = {**task.config, "model_wrong_metric": {"type": "exact_match"}}
    task.save()
    client = client_for(annotator)
    context = client.get("/api/tasks/qa/contexts/next/").json()
    passage = context["fields"]["passage"]
    answer = passage.split()[2]
    response = post(client, "qa", context["id"], {"question": "Which word is third?"},
                    {"text": answer, "start": passage.index(answer)})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["fooled"] == (exact_match(body["prediction"], answer) < 1.0)


def test_a_broken_model_answers_503_with_the_reason_and_stores_nothing(live_tasks, client_for, annotator):
    """A model whose artifact is gone (or corrupt) is a 503 that says why, never a 500."""
    import shutil

    import ml

    model = live_tasks["sentiment"].open_round().target_models.get()
    ml.default_cache().clear()
    backup = model.artifact_dir.with_name(model.artifact_dir.name + "-moved")
    shutil.move(model.artifact_dir, backup)
    try:
        client = client_for(annotator)
        context = client.get("/api/tasks/sentiment/contexts/next/").json()
        before = snapshot()
        response = post(client, "sentiment", context["id"], {"statement": "Lovely."}, {"label": "positive"})
    finally:
        shutil.move(backup, model.artifact_dir)
    assert response.status_code == 503, response.content
    body = response.json()
    assert body["code"] == "unavailable"
    assert "ArtifactError" in body["detail"] and "nothing was stored" in body["detail"]
    assert int(response["Retry-After"]) > 0
    assert snapshot() == before


@pytest.mark.parametrize("body, status, fragment", [
    ("[" * 5000 + "]" * 5000, 400, "nested deeper than"),
    ('{"context": 1, "inputs": ' + "[" * 40 + "]" * 40 + "}", 400, "nested deeper than"),
    ('{"context": NaN, "inputs": {}, "target": {}}', 400, "JSON parse error"),
    ("{not json", 400, "JSON parse error"),
    ('"just a string"', 400, "Invalid data"),
    ("[1, 2]", 400, "Invalid data"),
])
def test_unreadable_or_deeply_nested_json_is_a_400(nli_client, body, status, fragment):
    client, _context = nli_client
    before = snapshot()
    response = client.generic("POST", "/api/tasks/nli/examples/", body, content_type="application/json")
    assert response.status_code == status, response.content
    assert fragment in response.json()["detail"]
    assert snapshot() == before


def test_an_oversized_body_is_a_413(nli_client, settings):
    client, context = nli_client
    settings.API_MAX_BODY_BYTES = 10_000
    before = snapshot()
    huge = {"context": context["id"], "inputs": {"hypothesis": "x" * 20_000}, "target": {"label": "neutral"}}
    response = client.post("/api/tasks/nli/examples/", huge, format="json")
    assert response.status_code == 413 and response.json()["code"] == "too_large"
    assert snapshot() == before
    # A form body over Django's own limit (the token endpoint reads forms) gets 413 too, not a 400 page.
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = client.post("/api/auth/token/", {"username": "u", "password": "y" * 5000})
    assert response.status_code == 413 and response.json()["code"] == "too_large"


def test_a_body_in_another_media_type_is_a_415(nli_client):
    client, context = nli_client
    before = snapshot()
    response = client.post("/api/tasks/nli/examples/", {"context": str(context["id"]), "inputs": "x"})
    assert response.status_code == 415 and response.json()["code"] == "unsupported_media_type"
    assert snapshot() == before


def test_an_unknown_api_url_is_a_json_404(nli_client):
    client, _context = nli_client
    for path in ("/api/nope/", "/api/tasks/a b/", "/api/examples/-1/retract/"):
        response = client.get(path)
        assert response.status_code == 404 and response.json()["code"] == "not_found", path


def test_text_with_nul_characters_is_refused(nli_client):
    client, context = nli_client
    before = snapshot()
    response = post(client, "nli", context["id"], {"hypothesis": "a\x00b"}, {"label": "neutral"})
    assert response.status_code == 400 and "nul" in response.json()["errors"]["inputs.hypothesis"][0].lower()
    assert snapshot() == before


@pytest.mark.parametrize("charset", ["bz2", "zlib", "rot13", "base64", "quopri", "no-such-codec"])
def test_a_charset_that_is_not_a_text_encoding_is_a_415_never_a_500(nli_client, charset):
    """Python's codec registry knows compressors: a 100-byte bz2 body must not inflate past
    the size limit, and junk in such a charset must not crash the parser."""
    import bz2
    import json

    client, context = nli_client
    before = snapshot()
    body = {"context": context["id"], "inputs": {"hypothesis": "x" * 20_000}, "target": {"label": "neutral"}}
    compressed = bz2.compress(json.dumps(body).encode())
    for payload in (compressed, b"junk"):
        response = client.generic("POST", "/api/tasks/nli/examples/", payload,
                                  content_type=f"application/json; charset={charset}")
        assert response.status_code == 415, (charset, response.status_code, response.content[:200])
        assert response["Content-Type"] == "application/json" and charset in response.json()["detail"]
    # The token endpoint reads forms too, before any sign-in; so do the pages.
    response = client.generic("POST", "/api/auth/token/", b"username=a&password=b",
                              content_type=f"application/x-www-form-urlencoded; charset={charset}")
    assert response.status_code == 415
    response = client.generic("POST", "/accounts/login/", b"username=a&password=b",
                              content_type=f"application/x-www-form-urlencoded; charset={charset}")
    assert response.status_code == 415 and response["Content-Type"].startswith("text/plain")
    assert snapshot() == before


def test_json_in_utf16_is_read(nli_client):
    import json

    client, context = nli_client
    body = json.dumps({"context": context["id"], "inputs": {"hypothesis": "Wide chars ✓"},
                       "target": {"label": "neutral"}}).encode("utf-16")
    response = client.generic("POST", "/api/tasks/nli/examples/", body, content_type="application/json; charset=utf-16")
    assert response.status_code == 201, response.content
    assert Example.objects.get(pk=response.json()["id"]).inputs == {"hypothesis": "Wide chars ✓"}


def test_a_lone_surrogate_beside_an_idempotency_key_is_no_500(nli_client):
    client, context = nli_client
    body = ('{"context": ' + str(context["id"]) +
            ', "inputs": {"hypothesis": "fine"}, "target": {"label": "neutral"}, "x": "\\ud800"}')
    response = client.generic("POST", "/api/tasks/nli/examples/", body, content_type="application/json",
                              HTTP_IDEMPOTENCY_KEY="k-surrogate")
    assert response.status_code == 201, response.content
