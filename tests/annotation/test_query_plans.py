"""The hot paths' query plans, on the database under test (SQLite here; PostgreSQL in
CI): no statement reads the examples or validations whole, and none runs a subquery
over them once per row (``tests/plans.py``). And the check itself fails on the plans
this rule exists for."""

import pytest
from django.db.models import Count, IntegerField, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce

from annotation import gold, serving, validation
from annotation.models import Example, Validation
from tasks.models import Round

from ..plans import plan_problems, problems_of
from .test_adaptive_validation import adaptive, known
from .test_counters import account, vote, write

pytestmark = pytest.mark.django_db


@pytest.fixture
def study(demo_tasks, researcher):
    """A small study: three writers, a mix of outcomes, votes and blind answers."""
    task = demo_tasks["sentiment"]
    writers = [account(f"pw{i}") for i in range(3)]
    validators = [account(f"pv{i}") for i in range(3)]
    written = [write(task, writers[i % 3], fooled=i % 3 == 0, text=f"s{i}") for i in range(12)]
    for i, example in enumerate(written[:6]):
        vote(validators[i % 3], example, "correct" if i % 2 else "incorrect")
    validation.validate_example(written[7].pk, researcher, label="correct")
    return task, validators


def assert_clean(run):
    found = plan_problems(run)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("path", ["/", "/tasks/sentiment/", "/tasks/sentiment/leaderboard/",
                                  "/api/tasks/sentiment/rounds/", "/api/tasks/sentiment/rounds/1/stats/"])
def test_public_pages_and_round_endpoints_walk_indexes(study, anonymous, path):
    assert_clean(lambda: anonymous.get(path))


def test_the_researchers_task_page_walks_indexes(study, client_for, researcher):
    client = client_for(researcher)
    assert_clean(lambda: client.get("/tasks/sentiment/"))


def test_the_next_item_to_validate_is_an_index_walk(study, client_for):
    task, validators = study
    client = client_for(account("fresh-validator"))
    assert_clean(lambda: client.get("/api/tasks/sentiment/validations/next/"))
    client = client_for(validators[0])  # one with decisions of their own to leave out
    assert_clean(lambda: client.get("/api/tasks/sentiment/validations/next/"))
    expert = known(adaptive(task), validators[1])
    assert_clean(lambda: serving.next_for(task, expert))


def test_a_gold_draw_walks_the_gold_index(study, researcher):
    """Serving a gold item (every draw, here) reads pages of the gold index and the
    validator's answers to those pages: no sort of the gold set, no subquery per item."""
    task, validators = study
    for example in Example.objects.filter(task=task, annotator__isnull=False, validation_status="pending")[:3]:
        validation.mark_gold(example.pk, researcher, "correct")
    task.config = {**task.config, "validation": {**task.config.get("validation", {}), "gold_rate": 1.0}}
    task.save()
    assert gold.pick(task, validators[0]) is not None
    found = plan_problems(lambda: gold.pick(task, validators[0]), sorts=False)
    assert not found, "\n".join(found)
    assert_clean(lambda: serving.next_for(task, validators[2]))


def test_the_check_fails_on_a_full_scan_and_on_a_count_run_once_per_row(study):
    """The rule can fail: a filter no index serves, and the round counts this issue
    replaced (a correlated count inside a GROUP BY, run once per joined example)."""
    task, _ = study
    scan = Example.objects.filter(latency_ms__gt=5.0)
    assert any(p.startswith("full scan") for p in problems_of(*scan.query.sql_with_params()))
    decided = (Validation.objects.filter(example__round=OuterRef("pk")).exclude(label="").order_by()
               .values("example__round").annotate(n=Count("pk")).values("n"))
    quadratic = Round.objects.filter(task=task).annotate(
        n_collected=Count("examples", filter=Q(examples__source="annotation")),
        n_validations=Coalesce(Subquery(decided, output_field=IntegerField()), Value(0)))
    found = problems_of(*quadratic.query.sql_with_params())
    assert any(p.startswith("subquery once per row") or p.startswith("full scan") for p in found), found


def test_the_queue_and_the_hit_preview_walk_an_index_in_its_order(study):
    """No sort of the task's pending or verified examples: the first row of an index."""
    from crowd.views import _sample

    task, validators = study
    for queue in (serving.validation_queue(task, validators[0]),
                  serving.validation_queue(adaptive(task), known(task, validators[1]))):
        assert not problems_of(*queue[:1].query.sql_with_params(), sorts=False)
    found = plan_problems(lambda: _sample(task), sorts=False)
    assert not found, "\n".join(found)


def test_the_sort_check_can_fail(study):
    task, _ = study
    by_text = Example.objects.filter(task=task).order_by("latency_ms")[:1]
    assert any(p.startswith("sorted") for p in problems_of(*by_text.query.sql_with_params(), sorts=False))
