"""The create-example hot path: SQL built once must load exactly what the ORM loads,
the query budget holds, and embedded predictions run on one inference thread."""

import threading
import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotation import inference, services
from annotation.models import AnnotationSession, Example
from annotation.tokens import load_session, make_token
from dynabench import rawrows
from leaderboard.models import ModelVersion
from tasks.models import Context, Round

pytestmark = pytest.mark.django_db


def field_values(obj):
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_load_session_equals_the_orm(live_tasks, annotator):
    task = live_tasks["qa"]
    session = services.start_session(annotator, task, mturk_assignment_id="A1")
    services.bump_session(session, examples_written=2, examples_fooled=1)

    loaded = load_session(str(session.key))
    orm = AnnotationSession.objects.select_related("user", "task").get(pk=session.pk)
    assert field_values(loaded) == field_values(orm)
    assert isinstance(loaded.key, uuid.UUID) and loaded.created_at.tzinfo is not None
    assert field_values(loaded.user) == field_values(orm.user)
    assert field_values(loaded.task) == field_values(orm.task)
    assert loaded.task.config == orm.task.config and isinstance(loaded.task.config, dict)  # JSON decoded
    with CaptureQueriesContext(connection) as queries:  # user and task came with the row
        assert loaded.user.username == annotator.username and loaded.task.slug == "qa"
    assert len(queries) == 0


def test_load_session_refuses_unknown_and_malformed_keys(live_tasks):
    assert load_session(str(uuid.uuid4())) is None
    assert load_session("not-a-uuid") is None
    assert load_session("' OR 1=1 --") is None


def test_active_context_equals_the_orm_and_checks_task_and_state(live_tasks):
    nli, sentiment = live_tasks["nli"], live_tasks["sentiment"]
    context = nli.contexts.first()
    Context.objects.filter(pk=context.pk).update(metadata={"source": "tést ✓"}, times_used=3)
    def active_context(task, pk):  # the create path's own statement and builder
        return services._context_from_rows(rawrows.fetch(*services._active_context_statement(task, pk)))

    loaded = active_context(nli, context.pk)
    assert field_values(loaded) == field_values(Context.objects.get(pk=context.pk))
    assert loaded.metadata == {"source": "tést ✓"}
    assert active_context(sentiment, context.pk) is None  # another task's context
    Context.objects.filter(pk=context.pk).update(is_active=False)
    assert active_context(nli, context.pk) is None


def test_open_round_with_models_follows_the_ensemble_mode_and_model_state(live_tasks, tiny_artifacts):
    from leaderboard.services import register_model

    task = live_tasks["sentiment"]
    rnd = task.open_round()
    first = rnd.target_models.get()
    second = register_model(task, tiny_artifacts["sentiment"], name="sentiment-second")
    rnd.target_models.add(second)

    got_round, models = inference.open_round_with_models(task)
    assert (got_round.pk, got_round.number, got_round.status) == (rnd.pk, rnd.number, Round.Status.OPEN)
    assert [m.id for m in models] == [first.pk]  # single mode: the first by id
    assert models[0] == inference.target_model(first)

    Round.objects.filter(pk=rnd.pk).update(ensemble_mode=Round.EnsembleMode.MEAN)
    _, models = inference.open_round_with_models(task)
    assert [m.id for m in models] == [first.pk, second.pk]
    assert models == inference.round_target_models(Round.objects.get(pk=rnd.pk))

    ModelVersion.objects.filter(pk=first.pk).update(status="retired")
    _, models = inference.open_round_with_models(task)
    assert [m.id for m in models] == [second.pk]

    ModelVersion.objects.filter(pk=second.pk).update(status="retired")
    got_round, models = inference.open_round_with_models(task)  # no model: the round, found apart
    assert got_round.pk == rnd.pk and models == []

    Round.objects.filter(pk=rnd.pk).update(status=Round.Status.CLOSED)
    assert inference.open_round_with_models(task) == (None, [])


def test_rawrows_insert_statement_matches_an_orm_create(live_tasks, annotator):
    task = live_tasks["nli"]
    rnd, context = task.open_round(), task.contexts.first()
    common = dict(task=task, round=rnd, context=context, annotator=annotator, inputs={"hypothesis": "<i>é</i> 🙂"},
                  target={"label": "neutral"}, prediction={"label": "neutral", "probabilities": {"neutral": 1.0}},
                  model_predictions={"1": {"label": "neutral"}}, fooled=False, latency_ms=12.5, signature="s" * 64)
    raw = Example(**common)
    [(_, [(raw_pk,)])] = rawrows.run_many([rawrows.insert_statement(raw)])
    raw.pk = raw_pk
    orm = Example.objects.create(**common)
    assert raw.pk and raw.pk != orm.pk
    stored_raw, stored_orm = Example.objects.get(pk=raw.pk), Example.objects.get(pk=orm.pk)
    skip = {"id", "uid", "created_at", "updated_at"}
    assert {k: v for k, v in field_values(stored_raw).items() if k not in skip} == \
        {k: v for k, v in field_values(stored_orm).items() if k not in skip}
    assert stored_raw.uid == raw.uid and stored_raw.created_at == raw.created_at and raw.created_at is not None
    assert stored_raw.validation_status == Example.ValidationStatus.PENDING  # field defaults applied


