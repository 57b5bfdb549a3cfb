"""The QA reference line: the sliding-window baseline of the SQuAD
paper, scored on the static test set as the models are, shown as the reference row of
the QA board and beside the target on the task page, and read by the promotion rules
(code ``not_above_reference``).

Round 0's test set is two hand-made questions (tests/ml/test_baselines.py derives the
baseline's answers): "Bob" for "Who owns a red car?" (gold "Bob": F1 1, exact match 1)
and "1412 by monks" for "When was the bridge built?" (gold "1412": F1 0.5, exact match
0). So the line is F1 0.75, exact match 0.5, on 2 examples. The models' scores are
stored evaluations, as a finished evaluation job leaves them.
"""

import html

import pytest

from annotation.models import Example
from core.errors import Conflict
from jobs.models import Job
from leaderboard import promotion, reference
from leaderboard.evaluation import dataset_seed
from leaderboard.models import Evaluation, Promotion
from ml import baselines, scoring
from registry.models import ModelVersion
from registry.services import register_model
from tasks import services as task_services
from tests.ml.test_baselines import BRIDGE, OWNER

pytestmark = pytest.mark.django_db

QUESTIONS = [(OWNER, {"text": "Bob", "start": 21}), (BRIDGE, {"text": "1412", "start": 24})]


def add_static_test_set(task):
    static = task_services.ensure_static_round(task)
    for i, (inputs, answer) in enumerate(QUESTIONS):
        Example.objects.create(task=task, round=static, split="test", source="import", validation_status="verified",
                               external_uid=f"qa-te-{i}", inputs=dict(inputs), target=dict(answer))
    return static


def score(model, static, per_example, interval):
    """A finished evaluation of ``model`` on round 0's test set: F1 per example, its interval as given."""
    ids = list(static.examples.filter(split="test").order_by("pk").values_list("pk", flat=True))
    value = sum(per_example) / len(per_example)
    Evaluation.objects.update_or_create(model_version=model, round=static, split="test", defaults={
        "num_examples": len(ids), "metrics": {"f1": value, "exact_match": value},
        "intervals": {"f1": list(interval)}, "example_ids": ids, "per_example": per_example,
        "model_error_rate": 1 - value})
    Job.objects.create(kind=Job.Kind.EVALUATE_MODEL, task=model.task, status=Job.Status.SUCCEEDED,
                       params={"model_version": model.pk, "rounds": None, "split": "test"})
    return model


def registry_row(task, name):
    """A ready model as the registry lists it: what the board, the task page and the crowd
    rule read (nothing here loads its artifact)."""
    return ModelVersion.objects.create(task=task, name=name, artifact_path=f"models/{name}", sha256="0" * 64)


def expected_interval():
    values = scoring.bootstrap_replicates([1.0, 0.5], n_resamples=1000, seed=dataset_seed(0))
    return scoring.percentile_interval(values, 0.95)


def test_the_line_is_scored_like_an_evaluation_and_cached_by_its_examples(demo_tasks, monkeypatch):
    task = demo_tasks["qa"]
    static = add_static_test_set(task)
    found = reference.line(task, [0])
    assert found["name"] == "sliding-window baseline"
    assert found["datasets"][0] == {"performance": 0.75, "exact_match": 0.5, "n": 2,
                                    "interval": expected_interval()}
    assert found["training_data"]["max_span_words"] == baselines.MAX_SPAN_WORDS

    def not_again(rows):
        raise AssertionError("the cached answers were computed again")

    monkeypatch.setattr(baselines, "sliding_window_scores", not_again)
    assert reference.line(task, [0])["datasets"][0]["performance"] == 0.75  # from the cache
    # A third question: other examples, another key; the line moves.
    Example.objects.create(task=task, round=static, split="test", source="import", validation_status="verified",
                           external_uid="qa-te-2", inputs=dict(OWNER), target={"text": "Anna", "start": 0})
    monkeypatch.undo()
    assert reference.line(task, [0])["datasets"][0]["performance"] == pytest.approx(0.5)  # (1 + 0.5 + 0) / 3
    # A rejected (not usable) example leaves the set: the line is back on the two.
    Example.objects.filter(external_uid="qa-te-2").update(validation_status="rejected")
    assert reference.line(task, [0])["datasets"][0]["performance"] == 0.75


def test_a_classification_task_keeps_its_majority_line_and_a_qa_task_without_test_set_has_none(demo_tasks):
    assert reference.line(demo_tasks["qa"], [0]) is None
    from leaderboard.board import _baseline

    assert _baseline(demo_tasks["qa"], [0]) is None
    assert _baseline(demo_tasks["sentiment"], [0]) is None  # no training labels: no majority line either


def test_the_qa_board_has_the_reference_row(demo_tasks, client):
    task = demo_tasks["qa"]
    static = add_static_test_set(task)
    score(registry_row(task, "qa-model"), static, [0.0, 0.5], (0.0, 0.5))
    body = client.get("/api/tasks/qa/leaderboard/").json()
    rows = {row["model"]["name"]: row for row in body["rows"]}
    assert list(rows) == ["qa-model", "sliding-window baseline"]  # the reference row last, in no rank
    line = rows["sliding-window baseline"]
    assert line["rank"] is None and line["dynascore"] is None and line["model"]["baseline"] is True
    assert line["model"]["id"] is None
    low, high = expected_interval()
    assert line["metrics"]["performance"] == {"value": 0.75, "ci_low": low, "ci_high": high}
    assert "calibration" not in line["metrics"]  # a QA model has none either
    assert line["datasets"]["static"] == {"value": 0.75, "ci_low": low, "ci_high": high, "num_examples": 2}
    assert line["model"]["training_data"]["exact_match"] == {"static": 0.5}
    page = client.get("/tasks/qa/leaderboard/").content.decode()
    assert '<tr data-model="sliding-window baseline" class="baseline">' in page
    csv_text = client.get("/api/tasks/qa/leaderboard/?format=csv").content.decode()
    assert "sliding-window baseline" in csv_text


