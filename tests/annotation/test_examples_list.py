"""GET /api/tasks/<slug>/examples/: the task's examples for its researchers, filtered
and paged with a keyset (tests/explain.py reads the plans)."""

import base64
import itertools
from datetime import datetime

import pytest
from rest_framework.authtoken.models import Token

from annotation.exporting import ANNOTATOR_METADATA_KEY, anonymise
from annotation.listing import task_examples
from annotation.models import Example
from tasks.models import Round

pytestmark = pytest.mark.django_db

URL = "/api/tasks/nli/examples/"
SPLITS = Example.Split.values
STATUSES = Example.ValidationStatus.values


def write(task, rnd=None, n=1, **fields):
    """``n`` examples of ``task`` (in its open round unless ``rnd``), oldest first."""
    rnd = rnd or task.open_round()
    return Example.objects.bulk_create([
        Example(task=task, round=rnd, inputs={"hypothesis": f"h {i}"}, target={"label": "neutral"},
                prediction={"label": "entailment"}, fooled=True, **fields)
        for i in range(n)])


def round_zero(task):
    return Round.objects.get_or_create(task=task, number=0)[0]


def pages(client, url):
    """Every page from ``url`` on, following ``next``."""
    while url:
        response = client.get(url)
        assert response.status_code == 200, response.content
        yield response.json()
        url = response.json()["next"]


# --- who may list ----------------------------------------------------------------------


def test_anonymous_is_401(demo_tasks, anonymous):
    assert anonymous.get(URL).status_code == 401


def test_an_annotator_is_403(demo_tasks, client_for, annotator):
    response = client_for(annotator).get(URL)
    assert response.status_code == 403 and "researchers of task nli" in response.json()["detail"]


def test_a_researcher_of_other_tasks_is_403(demo_tasks, client_for, other_researcher):
    assert client_for(other_researcher).get(URL).status_code == 403


def test_an_mturk_worker_is_403(demo_tasks, client_for, mturk_worker):
    assert client_for(mturk_worker).get(URL).status_code == 403


def test_the_tasks_researcher_is_200(demo_tasks, client_for, researcher):
    assert client_for(researcher).get(URL).json() == {"next": None, "previous": None, "results": []}


def test_a_superuser_is_200(demo_tasks, client_for, superuser):
    assert client_for(superuser).get(URL).status_code == 200


def test_an_api_token_works_for_the_researcher(demo_tasks, anonymous, researcher):
    anonymous.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=researcher).key}")
    assert anonymous.get(URL).status_code == 200


def test_a_session_token_is_403_even_the_researchers_own(demo_tasks, token_client, researcher, annotator):
    for user in (researcher, annotator):
        response = token_client(user, demo_tasks["nli"]).get(URL)
        assert response.status_code == 403 and "session token" in response.json()["detail"]


def test_a_session_token_still_writes_examples_there(demo_tasks, token_client, annotator):
    """The same path's POST takes the token (it gets as far as checking the body)."""
    response = token_client(annotator, demo_tasks["nli"]).post(URL, {}, format="json")
    assert response.status_code == 400 and "context" in response.json()["errors"]


def test_an_unknown_task_is_404_and_a_hidden_one_too_for_non_researchers(demo_tasks, client_for, researcher,
                                                                          annotator):
    assert client_for(researcher).get("/api/tasks/no-such-task/examples/").status_code == 404
    demo_tasks["nli"].is_hidden = True
    demo_tasks["nli"].save(update_fields=["is_hidden"])
    assert client_for(annotator).get(URL).status_code == 404
    assert client_for(researcher).get(URL).status_code == 200


def test_non_researchers_learn_nothing_from_the_parameters(demo_tasks, client_for, annotator):
    """Permission comes first: a bad filter or round is the same 403."""
    client = client_for(annotator)
    assert client.get(URL + "?status=bogus").status_code == 403
    assert client.get(URL + "?round=99").status_code == 403


# --- what a row carries -------------------------------------------------------------------