def test_bump_session_returns_the_stored_counters(live_tasks, annotator):
    session = services.start_session(annotator, live_tasks["hate"])
    stale = AnnotationSession.objects.get(pk=session.pk)
    services.bump_session(session, examples_written=1, examples_fooled=1)
    services.bump_session(stale, examples_written=1)  # a second tab, with old numbers in memory
    assert (stale.examples_written, stale.examples_fooled) == (2, 1)
    fresh = AnnotationSession.objects.get(pk=session.pk)
    assert (fresh.examples_written, fresh.examples_fooled, fresh.validations_done) == (2, 1, 0)
    with pytest.raises(ValueError, match="not session counters"):
        services.bump_session(session, examples_written=1, last_context=1)


def test_create_example_query_budget(live_tasks, annotator):
    """Token lookup, open round with models, context; then one write transaction."""
    from rest_framework.test import APIClient

    task = live_tasks["nli"]
    session = services.start_session(annotator, task)
    client = APIClient()
    client.credentials(HTTP_X_DYNABENCH_TOKEN=make_token(session))
    context = client.get("/api/tasks/nli/contexts/next/").json()
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/tasks/nli/examples/", {
            "context": context["id"], "inputs": {"hypothesis": "Someone is outdoors."},
            "target": {"label": "neutral"}}, format="json")
    assert response.status_code == 201, response.content
    sql = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    assert sql.count("SELECT") == 3, queries.captured_queries
    writes = [s for s in sql if s in ("INSERT", "UPDATE")]
    fooled = response.json()["fooled"]
    assert len(writes) == 4 + int(fooled)  # round counter, example, its model, session (+ context)
    assert len(queries) <= 10


def test_embedded_predictions_run_on_one_inference_thread(live_tasks, monkeypatch):
    import ml

    seen = []
    real_predict = ml.predict

    def recording_predict(*args, **kwargs):  # records the thread, then runs the real pass
        seen.append(threading.current_thread().name)
        return real_predict(*args, **kwargs)

    monkeypatch.setattr(ml, "predict", recording_predict)
    _, models = inference.open_round_with_models(live_tasks["nli"])
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
    assert len(seen) == len(rows) and set(seen) == {seen[0]} and seen[0].startswith("dynabench-inference")
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
    assert Example.objects.count() == before
    assert Round.objects.get(task__slug="nli", number=1).examples_collected == 0


def test_the_worker_task_takes_references_or_ids_and_resolves_relative_paths(live_tasks, settings, tmp_path):
    import shutil

    from annotation import tasks as worker_tasks

    task = live_tasks["hate"]
    model = task.open_round().target_models.get()
    row = [{"statement": "Everyone deserves respect."}]
    by_id = worker_tasks.predict.apply(args=[[model.pk], row]).get()
    by_ref = worker_tasks.predict.apply(args=[[inference.target_model(model).message()], row]).get()
    assert by_id == by_ref and list(by_id[0]["members"]) == [str(model.pk)]

    # A relative artifact path is read under the worker's own models directory.
    settings.DYNABENCH_MODELS_DIR = str(tmp_path)
    shutil.copytree(model.artifact_dir, tmp_path / "hate" / "copied")
    message = {**inference.target_model(model).message(), "path": "hate/copied"}
    assert worker_tasks.predict_refs([message], row)[0]["label"] == by_id[0]["label"]

    ModelVersion.objects.filter(pk=model.pk).update(status="retired")
    with pytest.raises(ValueError, match="unknown or retired"):
        worker_tasks.predict.apply(args=[[model.pk], row]).get()


@pytest.mark.parametrize("forged", [10**30, -1, 0, True, "twelve", 1.5, None])
def test_forged_context_ids_get_400_and_store_nothing(live_tasks, client_for, annotator, forged):
    client = client_for(annotator)
    response = client.post("/api/tasks/nli/examples/", {
        "context": forged, "inputs": {"hypothesis": "Forged."}, "target": {"label": "neutral"}}, format="json")
    assert response.status_code == 400, response.content
    assert "context" in response.json()
    assert Example.objects.count() == 0 and Round.objects.get(task__slug="nli", number=1).examples_collected == 0


def test_serving_a_context_loads_the_model_before_the_first_example(live_tasks, client_for, annotator, monkeypatch):
    import ml

    monkeypatch.setattr(inference, "_prefetched", {})
    task = live_tasks["sentiment"]
    [model] = inference.open_round_with_models(task)[1]
    from annotation.tasks import _ref

    ref = _ref(model.message())
    ml.default_cache().clear()
    client = client_for(annotator)
    assert client.get("/api/tasks/sentiment/contexts/next/").status_code == 200
    inference._inference_executor().submit(lambda: None).result(timeout=60)  # the queued load is done
    assert ref in ml.default_cache()
    assert inference.prefetch_models(task) is False  # checked once a minute per task, not per request
