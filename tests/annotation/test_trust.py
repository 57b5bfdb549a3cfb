"""Who decides an example, tried from the attacker's side: one person with many
accounts, a script, and an MTurk id (``annotation.trust``)."""

import re
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from annotation import serving, sessions, trust, validation
from annotation.models import AccountAddress, AnnotationSession, Example, Validation
from annotation.stats import round_stats

pytestmark = pytest.mark.django_db

WRITERS_ADDRESS = "203.0.113.7"
PASSWORD = "a-long-enough-pass-123"


def sign_up(username, address):
    """A new account made through the sign-up page, as a script would, with its e-mail
    address confirmed through the link sent (unconfirmed, its votes would never count),
    and a client signed in as it (the page signs in)."""
    from django.core import mail

    client = APIClient(REMOTE_ADDR=address)
    response = client.post("/accounts/signup/", {"username": username, "email": f"{username}@example.org",
                                                 "password1": PASSWORD, "password2": PASSWORD})
    assert response.status_code == 302, response.content
    link = re.search(r"https?://\S+/accounts/verify/\S+", mail.outbox[-1].body).group(0)
    assert client.get(link).status_code == 200
    client.user = get_user_model().objects.get(username=username)
    return client


def established(user, days=30):
    get_user_model().objects.filter(pk=user.pk).update(date_joined=timezone.now() - timedelta(days=days))
    user.refresh_from_db()
    return user


def account(username, address=None):
    user = get_user_model().objects.create_user(username, password=PASSWORD,
                                                date_joined=timezone.now() - timedelta(days=30))
    if address:
        trust.record_address(user, address)
    return user


def write(task, writer, *, label="positive", fooled=True, session=None, text="A statement"):
    return Example.objects.create(
        task=task, round=task.open_round(), context=task.contexts.first(), annotator=writer, session=session,
        inputs={"statement": text}, target={"label": label}, fooled=fooled,
        prediction={"label": "negative" if label == "positive" else "positive"})


@pytest.fixture(autouse=True)
def fixed_rule(demo_tasks):
    """Who may decide is tested here under the fixed rule (three matching votes), where
    each vote's weight is the same: the counts below are that rule's. The adaptive rule's
    weights are test_adaptive_validation's (its newcomers' cap, one account never alone)."""
    for task in demo_tasks.values():
        task.config = {**task.config, "validation": {**task.config.get("validation", {}), "policy": "fixed"}}
        task.save()


def paid(task, writer, **kwargs):
    """An example written in an MTurk assignment: it can earn its writer money."""
    hit = sessions.start_session(writer, task, mturk_assignment_id=f"ASSIGN{writer.pk}",
                                 mode=AnnotationSession.Mode.CREATE)
    return write(task, writer, session=hit, **kwargs)


def vote(user, example, label="correct", *, answer=None, session=None):
    """Serve, answer blind, and decide, through the services the API calls."""
    serving.assign(example, user)
    answer = answer or example.target
    validation.give_blind_answer(example.pk, user, answer)
    return validation.validate_example(example.pk, user, label=label, session=session).validation


# --- an account is not a person ---------------------------------------------------------


def test_sock_puppets_signed_up_at_the_writers_address_cannot_validate_the_writer(live_tasks):
    task = live_tasks["sentiment"]
    writer = sign_up("writer", WRITERS_ADDRESS)
    created = writer.post("/api/tasks/sentiment/examples/", {
        "context": task.contexts.first().pk, "inputs": {"statement": "Not bad at all"},
        "target": {"label": "negative"}}, format="json")
    assert created.status_code == 201, created.content
    example = Example.objects.get(annotator=writer.user)
    stranger = sign_up("stranger", "198.51.100.9")
    established(stranger.user)
    puppets = [sign_up(f"puppet{i}", WRITERS_ADDRESS) for i in range(3)]
    for puppet in puppets:
        established(puppet.user)
        # The queue never serves them the writer's example ...
        assert puppet.get("/api/tasks/sentiment/validations/next/").status_code == 204
        # ... and a claim made by hand does not help: they count as the writer.
        serving.assign(example, puppet.user)
        answered = puppet.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "negative"}},
                               format="json")
        assert answered.status_code == 403 and "counts as the writer" in answered.json()["detail"]
        decided = puppet.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json")
        assert decided.status_code == 403
    assert not Validation.objects.filter(example=example).exists()
    # Someone at another address is served it.
    assert stranger.get("/api/tasks/sentiment/validations/next/").json()["id"] == example.pk
    # Only hashes are kept, never the address.
    assert not AccountAddress.objects.filter(address_hash__contains="203.0.113").exists()
    assert AccountAddress.objects.filter(user=writer.user).count() == 1