def test_a_row_has_what_an_export_needs(demo_tasks, client_for, researcher, annotator):
    task = demo_tasks["nli"]
    context = task.contexts.first()
    written = Example.objects.create(
        task=task, round=task.open_round(), context=context, annotator=annotator, inputs={"hypothesis": "A cat."},
        target={"label": "neutral"}, prediction={"label": "entailment", "probabilities": {"entailment": 0.9}},
        model_predictions={"7": {"label": "entailment"}}, fooled=True, split="dev", validation_status="verified",
        validations_correct=2, validations_incorrect=1, flagged=True, flag_reason="odd", metadata={"k": "v"})
    imported = Example.objects.create(
        task=task, round=round_zero(task), inputs={"hypothesis": "B"}, target={"label": "neutral"},
        source="import", external_uid="anli-1", metadata={ANNOTATOR_METADATA_KEY: "a-0123456789abcdef"})
    rows = client_for(researcher).get(URL).json()["results"]
    assert [r["id"] for r in rows] == [imported.pk, written.pk]
    assert rows[1] == {
        "id": written.pk, "uid": str(written.uid), "external_uid": None, "round": 1, "split": "dev",
        "source": "annotation", "context": context.pk, "inputs": {"hypothesis": "A cat."},
        "target": {"label": "neutral"}, "prediction": {"label": "entailment", "probabilities": {"entailment": 0.9}},
        "fooled": True, "validation_status": "verified", "validations_correct": 2, "validations_incorrect": 1,
        "validations_flagged": 0, "retracted": False, "flagged": True, "flag_reason": "odd",
        "annotator": anonymise(annotator.pk), "annotator_username": "annotator",
        "created_at": rows[1]["created_at"]}
    assert datetime.fromisoformat(rows[1]["created_at"]) == written.created_at
    assert rows[0]["round"] == 0 and rows[0]["external_uid"] == "anli-1" and rows[0]["context"] is None
    assert rows[0]["annotator"] == "a-0123456789abcdef" and rows[0]["annotator_username"] is None


def test_html_and_script_in_texts_come_back_as_data(demo_tasks, client_for, researcher):
    text = '<script>alert("x")</script><img src=x onerror=alert(1)> & "quotes"'
    example = Example.objects.create(task=demo_tasks["nli"], round=demo_tasks["nli"].open_round(),
                                     inputs={"hypothesis": text}, target={"label": text}, flag_reason=text)
    response = client_for(researcher).get(URL)
    assert response["Content-Type"] == "application/json"
    row = response.json()["results"][0]
    assert row["id"] == example.pk
    assert row["inputs"] == {"hypothesis": text} and row["target"] == {"label": text} and row["flag_reason"] == text
    browser = client_for(researcher).get(URL, HTTP_ACCEPT="text/html")  # the browsable API escapes it
    assert text not in browser.content.decode()


# --- filters ---------------------------------------------------------------------------


@pytest.fixture
def mixed(demo_tasks):
    """nli examples in rounds 0 and 1, every split and status; sentiment's beside them."""
    nli = demo_tasks["nli"]
    rounds = [round_zero(nli), nli.open_round()]
    for rnd, split, status in itertools.product(rounds, SPLITS, STATUSES):
        write(nli, rnd, n=2, split=split, validation_status=status)
    write(nli, rounds[1], n=1, split="train", validation_status="pending", retracted=True)
    write(demo_tasks["sentiment"], n=5, split="train")
    return nli


@pytest.mark.parametrize("round_number", [None, 0, 1])
@pytest.mark.parametrize("split", [None, *SPLITS])
@pytest.mark.parametrize("status", [None, "pending", "escalated"])
def test_every_filter_mix_lists_exactly_its_examples_newest_first(mixed, client_for, researcher, round_number,
                                                                  split, status):
    params = {k: v for k, v in {"round": round_number, "split": split, "status": status}.items() if v is not None}
    expected = Example.objects.filter(task=mixed)
    if round_number is not None:
        expected = expected.filter(round__number=round_number)
    if split:
        expected = expected.filter(split=split)
    if status:
        expected = expected.filter(validation_status=status)
    listed = [row["id"] for page in pages(client_for(researcher), URL + "?" + "&".join(
        [f"{k}={v}" for k, v in params.items()] + ["page_size=7"])) for row in page["results"]]
    assert listed == list(expected.order_by("-pk").values_list("pk", flat=True))
    assert listed  # every mix has examples in the fixture


