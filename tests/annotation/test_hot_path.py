"""The create-example hot path: the query budget holds, the lookups load what they
must in one query each, and embedded predictions run on one inference thread."""

import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotation import inference, runtime, sessions
from annotation.models import AnnotationSession, Example
from annotation.stats import round_stats
from annotation.tokens import InvalidToken, make_token, session_from_token
from registry import services as registry
from registry.models import ModelVersion
from tasks import targets
from tasks.models import Round

pytestmark = pytest.mark.django_db


def field_values(obj):
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_a_token_loads_its_session_user_and_task_in_one_query(live_tasks, annotator):
    session = sessions.start_session(annotator, live_tasks["qa"], mturk_assignment_id="A1")
    token = make_token(session)
    with CaptureQueriesContext(connection) as queries:
        loaded = session_from_token(token)
        assert loaded.user.username == annotator.username and loaded.task.slug == "qa"
        assert loaded.task.parsed_config.task_type == "extractive_qa"
    assert len(queries) == 1
    assert loaded.pk == session.pk and loaded.mturk_assignment_id == "A1"


def test_the_token_lookup_is_by_its_unique_key_without_sorting(live_tasks, annotator):
    """Two lookups an example (one per request): the unique key needs no ORDER BY, and a
    signed token whose session is gone is refused all the same."""
    session = sessions.start_session(annotator, live_tasks["nli"])
    token = make_token(session)
    with CaptureQueriesContext(connection) as queries:
        assert session_from_token(token).pk == session.pk
    [query] = queries.captured_queries
    assert "ORDER BY" not in query["sql"].upper()
    session.delete()
    with pytest.raises(InvalidToken, match="not valid"):
        session_from_token(token)


def test_open_round_with_models_follows_the_ensemble_mode_and_model_state(live_tasks, tiny_artifacts):
    task = live_tasks["sentiment"]
    rnd = task.open_round()
    first = rnd.target_models.get()
    second = registry.register_model(task, tiny_artifacts["sentiment"], name="sentiment-second")
    rnd.target_models.add(second)

    with CaptureQueriesContext(connection) as queries:
        got_round, models = targets.open_round_with_models(task)
    assert len(queries) == 1
    assert (got_round.pk, got_round.number, got_round.status) == (rnd.pk, rnd.number, Round.Status.OPEN)
    assert [m.id for m in models] == [first.pk]  # single mode: the first by id
    assert models[0] == registry.target_model(first)

    Round.objects.filter(pk=rnd.pk).update(ensemble_mode=Round.EnsembleMode.MEAN)
    _, models = targets.open_round_with_models(task)
    assert [m.id for m in models] == [first.pk, second.pk]
    assert models == targets.round_target_models(Round.objects.get(pk=rnd.pk))

    ModelVersion.objects.filter(pk=first.pk).update(status=ModelVersion.Status.RETIRED)
    _, models = targets.open_round_with_models(task)
    assert [m.id for m in models] == [second.pk]

    ModelVersion.objects.filter(pk=second.pk).update(status=ModelVersion.Status.RETIRED)
    got_round, models = targets.open_round_with_models(task)  # no model: the round, found apart
    assert got_round.pk == rnd.pk and models == []

    Round.objects.filter(pk=rnd.pk).update(status=Round.Status.CLOSED)
    assert targets.open_round_with_models(task) == (None, [])


def test_bump_session_returns_the_stored_counters(live_tasks, annotator):
    session = sessions.start_session(annotator, live_tasks["hate"])
    stale = AnnotationSession.objects.get(pk=session.pk)
    sessions.bump(session, examples_written=1, examples_fooled=1)
    sessions.bump(stale, examples_written=1)  # a second tab, with old numbers in memory
    assert (stale.examples_written, stale.examples_fooled) == (2, 1)
    fresh = AnnotationSession.objects.get(pk=session.pk)
    assert (fresh.examples_written, fresh.examples_fooled, fresh.validations_done) == (2, 1, 0)
    with pytest.raises(ValueError, match="not session counters"):
        sessions.bump(session, examples_written=1, last_context=1)


def statements(queries) -> list[str]:
    """The SQL statements run, by kind, leaving out the savepoints that the test's own
    transaction turns each ``atomic()`` into (a request outside a test has none)."""
    kinds = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    return [k for k in kinds if k not in ("SAVEPOINT", "RELEASE")]