def test_an_account_seen_at_the_writers_address_later_counts_as_the_writer(demo_tasks, annotator, second_annotator):
    task = with_trust_rule(demo_tasks["sentiment"], decides="paid")  # any aged account decides unpaid ones
    example = write(task, annotator)
    trust.record_address(annotator, "2001:db8:5:6::17")
    trust.record_address(second_annotator, "198.51.100.1")
    assert vote(second_annotator, example).counted  # a stranger, for now
    puppet = account("puppet")
    trust.record_address(puppet, "2001:db8:5:6:ffff::2")  # another host in the writer's IPv6 /64
    other = write(task, annotator, text="Another one")
    serving.assign(other, puppet)
    with pytest.raises(validation.Forbidden, match="counts as the writer"):
        validation.give_blind_answer(other.pk, puppet, {"label": "positive"})
    assert serving.next_for(task, puppet) is None


def test_a_loopback_address_links_no_one():
    """A try-out on the machine itself (and a proxy that hides its clients) shows every
    account at 127.0.0.1: that is no evidence that they are one person."""
    assert trust.address_hash("127.0.0.1") == trust.address_hash("::1") == trust.address_hash("::ffff:127.0.0.1") == ""
    assert trust.address_hash("203.0.113.7") == trust.address_hash("::ffff:203.0.113.7") != ""
    assert trust.address_hash("2001:db8::1") == trust.address_hash("2001:db8::2") != trust.address_hash("2001:db9::1")


# --- new accounts wait -------------------------------------------------------------------


def test_votes_of_fresh_sign_ups_are_stored_but_decide_nothing(demo_tasks, annotator, settings):
    settings.VALIDATOR_MIN_ACCOUNT_AGE = 24 * 3600
    task = with_trust_rule(demo_tasks["sentiment"], decides="paid")  # aged accounts decide unpaid ones
    example = write(task, annotator, label="negative")  # mislabelled, and it "fooled" the model
    before = round_stats(task.open_round())
    puppets = [sign_up(f"fresh{i}", f"198.51.100.{10 + i}") for i in range(3)]
    for puppet in puppets:
        serving.assign(example, puppet.user)
        assert puppet.post(f"/api/examples/{example.pk}/blind-answer/", {"answer": {"label": "negative"}},
                           format="json").status_code == 201
        decided = puppet.post(f"/api/examples/{example.pk}/validations/", {"label": "correct"}, format="json")
        assert decided.status_code == 201
        body = decided.json()
        assert body["counted"] is False and body["not_counted_because"] == "new_account"
        assert "24 hours" in body["note"]
    example.refresh_from_db()
    assert example.validation_status == "pending" and example.validations_correct == 0
    assert Validation.objects.filter(example=example, counted=False).count() == 3
    after = round_stats(task.open_round())
    assert after["verified_fooled"] == before["verified_fooled"] == 0
    assert after["verified_model_error_rate"] == before["verified_model_error_rate"]
    # A day later the same accounts vote with weight, on another example.
    other = write(task, annotator, text="Another one")
    for puppet in puppets:
        established(puppet.user, days=2)
        assert vote(puppet.user, other).counted
    other.refresh_from_db()
    assert other.validation_status == "verified"


# --- what decides an example that can earn money ----------------------------------------


def test_untrusted_accounts_do_not_decide_a_paid_example(demo_tasks, annotator):
    task = demo_tasks["sentiment"]
    example = paid(task, annotator, label="negative")  # mislabelled on purpose, to "fool" the model
    puppets = [account(f"puppet{i}", f"198.51.100.{20 + i}") for i in range(3)]
    for puppet in puppets:
        decided = vote(puppet, example)
        assert not decided.counted and decided.not_counted_because == "untrusted"
        assert "trust" in trust.explain(decided)
    example.refresh_from_db()
    assert example.validation_status == "pending" and example.validations_correct == 0
    assert round_stats(task.open_round())["verified_fooled"] == 0


def test_batch_validators_decide_a_paid_example_once_mturk_confirms_them(demo_tasks, annotator):
    task = demo_tasks["sentiment"]
    example = paid(task, annotator)
    workers = [account(f"mturk:AVALID{i}") for i in range(3)]
    hits = [sessions.start_session(w, task, mturk_assignment_id=f"V{i}", mode=AnnotationSession.Mode.VALIDATE,
                                   provisional=True) for i, w in enumerate(workers)]
    for worker, hit in zip(workers, hits, strict=True):
        decided = vote(worker, example, session=hit)
        assert decided.not_counted_because == "provisional"
    example.refresh_from_db()
    assert example.validation_status == "pending"
    for hit in hits:
        validation.confirm_session(hit)
    example.refresh_from_db()
    assert example.validation_status == "verified" and example.validations_correct == 3
    assert Validation.objects.filter(example=example, counted=True, not_counted_because="").count() == 3


def with_trust_rule(task, **rule):
    task.config = {**task.config, "validator_trust": rule}
    task.save()
    task.refresh_from_db()
    return task


