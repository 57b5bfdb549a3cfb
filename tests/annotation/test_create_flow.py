"""The create flow through the API: context, example, prediction, explanation, retract, flag."""

import pytest

from annotation.examples import signature_ok
from annotation.models import AnnotationSession, Example
from annotation.stats import round_stats
from tasks.models import Context, Round

pytestmark = pytest.mark.django_db


def next_context(client, slug):
    response = client.get(f"/api/tasks/{slug}/contexts/next/")
    assert response.status_code == 200, response.content
    return response.json()


def test_nli_create_flow_end_to_end(live_tasks, client_for, annotator):
    client = client_for(annotator)
    context = next_context(client, "nli")
    assert set(context["fields"]) == {"premise"} and context["round"] == 1
    response = client.post("/api/tasks/nli/examples/", {
        "context": context["id"], "inputs": {"hypothesis": "Nobody was there <b>at all</b> 🙂"},
        "target": {"label": "contradiction"},
    }, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) >= {"id", "prediction", "probabilities", "fooled", "model", "latency_ms"}
    assert body["prediction"] in ("entailment", "neutral", "contradiction")
    assert sum(body["probabilities"].values()) == pytest.approx(1, abs=1e-4)
    assert body["fooled"] == (body["prediction"] != "contradiction")
    assert body["model"] == "nli-tiny" and body["latency_ms"] > 0
    assert body["session"] == {"examples_written": 1, "examples_fooled": int(body["fooled"]), "validations_done": 0}

    example = Example.objects.get(pk=body["id"])
    assert example.inputs == {"hypothesis": "Nobody was there <b>at all</b> 🙂"}  # stored as typed
    assert example.annotator == annotator and example.context_id == context["id"]
    assert example.prediction["label"] == body["prediction"]
    assert list(example.model_predictions) == [str(body["models"][0])]
    assert signature_ok(example)
    for field, value in [("prediction", {**example.prediction, "label": "tampered"}), ("fooled", not example.fooled),
                         ("target", {"label": "neutral"}), ("inputs", {"hypothesis": "edited"})]:
        tampered = Example.objects.get(pk=example.pk)
        setattr(tampered, field, value)
        assert not signature_ok(tampered), field

    stats = round_stats(Round.objects.get(task__slug="nli", number=1))
    assert stats["collected"] == 1 and stats["fooled"] == int(body["fooled"])
    assert Context.objects.get(pk=context["id"]).times_used == 1

    # The label the model gave is not fooling; any other label is.
    other = next_context(client, "nli")
    right = client.post("/api/tasks/nli/examples/", {
        "context": other["id"], "inputs": {"hypothesis": "Same words, same model."},
        "target": {"label": "neutral"}}, format="json").json()
    again = client.post("/api/tasks/nli/examples/", {
        "context": other["id"], "inputs": {"hypothesis": "Same words, same model."},
        "target": {"label": right["prediction"]}}, format="json").json()
    assert again["prediction"] == right["prediction"] and again["fooled"] is False


