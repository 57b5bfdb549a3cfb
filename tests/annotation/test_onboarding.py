"""Onboarding per task: the config's ``onboarding``, its checks, the quiz through the
API (each try drawn from the task's pool, never serving an item whose answer an earlier
try showed), and the rule that a worker who has not passed neither writes nor validates
(403, code ``onboarding_required``)."""

import copy

import pytest
from django.core.exceptions import ValidationError

from annotation import onboarding
from annotation.models import Example, OnboardingRecord
from tasks.config import validate_task_config
from tasks.services import load_definition

pytestmark = pytest.mark.django_db


def sentiment_config(**onboarding_changes):
    config = copy.deepcopy(load_definition("sentiment")["config"])
    config["onboarding"].update(onboarding_changes)
    return config


def problems_of(config, task_type="classification"):
    with pytest.raises(ValidationError) as raised:
        validate_task_config(task_type, config)
    return raised.value.message_dict["config"]


# --- the config ------------------------------------------------------------------------


def test_the_four_builtin_tasks_ship_an_onboarding_set_that_validates():
    for slug in ("nli", "qa", "sentiment", "hate"):
        definition = load_definition(slug)
        config = validate_task_config(definition["task_type"], definition["config"])
        onboarding_config = config.onboarding
        assert onboarding_config["per_try"] >= 3, slug
        # A pool with fresh items for every try allowed.
        assert len(onboarding_config["items"]) >= onboarding_config["per_try"] * onboarding_config["max_tries"], slug
        assert 1 <= config.onboarding_needed <= onboarding_config["per_try"], slug
        assert {item["kind"] for item in config.onboarding["items"]} == {"label", "judge"}, slug
        assert all(item["explanation"].strip() for item in config.onboarding["items"]), slug


def test_defaults_fill_pass_mark_max_tries_and_per_try_and_no_onboarding_is_none():
    config = sentiment_config()
    del config["onboarding"]["pass_mark"], config["onboarding"]["max_tries"], config["onboarding"]["per_try"]
    parsed = validate_task_config("classification", config)
    assert parsed.onboarding["pass_mark"] == 0.8 and parsed.onboarding["max_tries"] == 2
    assert parsed.onboarding["per_try"] == 4  # the pool of 8 split between the 2 tries
    assert parsed.onboarding_needed == 4  # 0.8 of a try's 4 items, rounded up
    del config["onboarding"]
    assert validate_task_config("classification", config).onboarding is None


@pytest.mark.parametrize("change, expected", [
    ({"pass_mark": 0}, "config.onboarding.pass_mark: 0 is less than or equal to the minimum of 0"),
    ({"pass_mark": 1.5}, "config.onboarding.pass_mark: 1.5 is greater than the maximum of 1"),
    ({"max_tries": 0}, "config.onboarding.max_tries: 0 is less than the minimum of 1"),
    ({"items": []}, "config.onboarding.items: [] should be non-empty"),
    ({"per_try": 0}, "config.onboarding.per_try: 0 is less than the minimum of 1"),
    ({"per_try": 5}, "config.onboarding.items: each of the 2 tries (max_tries) draws 5 items (per_try) that no "
                     "earlier try of the same worker served, since the answers are shown after each one: the pool "
                     "needs at least 10 items, and has 8."),
    ({"max_tries": 3}, "the pool needs at least 12 items, and has 8"),
    ({"surprise": 1}, "Additional properties are not allowed ('surprise' was unexpected)"),
])
def test_the_schema_names_the_bad_setting(change, expected):
    problems = problems_of(sentiment_config(**change))
    assert any(expected in p for p in problems), problems


def test_items_are_checked_against_the_tasks_fields_labels_and_kinds():
    config = sentiment_config()
    items = config["onboarding"]["items"]
    items[0]["answer"] = {"label": "ecstatic"}
    items[1]["inputs"] = {"sentence": "Wrong field name."}
    items[2]["answer"] = "maybe"
    del items[3]["target"]
    items.append({"kind": "label", "inputs": {"statement": "No prompt."}, "answer": {"label": "positive"},
                  "explanation": "Its context is missing.", "target": {"label": "positive"}})
    last = len(items) - 1
    problems = problems_of(config)
    assert "config.onboarding.items.0.answer.label: 'ecstatic' is not one of ['negative', 'positive']." in problems
    assert any(p.startswith("config.onboarding.items.1.inputs: Unknown fields ['sentence']") for p in problems)
    assert "config.onboarding.items.2.answer: a judge item's answer is one of ['correct', 'incorrect']." in problems
    assert "config.onboarding.items.3.target: a judge item shows the answer to judge (target)." in problems
    assert any(p.startswith(f"config.onboarding.items.{last}.context: Expected the fields ['prompt']")
               for p in problems)
    assert any(p.startswith(f"config.onboarding.items.{last}.target: only a judge item") for p in problems)


