"""The admin's lists over big tables cost the same at any size: a bounded count (never
a COUNT over the whole table), filter choices from small tables, exact searches on
indexed fields (and words through a GIN index on PostgreSQL), orders an index serves."""

import re
import uuid
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlencode

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from annotation.models import AnnotationSession, Example, Validation, ValidatorReliability
from crowd.models import Assignment, Batch, BonusPayment, Hit, WorkerIdentity
from jobs.models import Job
from tasks.models import Context, Task

BIG_TABLES = ("annotation_example", "annotation_validation", "annotation_annotationsession", "tasks_context",
              "crowd_assignment", "crowd_bonuspayment", "annotation_validatorreliability")


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


class Rows:
    """Grows every big table of one task by ``n`` rows at a time."""

    def __init__(self, task, annotator):
        self.task, self.annotator, self.made = task, annotator, 0
        self.round = task.open_round()
        self.batch = Batch.objects.create(task=task, round=self.round, mode="create", sandbox=True, title="t",
                                          description="d", hits=1, assignments_per_hit=100, reward=Decimal("0.50"))
        self.hit = Hit.objects.create(batch=self.batch, number=1, hit_id=f"HIT{task.pk}")

    def grow(self, n: int):
        users = get_user_model().objects.bulk_create(
            [get_user_model()(username=f"v{self.task.pk}-{self.made + i}") for i in range(n)])
        users = list(get_user_model().objects.filter(username__in=[u.username for u in users]).order_by("pk"))
        start = timezone.now() - timedelta(days=1)
        examples = Example.objects.bulk_create([
            Example(task=self.task, round=self.round, annotator=self.annotator, inputs={"hypothesis": f"words {i}"},
                    target={"label": "neutral"}, external_uid=f"ext-{self.task.pk}-{self.made + i}",
                    created_at=start + timedelta(seconds=self.made + i)) for i in range(n)])
        examples = Example.objects.filter(task=self.task).order_by("-pk")[:n]
        Validation.objects.bulk_create([Validation(example=e, task_id=e.task_id, validator=u, label="correct")
                                        for e, u in zip(examples, users, strict=True)])
        sessions = AnnotationSession.objects.bulk_create(
            [AnnotationSession(user=u, task=self.task, created_at=start) for u in users])
        sessions = list(AnnotationSession.objects.filter(user__in=users).order_by("pk"))
        Context.objects.bulk_create([Context(task=self.task, fields={"premise": "p"}, tag="hard",
                                             external_id=f"c-{self.made + i}") for i in range(n)])
        Job.objects.bulk_create([Job(kind=Job.Kind.HEALTH_CHECK, task=self.task) for _ in range(n)])
        ValidatorReliability.objects.bulk_create([
            ValidatorReliability(task=self.task, validator=u, s_hits=1, s_misses=1, t_hits=1, t_misses=1, votes=i,
                                 sensitivity=.5, specificity=.5, accuracy=.5, accuracy_low=.1, accuracy_high=.9,
                                 weight=0, fitted_at=start) for i, u in enumerate(users)])
        WorkerIdentity.objects.bulk_create([WorkerIdentity(user=u, worker_id=f"W{u.pk}") for u in users])
        workers = {w.user_id: w for w in WorkerIdentity.objects.filter(user__in=users)}
        Assignment.objects.bulk_create([
            Assignment(hit=self.hit, assignment_id=f"A{s.pk}", worker=workers[s.user_id], session=s,
                       submit_to="https://workersandbox.mturk.com", deadline=start) for s in sessions])
        BonusPayment.objects.bulk_create([
            BonusPayment(assignment=a, reason="verified-fooling", amount=Decimal("0.25"), example_count=1,
                         message="m", unique_request_token=f"t{a.pk}")
            for a in Assignment.objects.filter(session__in=sessions)])
        self.made += n