@pytest.mark.parametrize("address", ["127.0.0.1", "203.0.113.9"])
def test_an_example_costs_thirteen_statements_from_next_context_to_stored(live_tasks, annotator, address):
    """GET contexts/next, then POST examples, with a token (the MTurk and API path).

    Serving (4): the token's session with its user, task and last context; the
    candidates with the open round; the serving's count and the session's last
    context. Writing (9, and 1 more when the model was fooled): the token's session
    (the context written about comes with it); the open round with its models; in
    one transaction the round's lock, the example, the round's and the writer's
    counters, its model link, (the context's fooled count,) the session's counters
    and their stored values read back. A client off this machine adds one: the
    address its account was seen at. (A writer's first example in a round also
    creates their counter row.)
    """
    from rest_framework.test import APIClient

    session = sessions.start_session(annotator, live_tasks["nli"])
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_X_DYNABENCH_TOKEN=make_token(session))
    context = client.get("/api/tasks/nli/contexts/next/").json()  # a first serving loads the model
    first = client.post("/api/tasks/nli/examples/", {  # the writer's first: their counter row is made
        "context": context["id"], "inputs": {"hypothesis": "Someone is indoors."},
        "target": {"label": "neutral"}}, format="json")
    assert first.status_code == 201, first.content
    for i in range(3):
        with CaptureQueriesContext(connection) as served:
            context = client.get("/api/tasks/nli/contexts/next/").json()
        with CaptureQueriesContext(connection) as written:
            response = client.post("/api/tasks/nli/examples/", {
                "context": context["id"], "inputs": {"hypothesis": f"Someone is outdoors {i}."},
                "target": {"label": "neutral"}}, format="json")
        assert response.status_code == 201, response.content
        assert statements(served) == ["SELECT", "SELECT", "UPDATE", "UPDATE"], served.captured_queries
        fooled = response.json()["fooled"]
        remote = address != "127.0.0.1"
        expected = ["SELECT"] + ["INSERT"] * remote + ["SELECT", "SELECT", "INSERT", "UPDATE", "UPDATE", "INSERT"] \
            + ["UPDATE"] * fooled + ["UPDATE", "SELECT"]
        assert statements(written) == expected, written.captured_queries
        assert len(statements(served)) + len(statements(written)) == 13 + fooled + remote
    stored = Example.objects.order_by("pk").last()
    assert stored.context_id == context["id"] and stored.inputs == {"hypothesis": "Someone is outdoors 2."}
    assert AnnotationSession.objects.get(pk=session.pk).examples_written == 4


def test_a_new_example_saved_in_a_transaction_takes_no_savepoint_and_counts(live_tasks, annotator):
    """Example.save joins its caller's transaction (a new example's write is one): the
    row and its counters in it, without a SAVEPOINT and RELEASE of its own."""
    from django.db import transaction

    from annotation.models import RoundCounts
    from tasks.models import Context

    task = live_tasks["nli"]
    rnd = task.open_round()
    context = Context.objects.filter(task=task, is_active=True).first()
    collected = RoundCounts.objects.filter(round=rnd).values_list("collected", flat=True).first() or 0

    def new_example(text):
        return Example(task=task, round=rnd, context=context, annotator=annotator, source=Example.Source.ANNOTATION,
                       inputs={"hypothesis": text}, target={"label": "neutral"},
                       prediction={"label": "neutral"}, model_predictions={}, fooled=False)

    new_example("A person waits.").save()  # the writer's first in the round makes their counter row
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        new_example("A person waits again.").save()
    kinds = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    assert kinds == ["INSERT", "UPDATE", "UPDATE"], kinds  # the row, the round's and the writer's counters
    assert RoundCounts.objects.get(round=rnd).collected == collected + 2


def test_a_context_other_than_the_one_served_is_read_and_checked(live_tasks, client_for, annotator):
    """The served context comes with the token; any other is looked up and must be the task's and active."""
    from tasks.models import Context

    client = client_for(annotator)
    served = client.get("/api/tasks/nli/contexts/next/").json()
    other = Context.objects.filter(task=live_tasks["nli"], is_active=True).exclude(pk=served["id"]).first()
    body = {"inputs": {"hypothesis": "A person sits."}, "target": {"label": "neutral"}}
    assert client.post("/api/tasks/nli/examples/", {**body, "context": other.pk}, format="json").status_code == 201
    Context.objects.filter(pk=served["id"]).update(is_active=False)  # retired after it was served
    response = client.post("/api/tasks/nli/examples/", {**body, "context": served["id"]}, format="json")
    assert response.status_code == 400 and list(response.json()["errors"]) == ["context"]
    foreign = Context.objects.exclude(task=live_tasks["nli"]).first()
    response = client.post("/api/tasks/nli/examples/", {**body, "context": foreign.pk}, format="json")
    assert response.status_code == 400 and list(response.json()["errors"]) == ["context"]