def test_a_qa_items_answer_must_be_a_span_of_its_passage():
    config = copy.deepcopy(load_definition("qa")["config"])
    config["onboarding"]["items"][0]["answer"] = {"text": "1999"}
    problems = problems_of(config, "extractive_qa")
    assert any(p.startswith("config.onboarding.items.0.answer.text:") for p in problems), problems


def test_an_invalid_onboarding_is_refused_by_the_task_api_with_a_400(researcher, client_for):
    config = sentiment_config(max_tries=99)
    response = client_for(researcher).patch("/api/tasks/sentiment/", {"config": config}, format="json")
    assert response.status_code == 400, response.content
    assert "config.onboarding.max_tries" in response.content.decode()


# --- the quiz and the rule ---------------------------------------------------------------


def known(slug, number, *, wrong=False, pool=None):
    """The known answer to item ``number`` of ``slug``'s shipped pool, or of ``pool`` (or a wrong one)."""
    item = (pool or load_definition(slug)["config"]["onboarding"]["items"])[number]
    answer = item["answer"]
    if wrong:
        answer = ({"correct": "incorrect", "incorrect": "correct"}[answer] if item["kind"] == "judge"
                  else {"label": "positive" if answer["label"] == "negative" else "negative"})
    return answer


def answers(slug, *, wrong=()):
    """How a worker who knows ``slug``'s pool answers a try: the known answer to each item
    drawn, wrong at the places (0, 1, ... in the try) in ``wrong``."""
    return lambda place, number: known(slug, number, wrong=place in wrong)


def drawn(client, slug) -> list[int]:
    """The items of the caller's try under way, as the API serves them."""
    return [item["number"] for item in client.get(f"/api/tasks/{slug}/onboarding/").json()["items"]]


def take(client, slug, given):
    """Answer every item of the caller's try under way with ``given(place, number)``."""
    last = None
    for place, number in enumerate(drawn(client, slug)):
        response = client.post(f"/api/tasks/{slug}/onboarding/answers/",
                               {"item": number, "answer": given(place, number)}, format="json")
        assert response.status_code == 201, response.content
        last = response.json()
    return last


def write(client, slug="sentiment"):
    context = client.get(f"/api/tasks/{slug}/contexts/next/").json()
    return client.post(f"/api/tasks/{slug}/examples/", {
        "context": context["id"], "inputs": {"statement": "Not bad at all."}, "target": {"label": "positive"}},
        format="json")


def test_writing_and_validating_answer_403_onboarding_required_until_passed(
        with_onboarding, live_tasks, client_for, annotator, researcher):
    client = client_for(annotator)
    refused = write(client)
    assert refused.status_code == 403
    assert refused.json()["code"] == "onboarding_required" and "onboarding" in refused.json()["detail"]
    assert not Example.objects.filter(annotator=annotator).exists()

    # The task's researchers are not asked: the researcher's example is one to validate.
    assert write(client_for(researcher)).status_code == 201
    example = Example.objects.get(annotator=researcher)
    blind = client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}},
                        format="json")
    assert blind.status_code == 403 and blind.json()["code"] == "onboarding_required"
    vote = client.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json")
    assert vote.status_code == 403 and vote.json()["code"] == "onboarding_required"

    # Other forbidden things keep DRF's code.
    other = client.get("/api/tasks/sentiment/validators/")
    assert other.status_code == 403 and other.json()["code"] == "permission_denied"

    shown = client.get("/api/tasks/sentiment/onboarding/").json()
    assert shown["standing"]["required"] and not shown["standing"]["passed"]
    assert shown["instructions"] and len(shown["items"]) == 4 and shown["standing"]["items"] == 4
    text = str(shown["items"])
    assert "explanation" not in text and "answer" not in text  # known answers stay on the server
    pool = load_definition("sentiment")["config"]["onboarding"]["items"]
    for item in shown["items"]:
        if item["kind"] == "judge":
            assert item["shown_target"] == pool[item["number"]]["target"]["label"]

    numbers = [item["number"] for item in shown["items"]]
    first = client.post("/api/tasks/sentiment/onboarding/answers/",
                        {"item": numbers[0], "answer": known("sentiment", numbers[0])}, format="json").json()
    assert first["right"] and first["explanation"] == pool[numbers[0]]["explanation"]
    assert not first["try_finished"] and first["standing"]["answered"] == [numbers[0]]
    again = client.post("/api/tasks/sentiment/onboarding/answers/",
                        {"item": numbers[0], "answer": known("sentiment", numbers[0])}, format="json")
    assert again.status_code == 409
    last = None
    for place, number in list(enumerate(numbers))[1:]:
        last = client.post("/api/tasks/sentiment/onboarding/answers/",
                           {"item": number, "answer": known("sentiment", number, wrong=place == 3)},
                           format="json").json()
    assert last["try_finished"] and last["score"] == 3 and last["standing"]["passed"]  # 3 of 4 pass
    assert write(client).status_code == 201
    assert client.get("/api/tasks/sentiment/validations/next/").json()["id"] == example.pk
    vote = client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}},
                       format="json")
    assert vote.status_code == 201, vote.content
    record = OnboardingRecord.objects.get(user=annotator)
    assert record.tries == 1 and record.passed_at and record.last_score == 3
    done = client.post("/api/tasks/sentiment/onboarding/answers/",
                       {"item": numbers[0], "answer": known("sentiment", numbers[0])}, format="json")
    assert done.status_code == 409  # passing is recorded once


