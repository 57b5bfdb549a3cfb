"""The leaderboard page when weights are refused, and its notes on reading the Dynascore.

A refused weight: the message once (no field named twice), the board kept under the
defaults for what was refused (the page says which), each refused slider back at its
default and each valid one as sent; still 400, as the API answers, whose error body
carries the same message once. The notes: what a one-model board and a negative
Dynascore mean, shown in those states only."""

import html
import re

import pytest

from leaderboard import board
from leaderboard.models import Evaluation
from tests.leaderboard.test_board import boarded  # noqa: F401  (the fixture and its data)

pytestmark = pytest.mark.django_db

PAGE = "/tasks/sentiment/leaderboard/"
API = "/api/tasks/sentiment/leaderboard/"
ONLY_PERFORMANCE = "performance=5&throughput=0&memory=0&robustness=0&fairness=0&calibration=0"


def flat(response) -> str:
    return " ".join(response.content.decode().split())


def error_of(page: str) -> str:
    found = re.search(r'id="weights-error">([^<]*)<', page)
    return html.unescape(found.group(1)) if found else ""


def slider(page: str, name: str) -> tuple[str, str]:
    """A slider's value and the number shown beside it."""
    found = re.search(rf'name="{name}" min="0" max="5" step="0.5" value="([^"]*)"[^>]*> <output>([^<]*)</output>', page)
    return found.groups()


def board_rows(page: str) -> list[str]:
    return re.findall(r'<tr data-model="([^"]*)"', page)


def test_a_weight_that_is_not_a_number_keeps_the_board_under_the_defaults(boarded, client):  # noqa: F811
    default = flat(client.get(PAGE))
    response = client.get(f"{PAGE}?performance=abc")
    page = flat(response)
    assert response.status_code == 400
    assert error_of(page) == ("weights: the weight of performance must be a number, got 'abc'. "
                              "The board below uses the default weight of performance (4) instead.")
    assert page.count('id="weights-error"') == 1 and "weights: weights:" not in html.unescape(page)
    assert slider(page, "performance") == ("4.0", "4.0")  # back at its default, "abc" nowhere
    assert "abc" not in page.replace(error_of(page).replace("'", "&#x27;"), "")
    assert board_rows(page) == board_rows(default) and len(board_rows(page)) == 3
    # The exports and sort links give that same board: the default weights.
    assert "weights=performance%3A4%2Cthroughput%3A1%2Cmemory%3A1%2Crobustness%3A1%2Cfairness%3A1%2C" \
           "calibration%3A0" in page


def test_a_valid_weight_sent_with_a_refused_one_stays_and_the_board_uses_it(boarded, client):  # noqa: F811
    page = flat(client.get(f"{PAGE}?{ONLY_PERFORMANCE.replace('performance=5', 'performance=9')}"))
    assert error_of(page) == ("weights: the weight of performance must be between 0 and 5, got 9. "
                              "The board below uses the default weight of performance (4) instead.")
    assert slider(page, "performance") == ("4.0", "4.0") and slider(page, "memory") == ("0.0", "0.0")
    assert "weights=performance%3A4%2Cthroughput%3A0%2Cmemory%3A0" in page


@pytest.mark.parametrize(("query", "message"), [
    ("weights=performance:abc", "weights: the weight of performance must be a number, got 'abc'. "
                                "The board below uses the default weights instead."),
    ("performance=0&throughput=0&memory=0&robustness=0&fairness=0&calibration=0",
     "weights: at least one weight must be above 0. The board below uses the default weights instead."),
    ("dataset-0=1&dataset-1=9", "dataset_weights: the weight of round 1 must be a number from 0 to 5, got '9'. "
                                "The board below uses the default weight of round 1 (1) instead."),
    ("dataset-0=0&dataset-1=0", "dataset_weights: The dataset weights add up to 0: give at least one dataset a "
                                "weight above 0. The board below uses the default dataset weights instead."),
    ("dataset-9=1", "dataset_weights: The task has no test set for round 9 (rounds with one: 0, 1). "
                    "The board below uses the default dataset weights instead."),
])
def test_each_refusal_says_once_what_is_wrong_and_which_defaults_the_board_uses(boarded, client, query,  # noqa: F811
                                                                                  message):
    response = client.get(f"{PAGE}?{query}")
    page = flat(response)
    assert response.status_code == 400 and error_of(page) == message
    assert len(board_rows(page)) == 3
    for name, value in (("performance", "4.0"), ("memory", "1.0"), ("dataset-0", "1.0"), ("dataset-1", "1.0")):
        assert slider(page, name)[0] == value, (query, name)


def test_the_api_answers_400_with_the_message_once(boarded, client):  # noqa: F811
    body = client.get(f"{API}?weights=performance:abc").json()
    assert body["detail"] == "weights: the weight of performance must be a number, got 'abc'."
    assert body["errors"] == {"weights": ["the weight of performance must be a number, got 'abc'."]}
    response = client.get(f"{API}?dataset_weights=0:1,0:2")
    assert response.status_code == 400
    assert response.json()["detail"] == "dataset_weights: round 0 is weighted twice."


def test_one_model_on_the_board_says_the_other_weights_change_nothing(boarded, client):  # noqa: F811
    task, models = boarded
    assert "one-model-note" not in flat(client.get(PAGE))  # two models
    Evaluation.objects.filter(model_version=models[1]).delete()
    board.forget(task.pk)
    page = flat(client.get(PAGE))
    assert len(board_rows(page)) == 2  # one model and the majority-class reference row
    note = re.search(r'id="one-model-note">([^<]*)<', page).group(1)
    assert "With one model on the board" in note and "change neither its score nor the ranking" in note
    assert "relative to the models on the board" in note
    # What it says holds: the Dynascore is the performance, whatever the other weights.
    for query in ("", "performance=1&memory=5&throughput=0", "performance=2&calibration=5&fairness=5"):
        row = client.get(f"{API}?weights={query.replace('=', ':').replace('&', ',')}").json()["rows"][0]
        assert row["dynascore"] == pytest.approx(row["metrics"]["performance"]["value"])


def test_a_negative_dynascore_is_explained_only_when_one_is_shown(boarded, client):  # noqa: F811
    task, models = boarded
    # The two tiny models score the same; make the second better, so that the other
    # metrics are priced in units of performance and memory can pull a score below 0.
    # Throughput and memory are set too: measured, they vary with the machine's load,
    # and so would the sign of a score.
    for model, accuracy, memory in ((models[0], None, 100.0), (models[1], 0.75, 90.0)):
        for evaluation in Evaluation.objects.filter(model_version=model):
            evaluation.metrics = {**evaluation.metrics, "throughput": 100.0, "memory_mb": memory,
                                  **({"accuracy": accuracy} if accuracy is not None else {})}
            evaluation.save(update_fields=["metrics"])
    board.forget(task.pk)
    for query, negative in (("", True), (ONLY_PERFORMANCE, False)):
        weights = ",".join(part.replace("=", ":") for part in query.split("&")) if query else ""
        rows = [row for row in client.get(f"{API}?weights={weights}").json()["rows"] if row["rank"]]
        assert any(row["dynascore"] < 0 or row["dynascore_ci_low"] < 0 for row in rows) is negative, rows
        page = flat(client.get(f"{PAGE}?{query}"))
        assert ("negative-note" in page) is negative, query
        assert "one-model-note" not in page
    note = re.search(r'id="negative-note">([^<]*)<', flat(client.get(PAGE))).group(1)
    assert "A negative Dynascore is not a failing score" in html.unescape(note)
    assert "only the differences between rows mean something" in note