def test_retracted_examples_are_listed_with_their_status(mixed, client_for, researcher):
    rows = client_for(researcher).get(URL + "?round=1&split=train&status=pending").json()["results"]
    assert [r["retracted"] for r in rows] == [True, False, False]


def test_a_round_the_task_does_not_have_is_404(mixed, client_for, researcher):
    response = client_for(researcher).get(URL + "?round=7")
    assert response.status_code == 404 and response.json()["detail"] == "Task nli has no round 7."


@pytest.mark.parametrize(("query", "field", "says"), [
    ("status=bogus", "status", "one of pending, verified, rejected, flagged, escalated"),
    ("status=retracted", "status", '"retracted": true'),
    ("status=", "status", "not a validation status"),
    ("status=Pending", "status", "not a validation status"),
    ("split=validation", "split", "one of train, dev, test"),
    ("round=abc", "round", "whole number from 0"),
    ("round=-1", "round", "whole number from 0"),
    ("round=1.0", "round", "whole number from 0"),
    ("round=%201", "round", "whole number from 0"),
    ("round=99999999999999999999999", "round", "2147483647"),
    ("round=1&round=2", "round", "Give it once"),
    ("stauts=pending", "stauts", "Not a parameter of this list"),
    ("page_size=0", "page_size", "from 1 to 1000"),
    ("page_size=1001", "page_size", "from 1 to 1000"),
    ("page_size=ten", "page_size", "from 1 to 1000"),
])
def test_bad_filters_are_400_naming_the_parameter(mixed, client_for, researcher, query, field, says):
    response = client_for(researcher).get(f"{URL}?{query}")
    assert response.status_code == 400, response.content
    assert says in " ".join(response.json()["errors"][field])


# --- the keyset ------------------------------------------------------------------------