def test_failing_every_try_blocks_the_worker_on_the_task_only(with_onboarding, live_tasks, token_client, annotator,
                                                              demo_tasks):
    client = token_client(annotator, demo_tasks["sentiment"])  # a session token works too
    first = take(client, "sentiment", answers("sentiment", wrong={0, 1}))
    assert first["try_finished"] and first["score"] == 2 and not first["standing"]["passed"]
    assert first["standing"]["tries_left"] == 1 and not first["standing"]["blocked"]
    second = take(client, "sentiment", answers("sentiment", wrong={0, 1, 2}))
    assert second["standing"]["blocked"] and second["standing"]["tries_left"] == 0
    refused = write(client)
    assert refused.status_code == 403 and refused.json()["code"] == "onboarding_required"
    assert "Thank you" in refused.json()["detail"]  # polite, and says why
    more = client.post("/api/tasks/sentiment/onboarding/answers/", {"item": 0, "answer": known("sentiment", 0)},
                       format="json")
    assert more.status_code == 403 and more.json()["code"] == "onboarding_required"
    assert onboarding.is_blocked(demo_tasks["sentiment"], annotator)
    assert not onboarding.is_blocked(demo_tasks["nli"], annotator)


@pytest.mark.parametrize("body", [
    {"item": 9, "answer": {"label": "negative"}},
    {"item": -1, "answer": {"label": "negative"}},
    {"item": "zero", "answer": {"label": "negative"}},
    {"item": 0, "answer": {"label": "<script>alert(1)</script>"}},
    {"item": 0, "answer": "correct"},
    {"item": 2, "answer": {"label": "negative"}},
    {"item": 0},
])
def test_bad_answers_are_400_and_store_nothing(with_onboarding, demo_tasks, client_for, annotator, body):
    response = client_for(annotator).post("/api/tasks/sentiment/onboarding/answers/", body, format="json")
    assert response.status_code == 400, response.content
    assert not OnboardingRecord.objects.filter(user=annotator, answers__has_key="0").exists()


def test_a_task_without_onboarding_asks_nothing(demo_tasks, client_for, annotator):
    shown = client_for(annotator).get("/api/tasks/sentiment/onboarding/").json()
    assert shown["standing"]["required"] is False and shown["items"] == []
    response = client_for(annotator).post("/api/tasks/sentiment/onboarding/answers/",
                                          {"item": 0, "answer": {"label": "negative"}}, format="json")
    assert response.status_code == 409


def test_a_simulated_worker_passes_through_the_service(with_onboarding, demo_tasks, annotator):
    assert onboarding.passed_task_ids(annotator) == set()
    for task in demo_tasks.values():
        assert onboarding.take_with_known_answers(task, annotator).passed, task.slug
        onboarding.require_passed(task, annotator)
    assert onboarding.passed_task_ids(annotator) == {task.pk for task in demo_tasks.values()}