@pytest.fixture
def rows(demo_tasks, annotator):
    return Rows(demo_tasks["nli"], annotator)


def lists(task, example):
    """Each big list with its filters and searches: (model, query parameters)."""
    week = str(timezone.now() - timedelta(days=7))
    return [
        (Example, {}), (Example, {"task__id__exact": task.pk}), (Example, {"flagged__exact": "1"}),
        (Example, {"validation_status__exact": "pending", "fooled__isnull": "True"}),
        (Example, {"created_at__gte": week}), (Example, {"q": str(example.uid)}),
        (Example, {"task__id__exact": task.pk, "round__id__exact": example.round_id}),
        (Example, {"round__number": "1"}),
        (Example, {"q": example.external_uid}), (Example, {"q": "annotator"}), (Example, {"q": "not-a-uuid"}),
        (Example, {"q": "words"}),
        (Validation, {}), (Validation, {"task__id__exact": task.pk, "label__exact": "correct"}),
        (Validation, {"q": str(example.uid)}), (Validation, {"q": "v1"}),
        (AnnotationSession, {}), (AnnotationSession, {"task__id__exact": task.pk, "revoked_at__isempty": "1"}),
        (AnnotationSession, {"q": "annotator"}),
        (Context, {}), (Context, {"task__id__exact": task.pk}), (Context, {"q": "hard"}),
        (Job, {}), (Job, {"task__id__exact": task.pk}),
        (ValidatorReliability, {}), (ValidatorReliability, {"q": "v1"}),
        (Assignment, {}), (Assignment, {"status__exact": "working"}), (Assignment, {"q": "W1"}),
        (BonusPayment, {}), (BonusPayment, {"status__exact": "pending", "amount": "paid"}),
    ]


def visit(client, model, params, expect=200):
    url = changelist(model) + ("?" + urlencode(params) if params else "")
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == expect, (url, response.status_code)
    return response, [q["sql"] for q in queries.captured_queries]


def use_small_pages(monkeypatch):
    """Pages of 4 rows ("Show all" up to 8), counted up to 20: a list of 50 rows is capped, one of 5 is not."""
    for model in (Example, Validation, AnnotationSession, Context, Job, ValidatorReliability, Assignment,
                  BonusPayment, WorkerIdentity):
        model_admin = admin.site.get_model_admin(model)
        monkeypatch.setattr(model_admin, "list_per_page", 4)
        monkeypatch.setattr(model_admin, "list_max_show_all", 8)
        monkeypatch.setattr(model_admin, "list_count_limit", 20)


@pytest.fixture
def small_pages(monkeypatch):
    use_small_pages(monkeypatch)


@pytest.mark.parametrize("pages", ["one page", "capped"])
@pytest.mark.parametrize("persona", ["superuser", "researcher"])
def test_each_big_list_makes_as_many_queries_at_50_rows_as_at_5(rows, client, request, persona, pages,
                                                                 monkeypatch):
    """On one page, 5 rows then 50 are shown (a query per row would show); capped, 50 rows
    are counted to the bound and paged."""
    if pages == "capped":
        use_small_pages(monkeypatch)
    client.force_login(request.getfixturevalue(persona))
    rows.grow(5)
    example = Example.objects.order_by("pk").first()
    cases = lists(rows.task, example)
    few = {(m, str(p)): len(visit(client, m, p)[1]) for m, p in cases}
    rows.grow(45)
    many = {(m, str(p)): len(visit(client, m, p)[1]) for m, p in cases}
    assert many == few
    cl = visit(client, Example, {})[0].context["cl"]
    assert (cl.paginator.capped, len(cl.result_list)) == ((True, 4) if pages == "capped" else (False, 50))


