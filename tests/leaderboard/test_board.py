"""The public leaderboard: intervals on every number, the Dynascore under chosen
weights, ties, the majority baseline, exports, the page, and a constant query count."""

import csv
import io
import re

import pytest

from leaderboard import board
from leaderboard.board import unpack
from leaderboard.evaluation import start_evaluation
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from registry.services import register_model
from tasks.models import Round
from tests.leaderboard.test_models_and_jobs import SENTENCES, add_examples

pytestmark = pytest.mark.django_db

LEANING = [("What a lovely, warm film.", "positive"), ("Great fun from start to end.", "positive"),
           ("Maria smiled at her brother all the way home.", "positive"), ("Awful and far too long.", "negative")] * 4


@pytest.fixture
def boarded(live_tasks, tiny_artifact, other_sentiment_artifact, django_capture_on_commit_callbacks):
    """Sentiment with test sets in round 0 and round 1, and two evaluated models."""
    task = live_tasks["sentiment"]
    static = Round.objects.create(task=task, number=0, status=Round.Status.CLOSED)
    # Unbalanced test sets, so that models differ (tiny models answer nearly one label).
    add_examples(task, static, LEANING[:8], "test")
    add_examples(task, static, SENTENCES + LEANING[:4], "train")  # mostly positive: the baseline's label
    add_examples(task, task.open_round(), LEANING[8:], "test")
    models = [task.open_round().target_models.get(),
              register_model(task, other_sentiment_artifact, name="sentiment-other")]
    for model in models:
        with django_capture_on_commit_callbacks(execute=True):
            start_evaluation(model)
    return task, models


def test_every_number_has_an_interval_and_the_baseline_is_there(boarded, client):
    task, models = boarded
    evaluation = Evaluation.objects.filter(model_version=models[0]).first()
    low, high = evaluation.intervals["accuracy"]
    assert low <= evaluation.metrics["accuracy"] <= high
    assert len(unpack(evaluation.replicate_values)) == 1000 == evaluation.replicates["n"]
    assert "ece" in evaluation.intervals
    # Each dataset is resampled with its own seed (its round number), the same for every model.
    seeds = {(e.model_version_id, e.round.number): e.replicates["seed"] for e in Evaluation.objects.all()}
    assert seeds == {(m.pk, n): n for m in models for n in (0, 1)}
    body = client.get("/api/tasks/sentiment/leaderboard/").json()
    assert body["datasets"] == ["static", "round 1"]
    names = [row["model"]["name"] for row in body["rows"]]
    assert set(names) == {"sentiment-tiny", "sentiment-other", "majority-class baseline"}
    assert [row["rank"] for row in body["rows"]] == [1, 2, None]  # the baseline: a reference row, last
    for row in body["rows"]:
        performance = row["metrics"]["performance"]
        assert performance["ci_low"] <= performance["value"] <= performance["ci_high"]
    for row in body["rows"][:2]:
        assert row["dynascore_ci_low"] <= row["dynascore"] <= row["dynascore_ci_high"]
        metrics = row["metrics"]
        assert set(metrics) == {"performance", "calibration", "throughput", "memory", "robustness", "fairness"}
        assert metrics["throughput"]["value"] > 0 and metrics["memory"]["value"] > 1  # MB of a MiniLM
        assert 0 <= metrics["robustness"]["value"] <= 1 and metrics["robustness"]["ci_low"] is not None
        for dataset in body["datasets"]:
            cell = row["datasets"][dataset]
            assert cell["ci_low"] <= cell["value"] <= cell["ci_high"] and cell["num_examples"] == 8
    baseline = next(r for r in body["rows"] if r["model"]["baseline"])
    assert baseline["model"]["id"] is None and baseline["model"]["training_data"]["majority_label"]
    dynascores = [row["dynascore"] for row in body["rows"][:2]]
    assert dynascores == sorted(dynascores, reverse=True)


