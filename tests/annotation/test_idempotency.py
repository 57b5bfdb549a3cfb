"""Idempotency-Key on POST examples/ and POST validations/: a retry gets the first
answer, and nothing is stored twice."""

import threading

import pytest
from django.db import connection

from annotation.models import AnnotationSession, Example, IdempotentRequest, Validation

pytestmark = pytest.mark.django_db


def create(client, context_id, text="Retry me.", key=None):
    headers = {"HTTP_IDEMPOTENCY_KEY": key} if key is not None else {}
    return client.post("/api/tasks/sentiment/examples/", {
        "context": context_id, "inputs": {"statement": text}, "target": {"label": "positive"}}, format="json",
        **headers)


def test_a_retried_create_returns_the_first_answer_and_stores_once(live_tasks, client_for, annotator):
    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    first = create(client, context["id"], key="key-1")
    assert first.status_code == 201
    again = create(client, context["id"], key="key-1")
    assert again.status_code == 201 and again.json() == first.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Example.objects.count() == 1
    assert AnnotationSession.objects.get(user=annotator).examples_written == 1
    # A new key is a new example; no key at all too.
    assert create(client, context["id"], key="key-2").json()["id"] != first.json()["id"]
    create(client, context["id"])
    assert Example.objects.count() == 3


def test_the_same_key_for_another_request_is_a_409(live_tasks, client_for, annotator):
    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    assert create(client, context["id"], text="First.", key="k").status_code == 201
    response = create(client, context["id"], text="Something else.", key="k")
    assert response.status_code == 409 and "different request" in response.json()["detail"]
    assert Example.objects.count() == 1


def test_keys_are_per_user(live_tasks, client_for, annotator, second_annotator):
    one, two = client_for(annotator), client_for(second_annotator)
    context = one.get("/api/tasks/sentiment/contexts/next/").json()
    assert create(one, context["id"], key="shared").status_code == 201
    theirs = create(two, context["id"], key="shared")
    assert theirs.status_code == 201 and "Idempotent-Replayed" not in theirs
    assert Example.objects.count() == 2


@pytest.mark.parametrize("key", ["", "a" * 256, "with space", "ünïcode"])
def test_malformed_keys_are_a_400(live_tasks, client_for, annotator, key):
    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    response = create(client, context["id"], key=key)
    assert response.status_code == 400 and "Idempotency-Key" in response.json()["errors"]
    assert Example.objects.count() == 0


def test_a_failed_write_records_nothing_so_a_retry_can_succeed(live_tasks, client_for, annotator):
    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    bad = client.post("/api/tasks/sentiment/examples/", {
        "context": context["id"], "inputs": {"statement": ""}, "target": {"label": "positive"}}, format="json",
        HTTP_IDEMPOTENCY_KEY="fix-and-retry")
    assert bad.status_code == 400 and not IdempotentRequest.objects.exists()


def answered_blind(task, author, validator_client):
    """An example by ``author`` that the validator has answered blind: ready for a decision
    that counts (a researcher of the task vouches for the validator)."""
    from annotation.models import VouchedValidator
    from annotation.serving import assign

    VouchedValidator.objects.get_or_create(task=task, validator=validator_client.user)
    example = Example.objects.create(task=task, round=task.open_round(), annotator=author,
                                     inputs={"statement": "x"}, target={"label": "positive"}, fooled=True)
    assign(example, validator_client.user)  # the validation queue served it to them
    validator_client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}},
                          format="json")
    return example