def test_explanation_retract_and_flag(live_tasks, client_for, annotator, second_annotator):
    client = client_for(annotator)
    context = next_context(client, "sentiment")
    created = client.post("/api/tasks/sentiment/examples/", {
        "context": context["id"], "inputs": {"statement": "Not bad at all, honestly 😍!!"},
        "target": {"label": "positive"}}, format="json").json()

    # Only the author may explain or retract.
    other = client_for(second_annotator)
    assert other.post(f"/api/examples/{created['id']}/explanation/", {}, format="json").status_code == 403
    assert other.post(f"/api/examples/{created['id']}/retract/").status_code == 403

    explanation = client.post(f"/api/examples/{created['id']}/explanation/", {"n_steps": 5}, format="json")
    assert explanation.status_code == 200, explanation.content
    data = explanation.json()
    statement = "Not bad at all, honestly 😍!!"
    assert data["target"] == created["prediction"] and data["n_steps"] == 5
    words = [w for w in data["words"] if w["field"] == "statement"]
    assert [w["text"] for w in words][:3] == ["Not", "bad", "at"]
    for word in words:
        assert statement[word["start"]:word["end"]] == word["text"]
        assert -1 <= word["heat"] <= 1
    assert any("😍" in w["text"] for w in words)
    for bad in (0, 8, "10", True):  # a few allowed values only: alternating ones cannot defeat the cache
        refused = client.post(f"/api/examples/{created['id']}/explanation/", {"n_steps": bad}, format="json")
        assert refused.status_code == 400 and "n_steps" in refused.json()["errors"], bad

    flagged = client.post(f"/api/examples/{created['id']}/flag/", {"reason": "typo in my label"}, format="json")
    assert flagged.status_code == 200 and flagged.json()["flagged"] is True

    rnd = Round.objects.get(task__slug="sentiment", number=1)
    assert round_stats(rnd)["collected"] == 1
    retracted = client.post(f"/api/examples/{created['id']}/retract/")
    assert retracted.status_code == 200 and retracted.json()["retracted"] is True
    assert (round_stats(rnd)["collected"], round_stats(rnd)["fooled"]) == (0, 0)


def test_qa_example_with_a_span(live_tasks, client_for, annotator):
    client = client_for(annotator)
    context = next_context(client, "qa")
    passage = context["fields"]["passage"]
    answer = passage.split()[3]
    start = passage.index(answer)
    response = client.post("/api/tasks/qa/examples/", {
        "context": context["id"], "inputs": {"question": "Which word comes fourth?"},
        "target": {"text": answer, "start": start}}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["probabilities"] is None
    assert passage[body["span"]["start"]:body["span"]["end"]] == body["prediction"]
    from ml.metrics import f1

    assert body["fooled"] == (f1(body["prediction"], answer) < 0.4)


def test_nobody_gets_the_same_context_twice_in_a_row(live_tasks, client_for, annotator):
    client = client_for(annotator)
    seen = [next_context(client, "hate")["id"] for _ in range(12)]
    assert all(a != b for a, b in zip(seen, seen[1:], strict=False))
    # least_used spreads the load: 12 draws over 30 contexts use 12 different ones.
    assert len(set(seen)) == 12


@pytest.mark.parametrize("strategy", ["uniform", "least_fooled"])
def test_other_sampling_strategies(live_tasks, client_for, annotator, strategy):
    task = live_tasks["nli"]
    task.config = {**task.config, "context_sampling": strategy}
    task.save()
    client = client_for(annotator)
    seen = [next_context(client, "nli")["id"] for _ in range(6)]
    assert all(a != b for a, b in zip(seen, seen[1:], strict=False))


@pytest.mark.parametrize("gone", ["deactivated", "deleted"])
def test_a_context_that_goes_away_while_it_is_chosen_is_not_served(live_tasks, annotator, monkeypatch, gone):
    """A context deactivated or deleted between the read of the candidates and the
    serving's count is not served, and another one is."""
    import random

    from annotation import contexts, sessions

    task = live_tasks["hate"]
    session = sessions.start_session(annotator, task)
    chosen = []
    real_choice = random.choice

    def choose_then_remove(rows):
        row = real_choice(rows)
        if not chosen:  # the first pick goes away before it is counted
            queryset = Context.objects.filter(pk=row.pk)
            queryset.update(is_active=False) if gone == "deactivated" else queryset.delete()
        chosen.append(row.pk)
        return row

    monkeypatch.setattr(contexts.random, "choice", choose_then_remove)
    served = contexts.next_context(task, session)
    assert len(chosen) == 2 and served.pk == chosen[1] != chosen[0]
    assert served.is_active and served.round_number == task.open_round().number
    assert AnnotationSession.objects.get(pk=session.pk).last_context_id == served.pk
    assert Context.objects.get(pk=served.pk).times_used == 1


def test_the_session_token_authenticates_without_cookies(live_tasks, client_for, annotator, anonymous):
    token = client_for(annotator).post("/api/tasks/nli/sessions/").json()["token"]
    anonymous.credentials(HTTP_X_DYNABENCH_TOKEN=token)
    context = anonymous.get("/api/tasks/nli/contexts/next/").json()
    response = anonymous.post("/api/tasks/nli/examples/", {
        "context": context["id"], "inputs": {"hypothesis": "Through the header."},
        "target": {"label": "neutral"}}, format="json")
    assert response.status_code == 201
    session = AnnotationSession.objects.get(user=annotator, task__slug="nli")
    assert session.examples_written == 1 and response.json()["session"]["examples_written"] == 1


@pytest.mark.parametrize("token", ["forged", "abc:def:ghi"])
def test_forged_tokens_are_refused(live_tasks, anonymous, token):
    anonymous.credentials(HTTP_X_DYNABENCH_TOKEN=token)
    response = anonymous.get("/api/tasks/nli/contexts/next/")
    assert response.status_code == 401
    assert "not valid" in response.json()["detail"]


def test_expired_tokens_are_refused(live_tasks, annotator, anonymous, settings):
    """A token expires a fixed time after its session began, however recently it was signed."""
    from datetime import timedelta

    from django.utils import timezone

    from annotation.sessions import start_session
    from annotation.tokens import make_token

    session = start_session(annotator, live_tasks["nli"])
    AnnotationSession.objects.filter(pk=session.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.ANNOTATION_SESSION_MAX_AGE + 1))
    anonymous.credentials(HTTP_X_DYNABENCH_TOKEN=make_token(session))  # signed just now
    response = anonymous.get("/api/tasks/nli/contexts/next/")
    assert response.status_code == 401 and "expired" in response.json()["detail"]
    AnnotationSession.objects.filter(pk=session.pk).update(
        created_at=timezone.now() - timedelta(seconds=settings.ANNOTATION_SESSION_MAX_AGE - 60))
    assert anonymous.get("/api/tasks/nli/contexts/next/").status_code == 200