def test_worker_identities_list_the_same_queries_at_any_size(rows, client, superuser, small_pages):
    client.force_login(superuser)
    rows.grow(5)
    few = [len(visit(client, WorkerIdentity, p)[1]) for p in ({}, {"q": "W1"}, {"sandbox__exact": "1"})]
    rows.grow(45)
    assert [len(visit(client, WorkerIdentity, p)[1]) for p in ({}, {"q": "W1"}, {"sandbox__exact": "1"})] == few
    # The count reads identities only, not each one's work (the page's per-row subqueries).
    [count] = [s for s in visit(client, WorkerIdentity, {})[1] if s.startswith("SELECT COUNT(")]
    assert "LIMIT" in count and "annotation_example" not in count and "crowd_assignment" not in count


def test_counts_are_bounded_and_filters_read_no_distinct_values(rows, client, superuser, researcher, small_pages):
    rows.grow(30)
    example = Example.objects.order_by("pk").first()
    for user in (superuser, researcher):
        client.force_login(user)
        for model, params in lists(rows.task, example):
            _, sql = visit(client, model, params)
            assert not [s for s in sql if "DISTINCT" in s.upper()], (model, params)
            for s in sql:
                if "COUNT(" in s.upper() and any(f'"{table}"' in s for table in BIG_TABLES):
                    if model is BonusPayment and "SUM(" in s.upper():
                        continue  # the ledger's totals above the list (crowd.costs.bonus_totals)
                    assert "LIMIT" in s.upper(), (model, params, s)


def test_a_capped_list_says_more_than_and_offers_only_the_pages_it_counted(rows, client, superuser, small_pages):
    rows.grow(30)
    client.force_login(superuser)
    page, _ = visit(client, Example, {})
    html = page.content.decode()
    assert "More than 20 examples: the pages hold the first 20" in html
    assert "more than 20 results" in html
    assert "Select all examples, on every page (more than 20)" in html
    cl = page.context["cl"]
    assert (cl.result_count, cl.paginator.num_pages, cl.can_show_all) == (20, 5, False)
    last, _ = visit(client, Example, {"p": "5"})
    assert len(last.context["cl"].result_list) == 4
    beyond, _ = visit(client, Example, {"p": "6"}, expect=302)
    assert beyond.url.endswith("?e=1")  # the admin's "bad parameters" page, not a deep OFFSET
    # A list within the bound reads as before: its count, exactly.
    narrow, _ = visit(client, Example, {"q": Example.objects.first().external_uid})
    narrow_html = narrow.content.decode()
    assert "1 example\n" in narrow_html and "More than" not in narrow_html and "more than" not in narrow_html


def test_the_task_filter_lists_the_task_table_scoped_to_the_researchers_tasks(rows, client, researcher,
                                                                            other_researcher):
    for slug, name in (("spare", "A spare task"), ("another", "Another spare task")):
        Task.objects.create(slug=slug, name=name, task_type="classification", config={}).owners.add(other_researcher)
    Task.objects.create(slug="foreign", name="Someone else's task", task_type="classification", config={})
    rows.grow(3)
    client.force_login(other_researcher)
    for model, params in ((Example, {}), (Validation, {}), (AnnotationSession, {}), (Context, {})):
        page, sql = visit(client, model, params)
        choices = [c["display"] for spec in page.context["cl"].filter_specs
                   if spec.title in ("task",) for c in spec.choices(page.context["cl"])]
        assert choices == ["All", "A spare task", "Another spare task"], model  # tasks without rows: the Task table
        assert page.context["cl"].result_count == 0
        assert not [s for s in sql if "DISTINCT" in s.upper()]
    client.force_login(researcher)
    page, _ = visit(client, Example, {})
    [spec] = [s for s in page.context["cl"].filter_specs if s.title == "task"]
    assert {label for _, label in spec.lookup_choices} == set(
        Task.objects.filter(owners=researcher).values_list("name", flat=True))