def test_a_retried_validation_is_counted_once(live_tasks, annotator, second_annotator, client_for):
    client = client_for(second_annotator)
    example = answered_blind(live_tasks["sentiment"], annotator, client)
    first = client.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json",
                        HTTP_IDEMPOTENCY_KEY="v-1")
    again = client.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json",
                        HTTP_IDEMPOTENCY_KEY="v-1")
    assert first.status_code == again.status_code == 201 and again.json() == first.json()
    example.refresh_from_db()
    assert example.validations_correct == 1 and Validation.objects.filter(example=example).count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_copies_racing_store_one_example(live_tasks, annotator):
    """Both copies reach the write; the second's record collides, its transaction rolls
    back, and it answers with the first's answer."""
    if connection.vendor != "postgresql":
        pytest.skip("concurrent writers are tested on PostgreSQL (as in CI); SQLite serialises them")
    from rest_framework.test import APIClient

    from annotation.sessions import start_session
    from annotation.tokens import make_token

    token = make_token(start_session(annotator, live_tasks["sentiment"]))
    context_id = live_tasks["sentiment"].contexts.first().pk
    barrier = threading.Barrier(2)
    answers = []

    def send():
        from django.db import connection as thread_connection

        client = APIClient()
        client.credentials(HTTP_X_DYNABENCH_TOKEN=token)
        try:
            barrier.wait()
            answers.append(create(client, context_id, key="race"))
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=send) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [a.status_code for a in answers] == [201, 201]
    assert answers[0].json() == answers[1].json()
    assert Example.objects.count() == 1
    assert AnnotationSession.objects.get(user=annotator).examples_written == 1


def test_old_keys_are_pruned(live_tasks, client_for, annotator, settings):
    from datetime import timedelta

    from django.utils import timezone

    from annotation.tasks import prune_idempotency_keys

    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    create(client, context["id"], key="old")
    create(client, context["id"], key="new")
    IdempotentRequest.objects.filter(key="old").update(
        created_at=timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL + 1))
    assert prune_idempotency_keys.apply().get() == 1
    assert list(IdempotentRequest.objects.values_list("key", flat=True)) == ["new"]


def test_an_expired_key_not_yet_pruned_works_again_for_a_new_request(live_tasks, client_for, annotator, settings):
    """A key past IDEMPOTENCY_KEY_TTL answers as new (its old record makes way), while an
    unexpired one still replays: the record is removed only when the insert collides."""
    from datetime import timedelta

    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    client = client_for(annotator)
    context = client.get("/api/tasks/sentiment/contexts/next/").json()
    first = create(client, context["id"], key="reused", text="The first one was fine.")
    assert first.status_code == 201
    IdempotentRequest.objects.filter(key="reused").update(
        created_at=timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL + 1))
    again = create(client, context["id"], key="reused", text="A new one, a day later.")
    assert again.status_code == 201 and again.json()["id"] != first.json()["id"]
    assert "Idempotent-Replayed" not in again
    [kept] = IdempotentRequest.objects.filter(key="reused")
    assert kept.body["id"] == again.json()["id"]
    assert create(client, context["id"], key="reused", text="A new one, a day later.").json() == again.json()
    with CaptureQueriesContext(connection) as queries:  # a fresh key: no DELETE on the way
        assert create(client, context["id"], key="fresh", text="Another one.").status_code == 201
    assert not [q for q in queries.captured_queries if q["sql"].upper().startswith("DELETE")]


def test_a_copy_that_lost_the_race_for_a_validation_gets_the_first_answer(live_tasks, annotator, second_annotator,
                                                                         client_for, monkeypatch):
    """Two copies of one decision: the second waited on the row lock, finds the decision made,
    and answers as the first did (its replay check ran before the first committed)."""
    from annotation import idempotency

    client = client_for(second_annotator)
    example = answered_blind(live_tasks["sentiment"], annotator, client)
    first = client.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json",
                        HTTP_IDEMPOTENCY_KEY="race-v")
    real_replay = idempotency.Idempotency.replay
    calls = []

    def replay_misses_once(self):  # as a copy that checked before the first copy committed
        calls.append(1)
        return None if len(calls) == 1 else real_replay(self)

    monkeypatch.setattr(idempotency.Idempotency, "replay", replay_misses_once)
    second = client.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json",
                         HTTP_IDEMPOTENCY_KEY="race-v")
    assert second.status_code == 201 and second.json() == first.json()
    example.refresh_from_db()
    assert example.validations_correct == 1