def test_a_performance_only_evaluation_scores_without_measuring(live_tasks, tiny_artifact, client,
                                                                 django_capture_on_commit_callbacks):
    """``measure=False`` (the replay's models): accuracy with its interval and calibration,
    no throughput, memory, robustness or fairness; the board shows what there is."""
    task = live_tasks["sentiment"]
    static = Round.objects.create(task=task, number=0, status=Round.Status.CLOSED)
    add_examples(task, static, LEANING[:8], "test")
    model = task.open_round().target_models.get()
    with django_capture_on_commit_callbacks(execute=True):
        job = start_evaluation(model, measure=False)
    job.refresh_from_db()
    assert job.status == "succeeded" and job.params["measure"] is False
    evaluation = Evaluation.objects.get(model_version=model)
    assert evaluation.per_example and "accuracy" in evaluation.intervals and "ece" in evaluation.metrics
    for absent in ("throughput", "memory_mb", "robustness", "fairness"):
        assert absent not in evaluation.metrics, absent
    body = client.get("/api/tasks/sentiment/leaderboard/").json()
    row = next(r for r in body["rows"] if r["model"]["id"] == model.pk)
    assert row["metrics"]["performance"]["value"] == pytest.approx(evaluation.metrics["accuracy"])
    assert "throughput" not in row["metrics"] or row["metrics"]["throughput"]["value"] is None


def test_weights_change_the_score_and_bad_weights_are_400(boarded, client):
    default = client.get("/api/tasks/sentiment/leaderboard/").json()
    only_performance = client.get("/api/tasks/sentiment/leaderboard/?weights=performance:5,calibration:0,"
                                  "throughput:0,memory:0,robustness:0,fairness:0").json()
    assert only_performance["weights"]["performance"] == 5
    for row in only_performance["rows"][:2]:  # performance alone: the Dynascore is the performance
        assert row["dynascore"] == pytest.approx(row["metrics"]["performance"]["value"])
    # The tie mark tests the ranked quantity: with performance alone, the Dynascore's
    # paired test is the performance one; the last ranked row ties with no one.
    first, last = only_performance["rows"][:2]
    assert isinstance(first["tied_with_next"], bool)
    assert first["tied_with_next"] == first["performance_tied_with_next"]
    assert last["tied_with_next"] is False and last["performance_tied_with_next"] is False
    assert all(isinstance(row["performance_tied_with_next"], bool) for row in default["rows"][:2])
    assert default["weights"] == {"performance": 4, "throughput": 1, "memory": 1, "robustness": 1, "fairness": 1,
                                  "calibration": 0}
    for bad in ("performance:9", "performance:x", "speed:1", "performance:-1", "performance:nan"):
        for fmt in ("json", "csv"):
            response = client.get(f"/api/tasks/sentiment/leaderboard/?weights={bad}&format={fmt}")
            assert response.status_code == 400, bad
            assert response["Content-Type"] == "application/json" and "weights" in response.json()["errors"]


