"""Validation: blind answers, queue order, refusals, N matching decisions, owner
override, concurrency; statistics counted from the examples."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from annotation import counters
from annotation.examples import retract_example
from annotation.models import Example, Validation
from annotation.stats import round_stats

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _any_aged_account_decides(demo_tasks):
    """These tests count and decide with plain accounts: every demo task lets any aged
    account decide unpaid examples (``validator_trust.decides: "paid"``). Who may
    decide under the default rule is tested in test_trust and test_gold."""
    for task in demo_tasks.values():
        task.config = {**task.config, "validator_trust": {"decides": "paid"}}
        task.save()


def make_example(task, annotator, *, fooled, label="positive", text="A statement", source="annotation", rnd=None):
    return Example.objects.create(
        task=task, round=rnd or task.open_round(), context=task.contexts.first(), annotator=annotator, source=source,
        inputs={"statement": text}, target={"label": label}, fooled=fooled,
        prediction={"label": "negative" if fooled else label, "probabilities": {"negative": 0.7, "positive": 0.3}},
    )


def users(n, prefix="validator"):
    User = get_user_model()
    joined = timezone.now() - timedelta(days=30)  # established accounts: their votes count
    return [User.objects.create_user(f"{prefix}{i}", password="pw-pw-pw-123", date_joined=joined) for i in range(n)]


def served(client, example):
    """The validation queue serves ``example`` to the client's user (its own service), as
    GET .../validations/next/ does for the queue's head: only then may they validate it."""
    from annotation.serving import assign

    assign(example, client.user)


def validate(client, example, label, *, answer="positive"):
    """A validator's two steps, on an example served to them: their own answer (blind),
    then the decision."""
    served(client, example)
    blind = client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": answer}}, format="json")
    assert blind.status_code == 201, blind.content
    return client.post(f"/api/examples/{example.pk}/validations/", {"label": label}, format="json")


def test_queue_order_and_exclusions(demo_tasks, annotator, second_annotator, client_for, django_assert_num_queries):
    task = demo_tasks["sentiment"]
    # A gold draw would be one query more; the fixed rule's queue (the adaptive one also
    # reads whether the validator's estimate is known: tests/annotation/test_adaptive_validation.py).
    task.config = {**task.config, "validation": {"gold_rate": 0, "policy": "fixed"}}
    task.save()
    plain = make_example(task, annotator, fooled=False, text="plain")
    fooling = make_example(task, annotator, fooled=True, text="fooling")
    fooling_validated = make_example(task, annotator, fooled=True, text="fooling, validated once")
    Validation.objects.create(example=fooling_validated, validator=users(1, "x")[0], label="correct")
    fooling_validated.validations_correct = 1
    fooling_validated.save()  # saving keeps its queue place in step
    retracted = make_example(task, annotator, fooled=True, text="retracted")
    retracted.retracted = True
    retracted.save()
    own = make_example(task, second_annotator, fooled=True, text="mine")
    make_example(task, None, fooled=True, text="imported", source="import")

    client = client_for(second_annotator)
    client.get("/api/tasks/sentiment/validations/next/")  # warm the sign-in session (what it serves stays theirs)
    order = []
    for i in range(3):
        # sign-in session, user, task, their own undecided answers, the claim they hold (the
        # first time: the one the warm-up served; then none, and a draw: the queue's first
        # page and which of it they decided), its claim renewed, ownership
        with django_assert_num_queries(7 if i == 0 else 9):
            item = client.get("/api/tasks/sentiment/validations/next/").json()
        order.append(item["id"])
        # Blind: neither the writer's answer, nor the model's, nor whether it fooled the model.
        assert item["blind"] is True and item["blind_answer"] is None
        assert item["target"] is None and item["prediction"] is None and item["fooled"] is None
        assert validate(client, Example.objects.get(pk=item["id"]), "correct").status_code == 201
    # Model-fooling examples first (drawn at random among them), then the rest.
    assert set(order[:2]) == {fooling.pk, fooling_validated.pk} and order[2] == plain.pk
    response = client.get("/api/tasks/sentiment/validations/next/")
    assert response.status_code == 204 and response.content == b""  # nothing to validate right now
    assert retracted.pk not in order and own.pk not in order