def test_the_workers_own_page_says_whether_they_passed_or_were_blocked(
        with_onboarding, live_tasks, client_for, annotator, second_annotator, researcher):
    passing, failing = client_for(annotator), client_for(second_annotator)
    take(passing, "sentiment", answers("sentiment"))
    take(failing, "sentiment", answers("sentiment", wrong={0, 1, 2}))
    take(failing, "sentiment", answers("sentiment", wrong={0, 1, 2}))

    def standing(client):
        return {row["task"]: row for row in client.get("/api/me/").json()["standing"]}

    mine = standing(passing)
    assert mine["sentiment"]["onboarding"] is True and not mine["sentiment"]["blocked"]
    theirs = standing(failing)  # listed although they wrote nothing: the onboarding is their only work there
    assert theirs["sentiment"]["onboarding"] is False and theirs["sentiment"]["blocked"]
    assert "Thank you" in theirs["sentiment"]["blocked_because"] and "nli" not in theirs
    assert write(client_for(researcher)).status_code == 201  # a researcher is never asked
    assert standing(client_for(researcher))["sentiment"]["onboarding"] is None


# --- a try never serves what an earlier try answered -----------------------------------------


def test_a_second_try_shares_no_item_with_the_first_so_its_feedback_is_no_answer_key(
        with_onboarding, demo_tasks, client_for, django_user_model):
    """The attack: fail the first try on purpose to read every right answer and its
    explanation, then pass the second with them. Each try is drawn from the pool among
    items that worker was never served, so the first try's feedback answers nothing of
    the second; and the draw differs between workers."""
    from tests.annotation.test_trust import account

    first_tries = set()
    for i in range(6):
        client = client_for(account(f"harvester{i}"))
        first = drawn(client, "sentiment")
        assert drawn(client, "sentiment") == first  # the draw stands all through the try
        feedback = {}
        for number in first:
            answered = client.post("/api/tasks/sentiment/onboarding/answers/",
                                   {"item": number, "answer": known("sentiment", number, wrong=True)},
                                   format="json").json()
            feedback[number] = answered["known_answer"]  # the answer key of this try's items
        assert answered["try_finished"] and answered["score"] == 0
        second = drawn(client, "sentiment")
        assert len(second) == 4 and not set(second) & set(feedback), (first, second)
        first_tries.add(tuple(first))
    assert len(first_tries) > 1  # not one fixed set for everybody


def test_an_item_outside_the_try_is_refused_and_nothing_is_stored(with_onboarding, demo_tasks, client_for,
                                                                  annotator):
    client = client_for(annotator)
    mine = drawn(client, "sentiment")
    other = next(n for n in range(8) if n not in mine)
    refused = client.post("/api/tasks/sentiment/onboarding/answers/",
                          {"item": other, "answer": known("sentiment", other)}, format="json")
    assert refused.status_code == 400 and "not one of your items in this try" in refused.json()["errors"]["item"][0]
    record = OnboardingRecord.objects.filter(user=annotator).first()
    assert record is None or record.answers == {}


def test_after_a_researcher_lets_a_blocked_worker_try_again_fresh_items_come_first(
        with_onboarding, demo_tasks, client_for, annotator, researcher):
    task = demo_tasks["sentiment"]
    pool = load_definition("sentiment")["config"]["onboarding"]["items"]
    pool = pool + pool[:2]  # a pool of 10: two tries of 4 leave 2 unseen
    task.config = {**task.config, "onboarding": {**task.config["onboarding"], "items": pool, "per_try": 4,
                                                 "max_tries": 2}}
    task.save()
    client = client_for(annotator)
    seen = set()
    for _ in range(2):
        seen |= set(drawn(client, "sentiment"))
        take(client, "sentiment", lambda place, number: known("sentiment", number, wrong=True, pool=pool))
    assert onboarding.is_blocked(task, annotator) and len(seen) == 8
    assert onboarding.let_try_again(task, annotator, by=researcher)
    third = drawn(client, "sentiment")
    assert len(third) == 4 and set(range(10)) - seen <= set(third)  # both unseen items, topped up with seen ones


def test_a_stored_onboarding_whose_pool_is_smaller_than_its_tries_is_mended_by_the_migration(with_onboarding,
                                                                                             demo_tasks):
    """A task stored before the pools, with fewer items than tries: migration tasks 0010
    lowers its tries to its items (one fresh item a try), so that it parses and no try
    repeats an item; a valid one is left as it is."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("tasks.migrations.0010_onboarding_pool_fits_its_tries")
    short, fine = demo_tasks["sentiment"], demo_tasks["nli"]
    item = load_definition("sentiment")["config"]["onboarding"]["items"][0]
    type(short).objects.filter(pk=short.pk).update(config={**short.config, "onboarding": {"items": [item]}})
    before = type(fine).objects.get(pk=fine.pk).config
    migration.fit_pools_to_tries(apps, None)
    short.refresh_from_db()
    assert short.config["onboarding"]["max_tries"] == 1
    assert short.parsed_config.onboarding["per_try"] == 1
    assert type(fine).objects.get(pk=fine.pk).config == before