def test_the_csv_export_matches_the_json(boarded, client):
    body = client.get("/api/tasks/sentiment/leaderboard/").json()
    response = client.get("/api/tasks/sentiment/leaderboard/?format=csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    lines = list(csv.reader(io.StringIO(response.content.decode())))
    assert lines[0][:5] == ["rank", "model", "owner", "parameters", "dynascore"]
    assert [line[1] for line in lines[1:]] == [row["model"]["name"] for row in body["rows"]]
    assert float(lines[1][4]) == pytest.approx(body["rows"][0]["dynascore"])


def test_the_csv_export_keeps_a_formula_in_a_model_name_as_text(boarded, client):
    task, models = boarded
    ModelVersion.objects.filter(pk=models[1].pk).update(name="=cmd|' /C calc'!A0")
    board.forget(task.pk)
    lines = list(csv.reader(io.StringIO(client.get("/api/tasks/sentiment/leaderboard/?format=csv").content.decode())))
    assert "'=cmd|' /C calc'!A0" in [line[1] for line in lines[1:]]
    assert not any(cell.startswith("=") for line in lines for cell in line)


def test_the_page_sorts_and_reweights_and_shows_intervals(boarded, client):
    page = client.get("/tasks/sentiment/leaderboard/?sort=name&dir=asc")
    html = page.content.decode()
    assert page.status_code == 200 and 'aria-sort="ascending"' in html and "▲" in html
    order = [name for name in ("majority-class baseline", "sentiment-other", "sentiment-tiny")]
    positions = [html.index(f'data-model="{name}"') for name in order]
    assert positions == sorted(positions)
    descending = client.get("/tasks/sentiment/leaderboard/?sort=name&dir=desc").content.decode()
    assert descending.index('data-model="sentiment-tiny"') < descending.index('data-model="sentiment-other"')
    sliders = client.get("/tasks/sentiment/leaderboard/?performance=5&calibration=2&sort=dynascore")
    assert sliders.status_code == 200 and 'name="calibration" min="0" max="5" step="0.5" value="2.0"' in \
        sliders.content.decode()
    # A bad weight keeps the form and the board, with the message beside them: a valid
    # value sent stays (calibration 2); the refused one is back at its default, which the
    # board below uses (tests/leaderboard/test_board_page.py has the rest).
    bad = client.get("/tasks/sentiment/leaderboard/?performance=7&calibration=2")
    html = " ".join(bad.content.decode().split())
    assert bad.status_code == 400
    error = re.search(r'id="weights-error">([^<]*)<', html).group(1)
    assert "performance" in error and "7" in error, error  # what is wrong, not just "Invalid input."
    assert 'name="performance" min="0" max="5" step="0.5" value="4.0"' in html
    assert 'name="calibration" min="0" max="5" step="0.5" value="2.0"' in html
    assert 'id="leaderboard"' in html
    # Parameter counts read as people read them; the exact count is on hover.
    page = " ".join(client.get("/tasks/sentiment/leaderboard/").content.decode().split())
    assert re.search(r'<td title="\d{7,}">\d+\.\d M</td>', page), "a parameter count is shown raw"
    assert not re.findall(r"<td>\d{2,}\.\d{3}", page), "examples/s or megabytes shown to the thousandth"


def test_the_page_offers_no_weight_for_a_metric_no_model_has_and_shortens_long_names(boarded, client):
    task, models = boarded
    Evaluation.objects.filter(model_version__in=models).update(metrics={"accuracy": 0.5, "model_error_rate": 0.5})
    long_name = "a-model-name-far-too-long-for-a-table-cell-on-a-phone"
    type(models[1]).objects.filter(pk=models[1].pk).update(name=long_name)
    from leaderboard.board import forget

    forget(task.pk)
    html = " ".join(client.get("/tasks/sentiment/leaderboard/").content.decode().split())
    assert 'name="performance"' in html
    for absent in ("throughput", "memory", "robustness", "fairness", "calibration"):
        assert f'name="{absent}"' not in html, absent
    assert f'<td class="name" title="{long_name}">' in html and ">a-model-name-far-too-long-for-a…</a>" in html
    assert '<div class="table-scroll" tabindex="0" role="region" aria-label="Leaderboard table">' in html


def test_the_query_count_does_not_grow_with_the_models(boarded, client, other_sentiment_artifact,
                                                        django_assert_max_num_queries,
                                                        django_capture_on_commit_callbacks):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    task, _ = boarded
    with CaptureQueriesContext(connection) as before:
        client.get("/api/tasks/sentiment/leaderboard/")
    for n in range(3):
        model = register_model(task, other_sentiment_artifact, name=f"more-{n}")
        with django_capture_on_commit_callbacks(execute=True):
            start_evaluation(model)
    with django_assert_max_num_queries(len(before.captured_queries)):
        body = client.get("/api/tasks/sentiment/leaderboard/").json()
    assert len(body["rows"]) == 6


def test_hidden_tasks_have_no_public_board(boarded, client):
    task, _ = boarded
    task.is_hidden = True
    task.save()
    assert client.get("/api/tasks/sentiment/leaderboard/").status_code == 404
    assert client.get("/tasks/sentiment/leaderboard/").status_code == 404


def test_models_evaluated_on_no_test_set_make_an_empty_board(live_tasks, client, django_capture_on_commit_callbacks):
    """The demo target has a finished evaluation, but the task has no test examples."""
    model = live_tasks["sentiment"].open_round().target_models.get()
    with django_capture_on_commit_callbacks(execute=True):
        start_evaluation(model)
    assert not Evaluation.objects.filter(model_version=model).exists()
    body = client.get("/api/tasks/sentiment/leaderboard/").json()
    assert body["rows"] == [] and body["datasets"] == []
    assert client.get("/tasks/sentiment/leaderboard/").status_code == 200


def test_the_migration_packs_stored_replicate_lists_and_unpacks_them_back(live_tasks, tiny_artifact):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("leaderboard.migrations.0003_evaluation_replicate_values")
    task = live_tasks["sentiment"]
    rnd = Round.objects.create(task=task, number=0, status=Round.Status.CLOSED)
    model = register_model(task, tiny_artifact("sentiment"), name="old-format")
    old = Evaluation.objects.create(model_version=model, round=rnd, num_examples=2,
                                    replicates={"seed": 0, "examples": "abc", "values": [0.5, 0.25, 0.125]})
    migration.move_values(apps, None)
    old.refresh_from_db()
    assert old.replicates == {"seed": 0, "examples": "abc", "n": 3}
    assert unpack(old.replicate_values).tolist() == [0.5, 0.25, 0.125]
    migration.restore_values(apps, None)
    old.refresh_from_db()
    assert old.replicates == {"seed": 0, "examples": "abc", "values": [0.5, 0.25, 0.125]}


def test_dataset_weights_change_the_averages_and_bad_ones_are_400(boarded, client):
    even = client.get("/api/tasks/sentiment/leaderboard/").json()
    assert even["dataset_weights"] == {"static": 1.0, "round 1": 1.0}
    only_round_1 = client.get("/api/tasks/sentiment/leaderboard/?dataset_weights=0:0,1:2").json()
    assert only_round_1["dataset_weights"] == {"static": 0.0, "round 1": 2.0}
    for row in only_round_1["rows"]:  # the static set weighs nothing: every average is round 1's
        assert row["metrics"]["performance"]["value"] == pytest.approx(row["datasets"]["round 1"]["value"])
    tiny = next(r for r in even["rows"] if r["model"]["name"] == "sentiment-tiny")
    static, round_1 = (tiny["datasets"][n]["value"] for n in ("static", "round 1"))
    weighted = client.get("/api/tasks/sentiment/leaderboard/?dataset_weights=0:3").json()
    row = next(r for r in weighted["rows"] if r["model"]["name"] == "sentiment-tiny")
    assert row["metrics"]["performance"]["value"] == pytest.approx((3 * static + round_1) / 4)
    low, high = row["metrics"]["performance"]["ci_low"], row["metrics"]["performance"]["ci_high"]
    assert low <= row["metrics"]["performance"]["value"] <= high
    for bad, reason in (("7:1", "no test set for round 7"), ("0:0,1:0", "add up to 0"), ("0:6", "from 0 to 5"),
                        ("static:1", "not ROUND:WEIGHT"), ("0:1,0:2", "weighted twice"), ("0:nan", "from 0 to 5")):
        for fmt in ("json", "csv"):
            response = client.get(f"/api/tasks/sentiment/leaderboard/?dataset_weights={bad}&format={fmt}")
            assert response.status_code == 400, bad
            assert reason in response.json()["errors"]["dataset_weights"][0], bad
    page = client.get("/tasks/sentiment/leaderboard/?dataset-0=0&dataset-1=2").content.decode()
    assert 'name="dataset-1" min="0" max="5" step="0.5" value="2.0"' in page
    assert "dataset_weights=0%3A0%2C1%3A2" in page  # the exports and sort links keep the weighting
    assert client.get("/tasks/sentiment/leaderboard/?dataset-9=1").status_code == 400


def test_the_cached_board_follows_visibility_changes_and_never_leaks_private_models(
        boarded, client, client_for, annotator, researcher, django_assert_max_num_queries):
    task, models = boarded
    url = "/api/tasks/sentiment/leaderboard/"

    def names(api):
        return {row["model"]["name"] for row in api.get(url).json()["rows"]}

    assert "sentiment-other" in names(client)
    with django_assert_max_num_queries(2):  # cached: the task, and nothing else for a visitor
        client.get(url)
    other = models[1]
    other.is_public, other.created_by = False, annotator
    other.save()  # the owner makes it private: every cached board of the task is dropped
    assert "sentiment-other" not in names(client)
    owner = client_for(annotator)
    assert "sentiment-other" in names(owner)  # the owner's own board (cached for them alone)
    assert "sentiment-other" not in names(client)  # ... and the public one still lacks it
    from django.contrib.auth import get_user_model

    stranger = get_user_model().objects.create_user("stranger", password="x" * 20)
    assert "sentiment-other" not in names(client_for(stranger))
    assert "sentiment-other" in names(client_for(researcher))
    assert "sentiment-other" not in client.get(url + "?format=csv").content.decode()
    Evaluation.objects.filter(model_version=models[0]).delete()  # an evaluation gone: the model leaves the board
    assert "sentiment-tiny" not in names(client_for(researcher))


def test_the_task_page_reads_the_static_baseline_once_per_board_version(boarded, client):
    """The public task page shows today's target beside the majority-class answer; that
    answer reads every training label, so it is cached with the boards and dropped with them."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as first:
        page = client.get("/tasks/sentiment/").content.decode()
    assert "for always answering the most common label" in page
    with CaptureQueriesContext(connection) as second:
        again = client.get("/tasks/sentiment/").content.decode()
    assert again == page
    assert len(second.captured_queries) == len(first.captured_queries) - 2  # the labels of train and test
    from leaderboard.board import forget

    forget(boarded[0].pk)
    with CaptureQueriesContext(connection) as third:
        client.get("/tasks/sentiment/")
    assert len(third.captured_queries) == len(first.captured_queries)


def test_weight_variants_share_one_cached_board_and_the_page_is_throttled(boarded, client, monkeypatch):
    """Cache-busting: 1.00001, 1.00002 ... are each a new key and a board computed afresh.
    Rounded to one decimal before the cache, they are the same board; and the HTML page
    counts against the same throttle as the API."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.settings import api_settings
    from rest_framework.throttling import AnonRateThrottle

    def queries(variant):
        with CaptureQueriesContext(connection) as seen:
            response = client.get(f"/api/tasks/sentiment/leaderboard/?weights=throughput:{variant}")
        assert response.status_code == 200 and response.json()["weights"]["throughput"] == 1.0
        return len(seen)

    computed, cached = queries("1"), queries("1")
    assert cached < computed  # the board of "1" is computed once, then read from the cache
    for variant in ("1.00001", "1.04", "0.96"):  # the same board: no computation
        assert queries(variant) == cached, variant
    assert client.get("/api/tasks/sentiment/leaderboard/?weights=performance:0.01,throughput:0,memory:0,"
                      "robustness:0,fairness:0,calibration:0").status_code == 400  # all 0 once rounded

    monkeypatch.setattr(AnonRateThrottle, "THROTTLE_RATES", {**api_settings.DEFAULT_THROTTLE_RATES, "anon": "3/min"})
    statuses = [client.get("/tasks/sentiment/leaderboard/").status_code for _ in range(4)]
    assert statuses[-1] == 429 and statuses.count(429) >= 1
    refused = client.get("/tasks/sentiment/leaderboard/")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