def test_blind_answers_are_stored_before_the_writers_answer_is_shown(demo_tasks, annotator, second_annotator,
                                                                    client_for):
    example = make_example(demo_tasks["sentiment"], annotator, fooled=True, label="negative")
    client = client_for(second_annotator)
    assert client.get("/api/tasks/sentiment/validations/next/").json()["id"] == example.pk  # served to them
    # Without a blind answer: no reveal, no decision.
    response = client.get(f"/api/examples/{example.pk}/reveal/")
    assert response.status_code == 403 and "your own answer first" in response.json()["detail"]
    response = client.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json")
    assert response.status_code == 409 and "your own answer first" in response.json()["detail"]
    assert not Validation.objects.filter(example=example).exists()
    # A bad blind answer is refused by name and stores nothing.
    response = client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "meh"}}, format="json")
    assert response.status_code == 400 and "answer.label" in response.json()["errors"]
    assert not Validation.objects.filter(example=example).exists()

    response = client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}},
                           format="json")
    assert response.status_code == 201
    assert response.json() == {"answer": {"label": "positive"}, "agrees": False, "target": {"label": "negative"}}
    stored = Validation.objects.get(example=example, validator=second_annotator)
    assert stored.blind_answer == {"label": "positive"} and stored.blind_agrees is False and stored.label == ""
    # The first answer stands: a second one is refused and changes nothing.
    again = client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "negative"}}, format="json")
    assert again.status_code == 409
    assert Validation.objects.get(pk=stored.pk).blind_answer == {"label": "positive"}
    # Now the writer's answer is shown, and the item carries what was hidden.
    assert client.get(f"/api/examples/{example.pk}/reveal/").json() == {"target": {"label": "negative"}}
    item = client.get("/api/tasks/sentiment/validations/next/").json()
    assert item["id"] == example.pk and item["blind"] is False and item["blind_answer"] == {"label": "positive"}
    assert item["target"] == {"label": "negative"} and item["fooled"] is True
    # An undecided blind answer counts for nothing yet.
    example.refresh_from_db()
    assert (example.validations_correct, example.validations_incorrect) == (0, 0)
    response = client.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json")
    assert response.status_code == 201 and response.json()["label"] == "correct"
    stored.refresh_from_db()
    assert stored.label == "correct" and stored.decided_at is not None


def test_the_author_and_researchers_see_the_answer_without_a_blind_step(demo_tasks, annotator, researcher,
                                                                        client_for):
    example = make_example(demo_tasks["sentiment"], annotator, fooled=True, label="negative")
    assert client_for(annotator).get(f"/api/examples/{example.pk}/reveal/").json() == {"target": {"label": "negative"}}
    item = client_for(researcher).get("/api/tasks/sentiment/validations/next/").json()
    assert item["blind"] is False and item["target"] == {"label": "negative"}


def test_without_blind_validation_the_target_is_shown_at_once(demo_tasks, annotator, second_annotator, client_for):
    task = demo_tasks["sentiment"]
    task.config = {**task.config, "blind_validation": False}
    task.save()
    example = make_example(task, annotator, fooled=True, label="negative")
    client = client_for(second_annotator)
    item = client.get("/api/tasks/sentiment/validations/next/").json()
    assert item["blind"] is False and item["target"] == {"label": "negative"}
    response = client.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json")
    assert response.status_code == 201


def test_qa_blind_answers_agree_by_the_tasks_metric(live_tasks, annotator, second_annotator, client_for):
    task = live_tasks["qa"]
    context = task.contexts.first()
    passage = context.fields["passage"]
    words = passage.split()
    answer = " ".join(words[2:5])
    example = Example.objects.create(task=task, round=task.open_round(), context=context, annotator=annotator,
                                     inputs={"question": "Which words?"},
                                     target={"text": answer, "start": passage.index(answer)}, fooled=True,
                                     prediction={"answer": words[0], "start": 0, "end": len(words[0])})
    client = client_for(second_annotator)
    assert client.get("/api/tasks/qa/validations/next/").json()["id"] == example.pk
    response = client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"text": "not in the passage"}},
                           format="json")
    assert response.status_code == 400 and "answer.text" in response.json()["errors"]
    response = client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"text": answer}}, format="json")
    assert response.status_code == 201 and response.json()["agrees"] is True
    assert response.json()["answer"] == {"text": answer, "start": passage.index(answer)}