@pytest.mark.parametrize("persona", ["superuser", "researcher"])
def test_the_example_search_finds_exact_ids_and_survives_bad_text(rows, client, request, persona, annotator):
    rows.grow(3)
    client.force_login(request.getfixturevalue(persona))
    example = Example.objects.order_by("pk").first()

    def found(term):
        page, _ = visit(client, Example, {"q": term})
        return {e.pk for e in page.context["cl"].result_list}

    assert found(str(example.uid)) == {example.pk}
    assert found(example.uid.hex.upper()) == {example.pk}  # any spelling of the UUID
    assert found(example.external_uid) == {example.pk}
    assert found(f'"{example.external_uid}"') == {example.pk}
    assert found(annotator.username) == set(Example.objects.values_list("pk", flat=True))
    assert found(str(example.uid)[:8]) == set()  # exact, not a substring
    assert found("not-a-uuid {[(%_") == set()
    assert found(str(uuid.uuid4())) == set()
    other = Example.objects.order_by("pk").last()
    assert found(f"{example.external_uid} {other.external_uid}") == {example.pk, other.pk}  # any of the ids


def test_the_other_lists_search_exact_values(rows, client, superuser):
    rows.grow(3)
    client.force_login(superuser)
    example = Example.objects.order_by("pk").first()
    validation = Validation.objects.get(example=example)
    session = AnnotationSession.objects.order_by("pk").first()
    assignment = Assignment.objects.order_by("pk").first()
    context = Context.objects.order_by("pk").first()
    cases = [
        (Validation, str(example.uid), {validation.pk}),
        (Validation, validation.validator.username, {validation.pk}),
        (AnnotationSession, str(session.key), {session.pk}),
        (AnnotationSession, "not-a-key", set()),
        (Context, context.external_id, {context.pk}),
        (Assignment, assignment.assignment_id, {assignment.pk}),
        (Assignment, assignment.worker.worker_id, {assignment.pk}),
        (BonusPayment, assignment.worker.worker_id, {assignment.bonuses.get().pk}),
        (WorkerIdentity, assignment.worker.worker_id, {assignment.worker.pk}),
        (ValidatorReliability, validation.validator.username,
         set(ValidatorReliability.objects.filter(validator=validation.validator).values_list("pk", flat=True))),
    ]
    for model, term, expected in cases:
        page, _ = visit(client, model, {"q": term})
        assert {row.pk for row in page.context["cl"].result_list} == expected, (model, term)


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_on_postgresql_the_example_search_finds_words_through_the_gin_index(rows, client, superuser):
    rows.grow(3)
    Example.objects.filter(pk=Example.objects.order_by("pk").first().pk).update(
        inputs={"hypothesis": "The zebras were galloping"})
    client.force_login(superuser)
    page, sql = visit(client, Example, {"q": "zebra gallop"})  # stemmed: zebras, galloping
    assert [e.inputs["hypothesis"] for e in page.context["cl"].result_list] == ["The zebras were galloping"]
    [words] = [s for s in sql if "to_tsvector" in s]
    # Without plain index walks, the words are found through the GIN index: the search's
    # expression is the index's. The page itself computes no row's words.
    plan = explain(words, "enable_indexscan")
    assert "Bitmap Index Scan on example_inputs_words" in plan, plan
    assert "to_tsvector" not in main_query(sql, "annotation_example")
    page, _ = visit(client, Example, {"q": "zebra -gallop"})
    assert list(page.context["cl"].result_list) == []


@pytest.mark.skipif("connection.vendor != 'postgresql'")
def test_on_postgresql_a_words_search_holds_at_most_a_lists_count_and_says_so(rows, client, superuser,
                                                                             small_pages):
    rows.grow(30)  # every example's inputs say "words"
    client.force_login(superuser)
    page, _ = visit(client, Example, {"q": "words"})
    assert page.context["cl"].paginator.capped and page.context["cl"].result_count == 20
    assert ("More than 20 examples have these words: the list holds 20 of them, the first their index found"
            in page.content.decode())
    page, _ = visit(client, Example, {"q": "words 7"})  # the number is a word too
    assert [e.inputs["hypothesis"] for e in page.context["cl"].result_list] == ["words 7"]
    assert "have these words" not in page.content.decode()