def test_the_task_page_sets_the_target_beside_the_line(demo_tasks, client):
    task = demo_tasks["qa"]
    static = add_static_test_set(task)
    target = score(registry_row(task, "qa-target"), static, [0.0, 0.5], (0.0, 0.5))
    task.open_round().target_models.add(target)
    page = html.unescape(" ".join(client.get("/tasks/qa/").content.decode().split()))
    assert "<strong>qa-target</strong>: f1 25% on the static test set (2 examples; 95% interval 0–50%)" in page
    assert ("against 75% (exact match 50%) for the sliding-window baseline (no training: the question's words "
            "around each span; Rajpurkar et al. 2016): <em>not</em> clearly better than that") in page


# --- the promotion rules --------------------------------------------------------------------


@pytest.fixture
def qa_setup(demo_tasks, tiny_artifact):
    """The QA task: round 0's two test questions, round 1 open with ``target`` (F1 0.25,
    evaluated) and a ready ``candidate`` (not yet)."""
    task = demo_tasks["qa"]
    static = add_static_test_set(task)
    artifact = tiny_artifact("qa")
    target = register_model(task, artifact, name="the-target")
    task.open_round().target_models.add(target)
    score(target, static, [0.0, 0.5], (0.0, 0.5))
    candidate = register_model(task, artifact, name="the-candidate")
    return task, static, target, candidate


@pytest.mark.slow
def test_a_candidate_whose_interval_is_not_above_the_line_is_refused_then_overridden(qa_setup, researcher):
    task, static, target, candidate = qa_setup
    score(candidate, static, [1.0, 1.0], (0.5, 1.0))  # above the target, not clear of the line
    checks = promotion.promotion_checks(task, candidate)
    assert checks["majority"] is None
    assert checks["reference"]["kind"] == "qa" and checks["reference"]["value"] == 0.75
    assert checks["reference"]["exact_match"] == 0.5
    with pytest.raises(Conflict) as refused:
        promotion.promote(task, candidate)
    assert refused.value.code == "not_above_reference"
    message = refused.value.message
    assert "the-candidate scores 100.0% [50.0%, 100.0%] f1 on the static test set (2 examples)" in message
    assert "against 75.0% for the sliding-window baseline" in message and "allow_below_baseline" in message
    with pytest.raises(Conflict):
        promotion.promote(task, candidate, allow_below_baseline=True, reason="  ")
    assert task.open_round().number == 1 and not Promotion.objects.exists()

    rnd = promotion.promote(task, candidate, allow_below_baseline=True, reason="a QA pilot", user=researcher)
    record = Promotion.objects.get(round=rnd)
    assert record.overridden and record.reason == "a QA pilot"
    assert [p["code"] for p in record.checks["problems"]] == ["not_above_reference"]
    assert record.checks["reference"]["value"] == 0.75


@pytest.mark.slow
def test_a_candidate_clear_of_the_line_is_promoted_without_override(qa_setup, researcher):
    task, static, target, candidate = qa_setup
    score(candidate, static, [1.0, 1.0], (0.8, 1.0))
    assert promotion.promotion_checks(task, candidate)["problems"] == []
    rnd = promotion.promote(task, candidate, user=researcher)
    assert list(rnd.target_models.all()) == [candidate] and not rnd.promotions.get().overridden


@pytest.mark.slow
def test_the_api_answers_409_not_above_reference_and_the_confirmation_shows_the_line(qa_setup, researcher,
                                                                                 client_for, client):
    task, static, target, candidate = qa_setup
    score(candidate, static, [1.0, 1.0], (0.5, 1.0))
    api = client_for(researcher)
    refused = api.post("/api/tasks/qa/promote/", {"model": candidate.pk}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "not_above_reference"
    assert "75.0% for the sliding-window baseline" in refused.json()["detail"]
    client.force_login(researcher)
    page = client.get(f"/tasks/qa/promote/{candidate.pk}/").content.decode()
    assert "Sliding-window line" in page and "0.750" in page and "exact match 0.500" in page
    assert "Majority line" not in page
    accepted = api.post("/api/tasks/qa/promote/", {"model": candidate.pk, "allow_below_baseline": True,
                                                   "reason": "pilot"}, format="json")
    assert accepted.status_code == 201, accepted.content


def test_the_openapi_schema_documents_the_new_code(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "not_above_reference" in schema and "409" in schema


@pytest.mark.slow
def test_an_evaluation_job_scores_the_line_on_the_same_test_sets(qa_setup, client, monkeypatch,
                                                                  django_capture_on_commit_callbacks):
    """After scoring a QA model the job computes the line too, so no page has to."""
    from leaderboard.evaluation import start_evaluation

    task, static, target, candidate = qa_setup
    with django_capture_on_commit_callbacks(execute=True):
        job = start_evaluation(candidate, measure=False)
    job.refresh_from_db()
    assert job.status == Job.Status.SUCCEEDED, job.error
    assert Evaluation.objects.get(model_version=candidate, round=static).num_examples == 2

    def not_again(rows):
        raise AssertionError("a page computed the line again")

    monkeypatch.setattr(baselines, "sliding_window_scores", not_again)
    rows = client.get("/api/tasks/qa/leaderboard/").json()["rows"]
    line = next(row for row in rows if row["model"]["baseline"])
    assert line["metrics"]["performance"]["value"] == 0.75
    assert "the-candidate" in [row["model"]["name"] for row in rows]