def test_own_and_twice_are_refused_and_change_nothing(demo_tasks, annotator, second_annotator, client_for):
    example = make_example(demo_tasks["sentiment"], annotator, fooled=True)
    author = client_for(annotator)
    response = author.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}},
                           format="json")
    assert response.status_code == 403 and "your own example" in response.json()["detail"]
    response = author.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json")
    assert response.status_code == 403 and "your own example" in response.json()["detail"]
    client = client_for(second_annotator)
    assert validate(client, example, "correct").status_code == 201
    response = client.post(f"/api/examples/{example.pk}/validations/", {"label": "incorrect"}, format="json")
    assert response.status_code == 409 and "already validated" in response.json()["detail"]
    example.refresh_from_db()
    assert (example.validations_correct, example.validations_incorrect) == (1, 0)
    assert Validation.objects.filter(example=example).count() == 1
    assert client.post("/api/examples/999999/validations/", {"label": "correct"}, format="json").status_code == 404
    assert client.post(f"/api/examples/{example.pk}/validations/", {"label": "maybe"},
                       format="json").status_code == 400


def test_a_retracted_example_cannot_be_validated(demo_tasks, annotator, second_annotator, researcher, client_for):
    task = demo_tasks["sentiment"]
    answered = make_example(task, annotator, fooled=True)
    client = client_for(second_annotator)
    served(client, answered)
    assert client.post(f"/api/examples/{answered.pk}/blind-answer/", {"answer": {"label": "positive"}},
                       format="json").status_code == 201
    retract_example(answered, annotator)
    for who in (client, client_for(researcher)):  # not even a researcher decides a retracted example
        response = who.post(f"/api/examples/{answered.pk}/validations/", {"label": "correct"}, format="json")
        assert response.status_code == 409 and "retracted" in response.json()["detail"]
    fresh = make_example(task, annotator, fooled=True)
    retract_example(fresh, annotator)
    response = client.post(f"/api/examples/{fresh.pk}/blind-answer/", {"answer": {"label": "positive"}}, format="json")
    assert response.status_code == 409 and "retracted" in response.json()["detail"]
    for example in (answered, fresh):
        example.refresh_from_db()
        assert (example.validations_correct, example.validation_status) == (0, "pending")


def test_three_matching_validations_verify_and_count_verified_fooled(demo_tasks, annotator, client_for):
    task = demo_tasks["sentiment"]
    task.config = {**task.config, "validation": {"policy": "fixed"}}  # the default is adaptive
    task.save()
    example = make_example(task, annotator, fooled=True)
    a, b, c, d = users(4)
    for validator, label in [(a, "correct"), (b, "incorrect"), (c, "correct")]:
        assert validate(client_for(validator), example, label).status_code == 201
    example.refresh_from_db()
    assert example.validation_status == "pending"  # 2 correct, 1 incorrect: not yet 3 matching
    assert validate(client_for(d), example, "correct").status_code == 201
    example.refresh_from_db()
    assert example.validation_status == "verified"
    stats = round_stats(task.open_round())
    assert stats["verified_fooled"] == 1 and stats["validations"] == 4
    # Decided: more user validations are refused, blind answers too.
    late = client_for(users(1, "late")[0])
    response = late.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}}, format="json")
    assert response.status_code == 409


def test_three_incorrect_reject_and_flags_flag(demo_tasks, annotator, client_for):
    task = demo_tasks["sentiment"]
    rejected = make_example(task, annotator, fooled=True)
    flagged = make_example(task, annotator, fooled=False)
    for validator in users(3):
        client = client_for(validator)
        assert validate(client, rejected, "incorrect").status_code == 201
        served(client, flagged)
        blind = client.post(f"/api/examples/{flagged.pk}/blind-answer/", {"answer": {"label": "positive"}},
                            format="json")
        assert blind.status_code == 201
        assert client.post(f"/api/examples/{flagged.pk}/validations/", {"label": "flagged", "reason": "nonsense"},
                           format="json").status_code == 201
    rejected.refresh_from_db()
    flagged.refresh_from_db()
    assert rejected.validation_status == "rejected" and flagged.validation_status == "flagged"
    assert round_stats(task.open_round())["verified_fooled"] == 0


def test_owner_validation_decides_at_once_and_can_override(demo_tasks, annotator, researcher, client_for):
    task = demo_tasks["sentiment"]
    example = make_example(task, annotator, fooled=True)
    response = client_for(researcher).post(f"/api/examples/{example.pk}/validations/", {"label": "correct"},
                                           format="json")
    assert response.status_code == 201 and response.json()["example"]["validation_status"] == "verified"
    assert Validation.objects.get(example=example).mode == "owner"
    assert round_stats(task.open_round())["verified_fooled"] == 1

    # A second owner overrides to incorrect: the verified-fooled count follows.
    other_owner = users(1, "owner")[0]
    task.owners.add(other_owner)
    response = client_for(other_owner).post(f"/api/examples/{example.pk}/validations/", {"label": "incorrect"},
                                            format="json")
    assert response.json()["example"]["validation_status"] == "rejected"
    assert round_stats(task.open_round())["verified_fooled"] == 0