def test_anonymous_visitors_cannot_annotate(live_tasks, anonymous):
    assert anonymous.get("/api/tasks/nli/contexts/next/").status_code == 401
    response = anonymous.post("/api/tasks/nli/examples/", {}, format="json")
    assert response.status_code == 401
    assert response.json()["code"] == "not_authenticated"
    assert Example.objects.count() == 0


def test_an_ensemble_round_averages_its_models(live_tasks, other_sentiment_artifact, client_for, annotator):
    """Two different target models in mean mode: the stored prediction is the mean of the members'."""
    from registry.services import register_model

    task = live_tasks["sentiment"]
    rnd = task.open_round()
    second = register_model(task, other_sentiment_artifact, name="sentiment-tiny-2")
    rnd.target_models.add(second)
    rnd.ensemble_mode = Round.EnsembleMode.MEAN
    rnd.save()
    client = client_for(annotator)
    context = next_context(client, "sentiment")
    body = client.post("/api/tasks/sentiment/examples/", {
        "context": context["id"], "inputs": {"statement": "Two heads are better than one."},
        "target": {"label": "positive"}}, format="json").json()
    example = Example.objects.get(pk=body["id"])
    assert len(body["models"]) == 2 and body["model"] == "sentiment-tiny + sentiment-tiny-2"
    members = list(example.model_predictions.values())
    assert len(members) == 2
    # Different models give different probabilities, so the mean is not either member's.
    assert members[0]["probabilities"]["positive"] != pytest.approx(members[1]["probabilities"]["positive"], abs=1e-4)
    for label in ("negative", "positive"):
        mean = sum(m["probabilities"][label] for m in members) / 2
        assert body["probabilities"][label] == pytest.approx(mean, abs=1e-6)
    assert set(example.model_versions.values_list("pk", flat=True)) == set(body["models"])
    assert signature_ok(example)