def cursor(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.mark.parametrize("value", [
    "not base64!", cursor("p=abc"), cursor("p=0"), cursor("p=-3"), cursor("p=1.5"), cursor("p=" + "9" * 30),
    cursor("o=5&p=10"),  # an offset: never made on a unique key, refused so no request makes an OFFSET
    cursor("r=2&p=10"), cursor("p=10&x=1"), cursor("p=10&p=11"), cursor("&&"), "%FF", cursor("p=١٢"),
])
def test_a_forged_cursor_is_400(mixed, client_for, researcher, value):
    response = client_for(researcher).get(URL, {"cursor": value})
    assert response.status_code == 400, response.content
    assert "Not a cursor this list gave" in response.json()["errors"]["cursor"][0]


def test_paging_neither_repeats_nor_skips_while_examples_are_written(mixed, client_for, researcher):
    client = client_for(researcher)
    before = list(Example.objects.filter(task=mixed).order_by("-pk").values_list("pk", flat=True))
    seen, url, fetched = [], URL + "?page_size=4", 0
    while url:
        body = client.get(url).json()
        seen += [row["id"] for row in body["results"]]
        url, fetched = body["next"], fetched + 1
        write(mixed, n=2)  # new examples between page fetches: newer than every page
    assert fetched == -(-len(before) // 4) and len(before) > 12
    assert seen == before  # in order, no duplicate, no gap

    # And back: the previous links give the same pages in reverse.
    last = list(pages(client, URL + "?page_size=4"))[-1]
    back, url = [], last["previous"]
    while url:
        body = client.get(url).json()
        back = [row["id"] for row in body["results"]] + back
        url = body["previous"]
    newest = list(Example.objects.filter(task=mixed).order_by("-pk").values_list("pk", flat=True))
    assert back + [row["id"] for row in last["results"]] == newest


def test_links_keep_the_filters(mixed, client_for, researcher):
    body = client_for(researcher).get(URL + "?round=1&split=dev&status=verified&page_size=1").json()
    second = client_for(researcher).get(body["next"]).json()
    assert "round=1" in body["next"] and "split=dev" in body["next"] and "status=verified" in body["next"]
    assert len(second["results"]) == 1 and second["results"][0]["split"] == "dev"
    assert second["results"][0]["id"] < body["results"][0]["id"] and second["next"] is None


@pytest.mark.parametrize(("page_size", "n"), [(2, 3), (50, 60)])
def test_a_page_costs_the_same_queries_at_any_size(demo_tasks, client_for, researcher, second_annotator,
                                                   django_assert_num_queries, page_size, n):
    task = demo_tasks["nli"]
    write(task, n=n, annotator=researcher)
    write(task, n=n, annotator=second_annotator, context=task.contexts.first())
    client = client_for(researcher)
    client.get(URL)  # the session's first use loads it
    first = client.get(f"{URL}?page_size={page_size}").json()
    # sign-in session, user, task, is a researcher, the page (round and username joined)
    with django_assert_num_queries(5):
        body = client.get(first["next"]).json()
    assert len(body["results"]) == page_size
    with django_assert_num_queries(6):  # and the round's id
        assert len(client.get(f"{URL}?round=1&page_size={page_size}").json()["results"]) == page_size


# --- the plans -------------------------------------------------------------------------


@pytest.fixture
def many(demo_tasks):
    """Examples of nli in two rounds, each split and status, among some thousands of
    another task's, written in turns (ids interleave, as tasks' do): the listed task is
    a small part of the table, as one task among many is."""
    nli, sentiment = demo_tasks["nli"], demo_tasks["sentiment"]
    rounds = [round_zero(nli), nli.open_round()]
    for rnd, split, status in itertools.product(rounds, SPLITS, STATUSES):
        write(nli, rnd, n=6, split=split, validation_status=status)
        write(sentiment, n=150, split=split, validation_status=status)
    return nli


def page_queries(task, **filters):
    """The page queries the list runs, each with whether a cursor bounds it: the first
    page, and a page forward (``next``) and back (``previous``) from a cursor halfway
    down (a cursor near either end bounds the id range to a few rows, and the primary
    key's index alone serves that range best)."""
    examples = task_examples(task, **filters)
    ids = list(examples.order_by("-pk").values_list("pk", flat=True))
    middle = ids[len(ids) // 2]
    return [(examples.order_by("-pk")[:101], False),
            (examples.filter(pk__lt=middle).order_by("-pk")[:101], True),
            (examples.filter(pk__gt=middle).order_by("pk")[:101], True)]


def test_every_filter_mix_is_an_index_walk(many):
    """Each page query of each mix of filters reaches the examples through an index
    bound by all its filters (the round's, or else the task's) and hands them over in
    order: no scan, no sort."""
    from tests.explain import problems

    found = {}
    for round_number, split, status in itertools.product([None, 1], [None, "test"], [None, "escalated"]):
        bound = ["task_id" if round_number is None else "round_id"]
        bound += ["split"] * (split is not None) + ["validation_status"] * (status is not None)
        for query, from_cursor in page_queries(many, round_number=round_number, split=split, status=status):
            wrong = problems(query, bound=(*bound, "id") if from_cursor else tuple(bound))
            if wrong:
                found[f"round={round_number} split={split} status={status} cursor={from_cursor}"] = wrong
    assert not found, "\n".join(f"{mix}: {wrong}" for mix, wrong in found.items())


def test_the_plan_check_sees_a_sort_and_a_scan(many):
    """The check itself: ordering by a column no index serves is a sort, a filter no
    index starts with a scan (or a walk of a whole index)."""
    from tests.explain import problems

    assert problems(Example.objects.filter(task=many).order_by("-latency_ms")[:10])
    assert problems(Example.objects.filter(latency_ms=3.0).order_by("-pk")[:10])
    assert problems(task_examples(many).order_by("-pk")[:10], bound=("split",))
    assert not problems(task_examples(many).order_by("-pk")[:10], bound=("task_id",))