@pytest.mark.django_db(transaction=True)
def test_concurrent_validators_never_over_count(demo_tasks, annotator):
    if connection.vendor != "postgresql":
        pytest.skip("row-lock concurrency is tested on PostgreSQL (DATABASE_URL=postgres://..., as in CI)")
    from annotation.serving import assign
    from annotation.validation import give_blind_answer, validate_example
    from core.errors import Conflict

    task = demo_tasks["sentiment"]
    # Under the fixed rule every vote weighs the same, so "exactly N" is three votes; the
    # adaptive rule's own race is test_adaptive_validation's.
    task.config = {**task.config, "validation": {"policy": "fixed"}}
    task.save()
    example = make_example(task, annotator, fooled=True)
    validators = users(8, "racer")
    for user in validators:
        assign(example, user)
        give_blind_answer(example.pk, user, {"label": "positive"})
    barrier = threading.Barrier(len(validators))
    errors = []

    def decide(user):
        from django.db import connection as thread_connection

        try:
            barrier.wait()
            validate_example(example.pk, user, label="correct")
        except Conflict as exc:  # "decided already" is expected for late ones
            errors.append(exc.message)
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=decide, args=(u,)) for u in validators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    example.refresh_from_db()
    assert example.validation_status == "verified"
    assert example.validations_correct == 3  # exactly N, never more
    assert Validation.objects.filter(example=example).exclude(label="").count() == 3
    assert errors == ["This example has been decided already."] * 5
    stats = round_stats(task.open_round())
    assert stats["verified_fooled"] == 1 and stats["validations"] == 3


def test_round_stats_on_a_constructed_scenario(demo_tasks, annotator, second_annotator, anonymous,
                                               django_assert_max_num_queries):
    """Hand-computed: 6 examples by two annotators; 3 fooled; 2 of those verified; 1 retracted;
    3 blind answers to the first annotator's examples, 2 of them agreeing."""
    task = demo_tasks["sentiment"]
    a1 = [make_example(task, annotator, fooled=f) for f in (True, True, False, False)]
    a2 = [make_example(task, second_annotator, fooled=f) for f in (True, False)]
    retracted = make_example(task, annotator, fooled=True)
    Example.objects.filter(pk=retracted.pk).update(retracted=True)
    make_example(task, None, fooled=True, source="import")  # imported data is not "collected"
    Example.objects.filter(pk__in=[a1[0].pk, a2[0].pk]).update(validation_status="verified")
    Example.objects.filter(pk=a1[2].pk).update(validation_status="verified")  # verified, not fooled
    v1, v2, v3 = users(3)
    Validation.objects.create(example=a1[0], validator=v1, blind_answer={"label": "positive"}, blind_agrees=True)
    Validation.objects.create(example=a1[1], validator=v2, blind_answer={"label": "positive"}, blind_agrees=True,
                              label="correct")
    Validation.objects.create(example=a1[1], validator=v3, blind_answer={"label": "negative"}, blind_agrees=False,
                              label="incorrect")
    # Saving keeps the counters; the queryset updates above went around it: a recount repairs them.
    repaired = {(d.name, d.annotator_id): (d.stored, d.actual) for d in counters.reconcile(task)}
    assert repaired[("collected", None)] == (7, 6) and repaired[("verified", None)] == (0, 3)
    assert repaired[("collected", annotator.pk)] == (5, 4) and ("blind_answers", None) not in repaired
    assert counters.reconcile(task) == []  # once repaired, a recount finds nothing

    with django_assert_max_num_queries(8):
        stats = anonymous.get("/api/tasks/sentiment/rounds/1/stats/").json()
    assert (stats["collected"], stats["fooled"], stats["verified_fooled"], stats["verified"]) == (6, 3, 2, 3)
    assert stats["validations"] == 2  # decided ones only
    assert stats["model_error_rate"] == pytest.approx(3 / 6)
    assert stats["verified_model_error_rate"] == pytest.approx(2 / 6)
    assert stats["blind_answers"] == 3 and stats["blind_agreement"] == pytest.approx(2 / 3)
    by = {row["collected"]: row for row in stats["annotators"]}
    assert by[4]["fooled"] == 2 and by[4]["verified_fooled"] == 1
    assert by[4]["model_error_rate"] == pytest.approx(0.5) and by[4]["verified_model_error_rate"] == pytest.approx(0.25)
    assert by[4]["blind_answers"] == 3 and by[4]["blind_agreement"] == pytest.approx(2 / 3)
    assert by[2]["fooled"] == 1 and by[2]["verified_fooled"] == 1 and by[2]["verified_model_error_rate"] == 0.5
    assert by[2]["blind_answers"] == 0 and by[2]["blind_agreement"] is None
    assert all(row["annotator"].startswith("a-") for row in stats["annotators"])
    assert round_stats(task.open_round()) == stats
    assert anonymous.get("/api/tasks/sentiment/rounds/9/stats/").status_code == 404