def test_embedded_predictions_run_on_one_inference_thread(live_tasks, monkeypatch):
    import ml

    seen = []
    real_predict = ml.predict

    def recording_predict(*args, **kwargs):  # records the thread, then runs the real pass
        seen.append(threading.current_thread().name)
        return real_predict(*args, **kwargs)

    monkeypatch.setattr(ml, "predict", recording_predict)
    _, models = targets.open_round_with_models(live_tasks["nli"])
    rows = [{"premise": "A dog runs.", "hypothesis": f"An animal moves {i}."} for i in range(6)]
    results = [None] * len(rows)

    def call(i):
        [results[i]] = inference.predict_with(models, [rows[i]])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(rows))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r["label"] in ("entailment", "neutral", "contradiction") for r in results)
    # one model thread for every pass (concurrent requests may share passes: batching)
    assert 1 <= len(seen) <= len(rows) and set(seen) == {seen[0]} and seen[0].startswith("dynabench-inference")
    assert seen[0] != threading.current_thread().name


def test_a_model_slower_than_the_timeout_answers_503_and_stores_nothing(live_tasks, client_for, annotator,
                                                                        settings):
    settings.INFERENCE_TIMEOUT = 0.000001  # no real pass is that fast
    client = client_for(annotator)
    context = client.get("/api/tasks/nli/contexts/next/").json()
    before = Example.objects.count()
    response = client.post("/api/tasks/nli/examples/", {
        "context": context["id"], "inputs": {"hypothesis": "Too slow."}, "target": {"label": "neutral"}},
        format="json")
    assert response.status_code == 503 and "No model answer within" in response.json()["detail"]
    assert response["Retry-After"] == "5"
    assert Example.objects.count() == before
    assert round_stats(Round.objects.get(task__slug="nli", number=1))["collected"] == 0


def test_the_worker_task_takes_references_or_ids_and_resolves_relative_paths(live_tasks, settings, tmp_path):
    import shutil

    from annotation import tasks as worker_tasks

    task = live_tasks["hate"]
    model = task.open_round().target_models.get()
    row = [{"statement": "Everyone deserves respect."}]
    by_id = worker_tasks.predict.apply(args=[[model.pk], row]).get()
    by_ref = worker_tasks.predict.apply(args=[[registry.target_model(model).message()], row]).get()
    assert by_id == by_ref and list(by_id[0]["members"]) == [str(model.pk)]

    # A relative artifact path is read under the worker's own models directory.
    settings.DYNABENCH_MODELS_DIR = str(tmp_path)
    shutil.copytree(model.artifact_dir, tmp_path / "hate" / "copied")
    message = {**registry.target_model(model).message(), "path": "hate/copied"}
    assert runtime.predict_refs([message], row)[0]["label"] == by_id[0]["label"]

    ModelVersion.objects.filter(pk=model.pk).update(status=ModelVersion.Status.RETIRED)
    with pytest.raises(ValueError, match="unknown or retired"):
        worker_tasks.predict.apply(args=[[model.pk], row]).get()


@pytest.mark.parametrize("forged", [10**30, -1, 0, True, "twelve", 1.5, None])
def test_forged_context_ids_get_400_and_store_nothing(live_tasks, client_for, annotator, forged):
    client = client_for(annotator)
    response = client.post("/api/tasks/nli/examples/", {
        "context": forged, "inputs": {"hypothesis": "Forged."}, "target": {"label": "neutral"}}, format="json")
    assert response.status_code == 400, response.content
    assert list(response.json()["errors"]) == ["context"]
    assert Example.objects.count() == 0


def test_serving_a_context_loads_the_model_before_the_first_example(live_tasks, client_for, annotator, monkeypatch):
    import ml

    monkeypatch.setattr(inference, "_prefetched", {})
    task = live_tasks["sentiment"]
    [model] = targets.open_round_with_models(task)[1]
    ref = model.ref()
    ml.default_cache().clear()
    client = client_for(annotator)
    assert client.get("/api/tasks/sentiment/contexts/next/").status_code == 200
    runtime.model_thread().call(lambda: None).result(timeout=60)  # the queued load is done
    assert ref in ml.default_cache()
    assert inference.prefetch_models(task) is False  # checked once a minute per task, not per request