def main_query(sql, table):
    """The list's page of rows: the SELECT on ``table`` with an ORDER BY, not a count."""
    [query] = [s for s in sql if s.startswith("SELECT") and f'FROM "{table}"' in s and "ORDER BY" in s
               and "COUNT(" not in s]
    return query


def explain(sql, *also_off) -> str:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Tables of a few rows are read whole by choice: ask whether an index can serve it.
            for setting in ("enable_seqscan", "enable_sort", *also_off):
                cursor.execute(f"SET LOCAL {setting} = off")
            cursor.execute("EXPLAIN " + sql)
            return "\n".join(row[0] for row in cursor.fetchall())
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return "\n".join(row[-1] for row in cursor.fetchall())


@pytest.mark.parametrize(("model", "table", "params", "index"), [
    (Example, "annotation_example", {}, "created_at"),
    (Example, "annotation_example", {"task__id__exact": "TASK"}, "example_task_created"),
    (Example, "annotation_example", {"round__id__exact": "ROUND"}, "example_round_created"),
    (Example, "annotation_example", {"task__id__exact": "TASK", "round__id__exact": "ROUND"}, "example_round_created"),
    (Validation, "annotation_validation", {}, "validation_created"),
    (AnnotationSession, "annotation_annotationsession", {}, "session_created"),
    (Context, "tasks_context", {}, None),
    (Context, "tasks_context", {"task__id__exact": "TASK"}, "task_id"),
    (ValidatorReliability, "annotation_validatorreliability", {}, "reliability_task_votes"),
    (Assignment, "crowd_assignment", {}, "assignment_accepted"),
    (BonusPayment, "crowd_bonuspayment", {}, "bonus_created"),
], ids=lambda v: v.__name__ if isinstance(v, type) else None)
def test_each_big_list_is_read_in_the_order_of_an_index(rows, client, superuser, model, table, params, index):
    rows.grow(5)
    client.force_login(superuser)
    params = {k: {"TASK": rows.task.pk, "ROUND": rows.round.pk}.get(v, v) for k, v in params.items()}
    _, sql = visit(client, model, params)
    plan = explain(main_query(sql, table))
    if connection.vendor == "postgresql":
        assert not re.search(r"(^|-> +)Sort\b", plan, re.MULTILINE), plan  # an incremental sort on ties is fine
        assert not re.search(rf"Seq Scan on {table}\b", plan), plan
        assert re.search(rf"Index (Only )?Scan (Backward )?using \S*{index or 'pkey'}\S* on {table}", plan), plan
    else:
        assert "USE TEMP B-TREE FOR ORDER BY" not in plan, plan
        if index:
            assert re.search(rf"(SCAN|SEARCH) {table} USING (COVERING )?INDEX \S*{index}", plan), plan
        else:
            assert re.search(rf"^SCAN {table}$", plan, re.MULTILINE), plan  # the table's own b-tree, by id


def test_every_task_scoped_list_refuses_a_task_or_batch_outside_the_users_with_400(rows, client, other_researcher):
    """Not an empty list that looks like "no rows", nor the admin's silent redirect: a 400
    that says which filter value is not one of the user's."""
    rows.grow(2)
    client.force_login(other_researcher)
    for model, params in ((Validation, {"task__id__exact": rows.task.pk}),
                          (AnnotationSession, {"task__id__exact": rows.task.pk}),
                          (Context, {"task__id__exact": "x1"}), (Job, {"task__id__exact": rows.task.pk}),
                          (Assignment, {"hit__batch__id__exact": rows.batch.pk})):
        page, _ = visit(client, model, params, expect=400)
        text = page.content.decode()
        assert "among your" in text or "is not the id of a" in text, (model, text[:1000])