def test_sock_puppets_cannot_pick_a_writers_examples_by_id(demo_tasks, annotator, client_for, settings):
    """One person, three fresh accounts and a script: they post on the ids they want to
    verify, without asking the queue. Every post is refused (409 not_assigned) and
    nothing is stored; only what the queue served them may be answered, until the claim expires."""
    from datetime import timedelta

    from django.utils import timezone

    from annotation.models import ValidationClaim

    task = demo_tasks["sentiment"]
    others = [make_example(task, annotator, fooled=True, text=f"other {i}") for i in range(3)]
    target = make_example(task, annotator, fooled=True, label="positive", text="mislabelled on purpose")
    puppets = [client_for(user) for user in users(3, "puppet")]
    for puppet in puppets:
        for path, body in ((f"/api/examples/{target.pk}/blind-answer/", {"answer": {"label": "positive"}}),
                           (f"/api/examples/{target.pk}/validations/", {"label": "correct"})):
            response = puppet.post(path, body, format="json")
            assert response.status_code == 409, response.content
            assert response.json()["code"] == "not_assigned" and "validations/next/" in response.json()["detail"]
    assert not Validation.objects.filter(example=target).exists()
    target.refresh_from_db()
    assert (target.validations_correct, target.validation_status) == (0, "pending")

    # Served one example, a puppet still cannot answer another one by id.
    puppet = puppets[0]
    item = puppet.get("/api/tasks/sentiment/validations/next/").json()
    wanted = next(example for example in [target, *others] if example.pk != item["id"])
    assert puppet.post(f"/api/examples/{wanted.pk}/blind-answer/", {"answer": {"label": "positive"}},
                       format="json").status_code == 409
    # Asking again does not draw again: the same example, while the claim lasts.
    assert all(puppet.get("/api/tasks/sentiment/validations/next/").json()["id"] == item["id"] for _ in range(5))
    # What was served is theirs to answer ...
    assert puppet.post(f"/api/examples/{item['id']}/blind-answer/", {"answer": {"label": "positive"}},
                       format="json").status_code == 201
    # ... until the claim expires.
    second = puppets[1]
    item = second.get("/api/tasks/sentiment/validations/next/").json()
    ValidationClaim.objects.filter(validator=second.user).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = second.post(f"/api/examples/{item['id']}/blind-answer/", {"answer": {"label": "positive"}},
                           format="json")
    assert response.status_code == 409 and response.json()["code"] == "not_assigned"
    again = second.get("/api/tasks/sentiment/validations/next/").json()["id"]  # a draw of its own
    assert second.post(f"/api/examples/{again}/blind-answer/", {"answer": {"label": "positive"}},
                       format="json").status_code == 201
    assert settings.VALIDATION_CLAIM_SECONDS > 0


def test_the_validate_page_serves_its_item_to_the_signed_in_validator(demo_tasks, annotator, second_annotator,
                                                                     client_for):
    from annotation.models import ValidationClaim

    example = make_example(demo_tasks["sentiment"], annotator, fooled=True)
    client = client_for(second_annotator)
    assert client.get("/tasks/sentiment/validate/").status_code == 200
    assert ValidationClaim.objects.filter(example=example, validator=second_annotator).exists()
    assert client.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "positive"}},
                       format="json").status_code == 201


def test_the_queue_walk_reads_past_pages_the_validator_decided(demo_tasks, annotator, monkeypatch):
    """The next item is found a page of the queue's index at a time: past pages whose
    examples the validator decided already, to the first they did not."""
    from annotation import serving

    monkeypatch.setattr(serving, "QUEUE_PAGE", 2)
    task = demo_tasks["sentiment"]
    examples = [make_example(task, annotator, fooled=True, text=f"walked {i}") for i in range(6)]
    [validator] = users(1, "walker")
    for example in examples[:5]:
        Validation.objects.create(example=example, validator=validator, label="correct")
    assert serving.draw_from_queue(task, validator).pk == examples[5].pk
    Validation.objects.create(example=examples[5], validator=validator, label="correct")
    assert serving.draw_from_queue(task, validator) is None
