"""What the task page's rounds table and the home page's cards say:
round 0 shows the static examples it holds, not "0 collected"; a verified model error
rate is "–" until an example is decided, not "0%"; a round with no target model is
not "open" on the home page. Every number comes from the counters, never from counting
rows on a page."""

import re

import pytest

from annotation import counters
from annotation.models import Example
from annotation.stats import verified_rate
from registry.models import ModelVersion
from tasks import services as task_services

pytestmark = pytest.mark.django_db


def _row(page: str, number: int) -> list[str]:
    """The cells of round ``number``'s row of the rounds table, as text."""
    table = re.search(r'<table class="rounds"[^>]*>(.*?)</table>', page, re.S).group(1)
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S):
        cells = [" ".join(re.sub(r"<[^>]+>", " ", cell).split())
                 for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
        if cells and cells[0].split()[0] == str(number):
            return cells
    raise AssertionError(f"no row for round {number}")


def _static(task, split, n, start=0, **fields):
    rnd = task_services.ensure_static_round(task)
    for i in range(start, start + n):
        Example.objects.create(task=task, round=rnd, split=split, source="import", validation_status="verified",
                               external_uid=f"{split}-{i}", inputs={"statement": f"Static {i}."},
                               target={"label": "hateful"}, **fields)
    return rnd


def _written(task, n, *, fooled=0, status="pending"):
    rnd, context = task.open_round(), task.contexts.first()
    return [Example.objects.create(task=task, round=rnd, context=context, inputs={"statement": f"Written {i}."},
                                   target={"label": "hateful"}, fooled=i < fooled, validation_status=status)
            for i in range(n)]


def test_round_0_shows_its_static_examples_from_the_counters(demo_tasks, client, django_assert_max_num_queries):
    task = demo_tasks["hate"]
    _static(task, "train", 3)
    _static(task, "dev", 1)
    _static(task, "test", 2)
    _static(task, "train", 1, start=10, flagged=True)  # flagged: no model learns from it
    _written(task, 2)
    with django_assert_max_num_queries(6):  # as without round 0 (its counts come with the rounds), and the releases
        page = client.get("/tasks/hate/").content.decode()
    round_0, round_1 = _row(page, 0), _row(page, 1)
    assert round_0[3] == "6 static" and round_0[4:] == ["–", "–", "–", "–"], round_0
    assert 'class="static-count" title="Imported from a data set, not written here' in page
    assert round_1[3] == "2 written", round_1

    # The page reads the counter, not the rows: a change that goes around the counters
    # shows only once the reconcile has recounted them.
    Example.objects.filter(round__number=0, split="test").update(flagged=True)
    assert _row(client.get("/tasks/hate/").content.decode(), 0)[3] == "6 static"
    counters.reconcile(task)
    assert _row(client.get("/tasks/hate/").content.decode(), 0)[3] == "4 static"


def test_a_verified_rate_with_nothing_decided_is_a_dash_not_zero(demo_tasks, client, anonymous):
    task = demo_tasks["hate"]
    examples = _written(task, 4, fooled=2)
    page = client.get("/tasks/hate/").content.decode()
    cells = _row(page, 1)
    assert cells[3:] == ["4 written", "2", "0", "50%", "–"], cells
    assert 'class="undecided" title="None of its 4 examples is decided yet">–</td>' in page
    assert "round 1: error 50.0%, verified error n/a" in page  # the chart draws no verified bar
    assert anonymous.get("/api/tasks/hate/rounds/1/").json()["verified_model_error_rate"] is None
    assert anonymous.get("/api/tasks/hate/rounds/1/stats/").json()["verified_model_error_rate"] is None

    # One decided example (rejected) makes the rate a number: none of the 4 is a verified fooling one.
    examples[3].validation_status = "rejected"
    examples[3].save()
    assert _row(client.get("/tasks/hate/").content.decode(), 1)[3:] == ["4 written", "2", "0", "50%", "0%"]
    assert anonymous.get("/api/tasks/hate/rounds/1/").json()["verified_model_error_rate"] == 0
    # A verified fooling one: 1 of the 4.
    examples[0].validation_status = "verified"
    examples[0].save()
    assert _row(client.get("/tasks/hate/").content.decode(), 1)[3:] == ["4 written", "2", "1", "50%", "25%"]
    assert anonymous.get("/api/tasks/hate/rounds/1/stats/").json()["verified_model_error_rate"] == 0.25


def test_verified_rate():
    assert verified_rate(0, 4, 0) is None and verified_rate(0, 0, 0) is None
    assert verified_rate(0, 4, 1) == 0 and verified_rate(1, 4, 2) == 0.25


def test_the_home_card_says_a_round_without_a_target_is_not_open_for_writing(demo_tasks, client,
                                                                              django_assert_max_num_queries):
    locked = "round 1 waits for its target model: writing opens once one is trained and evaluated"
    page = " ".join(client.get("/").content.decode().split())
    assert page.count(locked) == 4 and "round 1 open" not in page

    model = ModelVersion.objects.create(task=demo_tasks["nli"], name="target", artifact_path="x", sha256="0" * 64)
    demo_tasks["nli"].open_round().target_models.add(model)
    with django_assert_max_num_queries(6):  # the task page, its releases included
        page = " ".join(client.get("/").content.decode().split())
    nli = page[page.index('href="/tasks/nli/"'):]
    nli = nli[:nli.index("</li>")]
    assert "round 1 open · 0 examples written, 0 fooled the model, 0 of them verified" in nli and locked not in nli
    assert page.count(locked) == 3