def test_trust_is_earned_against_decisions_the_account_did_not_make(demo_tasks, annotator, researcher):
    task = with_trust_rule(demo_tasks["sentiment"], min_answers=4, min_agreement=0.75, min_reference_answers=4,
                           decides="paid")
    candidate = account("candidate", "198.51.100.30")
    # A clique of puppets deciding each other's unpaid examples earns nothing.
    clique = [account(f"clique{i}", f"198.51.100.{40 + i}") for i in range(3)]
    for i in range(4):
        example = write(task, clique[0], text=f"clique {i}")
        for voter in [candidate, *clique[1:]]:
            vote(voter, example)
        example.refresh_from_db()
        assert example.validation_status == "verified"
    assert trust.standing(task, candidate).answers == 0 and not trust.standing(task, candidate).trusted
    # Blind answers on examples a researcher decided do count, and so does disagreement.
    # The writer is right on two and wrong on two; the candidate agrees on three.
    references = [write(task, annotator, text=f"reference {i}") for i in range(4)]
    for i, example in enumerate(references):
        serving.assign(example, candidate)
        validation.give_blind_answer(example.pk, candidate, {"label": "positive" if i == 0 else "negative"})
    assert trust.standing(task, candidate).answers == 0  # not decided yet
    for i, example in enumerate(references):
        validation.validate_example(example.pk, researcher, label="correct" if i < 2 else "incorrect")
    record = trust.standing(task, candidate)
    assert (record.answers, record.agreeing, record.constant, record.trusted) == (4, 3, 2, True)
    # Now the candidate's vote decides a paid example; an untrusted one's does not.
    example = paid(task, annotator)
    assert vote(candidate, example).counted
    assert not vote(account("newcomer", "198.51.100.31"), example).counted


def test_a_validator_who_disagrees_with_the_decisions_stays_untrusted(demo_tasks, annotator, researcher):
    task = with_trust_rule(demo_tasks["sentiment"], min_answers=4, min_agreement=0.8)
    careless = account("careless", "198.51.100.50")
    references = [write(task, annotator, text=f"reference {i}") for i in range(5)]
    for i, example in enumerate(references):
        serving.assign(example, careless)
        validation.give_blind_answer(example.pk, careless, {"label": "positive" if i < 3 else "negative"})
        validation.validate_example(example.pk, researcher, label="correct")
    record = trust.standing(task, careless)
    assert (record.answers, record.agreeing, record.trusted) == (5, 3, False)
    assert "5 answers on checked items" in record.describe() and "60%" in record.describe()


def test_a_researcher_decides_a_paid_example_at_once(demo_tasks, annotator, researcher):
    example = paid(demo_tasks["sentiment"], annotator)
    decided = validation.validate_example(example.pk, researcher, label="incorrect")
    assert decided.validation.counted
    example.refresh_from_db()
    assert example.validation_status == "rejected"


def test_a_researchers_decision_on_their_own_sock_puppets_paid_example_does_not_pay_it(demo_tasks, researcher,
                                                                                        annotator):
    """A researcher who is one person with an MTurk writer (the same address) cannot
    verify that writer's fooling example into a bonus; another person still can."""
    task = demo_tasks["sentiment"]
    puppet = account("puppet", WRITERS_ADDRESS)
    trust.record_address(researcher, WRITERS_ADDRESS)
    example = paid(task, puppet)
    decided = validation.validate_example(example.pk, researcher, label="correct")
    assert not decided.validation.counted and decided.validation.not_counted_because == "same_person"
    assert "counts as the writer" in trust.explain(decided.validation)
    example.refresh_from_db()
    assert example.validation_status == "pending" and example.validations_correct == 0
    # Its uncounted decision is no reference either: blind answers on it earn no trust.
    assert not trust.reference_decisions(task).filter(pk=example.pk).exists()
    # An unpaid example of theirs (a test of the task) they still decide.
    trial = write(task, puppet, text="Trying my own task")
    assert validation.validate_example(trial.pk, researcher, label="correct").validation.counted
    # A second researcher, another person, decides the paid one.
    from tasks.roles import make_researcher

    colleague = make_researcher(account("colleague", "198.51.100.77"))
    task.owners.add(colleague)
    assert validation.validate_example(example.pk, colleague, label="correct").validation.counted
    example.refresh_from_db()
    assert example.validation_status == "verified"


def test_the_trust_rule_is_part_of_the_checked_task_config():
    from django.core.exceptions import ValidationError

    from tasks.config import validate_task_config

    base = {"context_fields": [], "input_fields": [{"name": "text"}], "model_inputs": ["text"],
            "labels": [{"name": "a"}, {"name": "b"}]}
    config = validate_task_config("classification", {**base, "validator_trust": {"min_answers": 5}})
    assert config.validator_trust == {"min_answers": 5, "min_agreement": 0.8, "min_reference_answers": 5,
                                      "decides": "all", "gold_min_answers": 5, "gold_min_agreement": 0.6}
    with pytest.raises(ValidationError, match="decides"):
        validate_task_config("classification", {**base, "validator_trust": {"decides": "nobody"}})
    with pytest.raises(ValidationError, match="min_agreement"):
        validate_task_config("classification", {**base, "validator_trust": {"min_agreement": 0.3}})
    with pytest.raises(ValidationError, match="min_reference_answers"):
        validate_task_config("classification", {**base, "validator_trust": {"min_reference_answers": -1}})
