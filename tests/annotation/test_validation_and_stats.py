"""Validation: queue order, refusals, N matching validations, owner override, concurrency; stats."""

import threading

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from annotation.models import Example, Validation
from annotation.services import round_stats
from tasks.models import Round

pytestmark = pytest.mark.django_db


def make_example(task, annotator, *, fooled, label="positive", text="A statement", source="annotation"):
    rnd = task.open_round()
    context = task.contexts.first()
    example = Example.objects.create(
        task=task, round=rnd, context=context, annotator=annotator, source=source,
        inputs={"statement": text}, target={"label": label}, fooled=fooled,
        prediction={"label": "negative" if fooled else label, "probabilities": {}},
    )
    Round.objects.filter(pk=rnd.pk).update(examples_collected=rnd.examples_collected + 1)
    return example


def users(n, prefix="validator"):
    User = get_user_model()
    return [User.objects.create_user(f"{prefix}{i}", password="pw-pw-pw-123") for i in range(n)]


def test_queue_order_and_exclusions(demo_tasks, annotator, second_annotator, client_for):
    task = demo_tasks["sentiment"]
    plain = make_example(task, annotator, fooled=False, text="plain")
    fooling = make_example(task, annotator, fooled=True, text="fooling")
    fooling_validated = make_example(task, annotator, fooled=True, text="fooling, validated once")
    Validation.objects.create(example=fooling_validated, validator=users(1, "x")[0], label="correct")
    Example.objects.filter(pk=fooling_validated.pk).update(validations_correct=1)
    retracted = make_example(task, annotator, fooled=True, text="retracted")
    Example.objects.filter(pk=retracted.pk).update(retracted=True)
    own = make_example(task, second_annotator, fooled=True, text="mine")

    client = client_for(second_annotator)
    order = []
    for _ in range(3):
        item = client.get("/api/tasks/sentiment/validations/next/").json()
        order.append(item["id"])
        assert item["target"] is None and item["blind"] is True  # blind validation
        assert client.post(f"/api/examples/{item['id']}/validations/", {"label": "correct"},
                           format="json").status_code == 201
    assert order == [fooling.pk, fooling_validated.pk, plain.pk]
    response = client.get("/api/tasks/sentiment/validations/next/")
    assert response.status_code == 404 and "Nothing to validate" in response.json()["detail"]
    assert retracted.pk not in order and own.pk not in order


def test_own_and_twice_are_refused_and_change_nothing(demo_tasks, annotator, second_annotator, client_for):
    example = make_example(demo_tasks["sentiment"], annotator, fooled=True)
    response = client_for(annotator).post(f"/api/examples/{example.pk}/validations/", {"label": "correct"},
                                          format="json")
    assert response.status_code == 403 and "your own example" in response.json()["detail"]
    client = client_for(second_annotator)
    assert client.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"},
                       format="json").status_code == 201
    response = client.post(f"/api/examples/{example.pk}/validations/", {"label": "incorrect"}, format="json")
    assert response.status_code == 409 and "already validated" in response.json()["detail"]
    example.refresh_from_db()
    assert (example.validations_correct, example.validations_incorrect) == (1, 0)
    assert Validation.objects.filter(example=example).count() == 1
    assert client.post("/api/examples/999999/validations/", {"label": "correct"}, format="json").status_code == 404
    assert client.post(f"/api/examples/{example.pk}/validations/", {"label": "maybe"},
                       format="json").status_code == 400


def test_three_matching_validations_verify_and_count_verified_fooled(demo_tasks, annotator, client_for):
    task = demo_tasks["sentiment"]
    example = make_example(task, annotator, fooled=True)
    a, b, c, d = users(4)
    for validator, label in [(a, "correct"), (b, "incorrect"), (c, "correct")]:
        client_for(validator).post(f"/api/examples/{example.pk}/validations/", {"label": label}, format="json")
    example.refresh_from_db()
    assert example.validation_status == "pending"  # 2 correct, 1 incorrect: not yet 3 matching
    client_for(d).post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json")
    example.refresh_from_db()
    assert example.validation_status == "verified"
    rnd = task.open_round()
    assert rnd.examples_verified_fooled == 1 and rnd.validations_count == 4
    # Decided: more user validations are refused.
    late = users(1, "late")[0]
    assert client_for(late).post(f"/api/examples/{example.pk}/validations/", {"label": "incorrect"},
                                 format="json").status_code == 409


def test_three_incorrect_reject_and_flags_flag(demo_tasks, annotator, client_for):
    task = demo_tasks["sentiment"]
    rejected = make_example(task, annotator, fooled=True)
    flagged = make_example(task, annotator, fooled=False)
    for validator in users(3):
        client_for(validator).post(f"/api/examples/{rejected.pk}/validations/", {"label": "incorrect"}, format="json")
        client_for(validator).post(f"/api/examples/{flagged.pk}/validations/",
                                   {"label": "flagged", "reason": "nonsense"}, format="json")
    rejected.refresh_from_db()
    flagged.refresh_from_db()
    assert rejected.validation_status == "rejected" and flagged.validation_status == "flagged"
    assert task.open_round().examples_verified_fooled == 0


def test_owner_validation_decides_at_once_and_can_override(demo_tasks, annotator, researcher, client_for):
    task = demo_tasks["sentiment"]
    example = make_example(task, annotator, fooled=True)
    response = client_for(researcher).post(f"/api/examples/{example.pk}/validations/", {"label": "correct"},
                                           format="json")
    assert response.status_code == 201 and response.json()["validation_status"] == "verified"
    assert Validation.objects.get(example=example).mode == "owner"
    assert task.open_round().examples_verified_fooled == 1

    # A second owner overrides to incorrect: the verified-fooled counter follows.
    other_owner = users(1, "owner")[0]
    task.owners.add(other_owner)
    response = client_for(other_owner).post(f"/api/examples/{example.pk}/validations/", {"label": "incorrect"},
                                            format="json")
    assert response.json()["validation_status"] == "rejected"
    assert task.open_round().examples_verified_fooled == 0


def test_blind_reveal_shows_the_writers_label(demo_tasks, annotator, second_annotator, client_for):
    example = make_example(demo_tasks["sentiment"], annotator, fooled=True, label="negative")
    response = client_for(second_annotator).post(f"/api/examples/{example.pk}/reveal/")
    assert response.json() == {"target": {"label": "negative"}}


@pytest.mark.django_db(transaction=True)
def test_concurrent_validators_never_over_count(demo_tasks, annotator):
    if connection.vendor != "postgresql":
        pytest.skip("row-lock concurrency is tested on PostgreSQL (DATABASE_URL=postgres://..., as in CI)")
    from annotation.services import validate_example

    task = demo_tasks["sentiment"]
    example = make_example(task, annotator, fooled=True)
    validators = users(8, "racer")
    barrier = threading.Barrier(len(validators))
    errors = []

    def validate(user):
        from django.db import connection as thread_connection

        try:
            barrier.wait()
            validate_example(example.pk, user, label="correct")
        except Exception as exc:  # 409 "decided already" is expected for late ones
            errors.append(type(exc).__name__)
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=validate, args=(u,)) for u in validators]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    example.refresh_from_db()
    assert example.validation_status == "verified"
    assert example.validations_correct == 3  # exactly N, never more
    assert Validation.objects.filter(example=example).count() == 3
    assert errors == ["Conflict"] * 5
    rnd = task.open_round()
    assert rnd.examples_verified_fooled == 1 and rnd.validations_count == 3


def test_round_stats_on_a_constructed_scenario(demo_tasks, annotator, second_annotator, researcher, anonymous):
    """Hand-computed: 6 examples by two annotators; 3 fooled; 2 of those verified; 1 retracted."""
    task = demo_tasks["sentiment"]
    a1 = [make_example(task, annotator, fooled=f) for f in (True, True, False, False)]
    a2 = [make_example(task, second_annotator, fooled=f) for f in (True, False)]
    retracted = make_example(task, annotator, fooled=True)
    Example.objects.filter(pk=retracted.pk).update(retracted=True)
    make_example(task, None, fooled=True, source="import")  # imported data is not "collected"
    Example.objects.filter(pk__in=[a1[0].pk, a2[0].pk]).update(validation_status="verified")
    Example.objects.filter(pk=a1[2].pk).update(validation_status="verified")  # verified, not fooled

    stats = anonymous.get("/api/tasks/sentiment/rounds/1/stats/").json()
    assert (stats["collected"], stats["fooled"], stats["verified_fooled"]) == (6, 3, 2)
    assert stats["model_error_rate"] == pytest.approx(3 / 6)
    assert stats["verified_model_error_rate"] == pytest.approx(2 / 6)
    by = {row["collected"]: row for row in stats["annotators"]}
    assert by[4]["fooled"] == 2 and by[4]["verified_fooled"] == 1
    assert by[4]["model_error_rate"] == pytest.approx(0.5) and by[4]["verified_model_error_rate"] == pytest.approx(0.25)
    assert by[2]["fooled"] == 1 and by[2]["verified_fooled"] == 1 and by[2]["verified_model_error_rate"] == 0.5
    assert all(row["annotator"].startswith("a-") for row in stats["annotators"])
    assert round_stats(task.open_round()) == stats
    assert anonymous.get("/api/tasks/sentiment/rounds/9/stats/").status_code == 404
