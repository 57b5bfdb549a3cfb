"""A provisional account's work joining the account it turned out to be (``annotation.joining``,
``onboarding.join``): what moves, what is dropped, and that the counters stay equal to a
recount. The crowd's side (who gets joined, and when) is tests/crowd/test_identity.py."""

import pytest
from django.contrib.auth import get_user_model

from annotation import joining, onboarding, sessions, trust
from annotation.models import AccountAddress, AnnotationSession, Example, OnboardingRecord, Validation

from .test_counters import account, no_drift, vote, write

pytestmark = pytest.mark.django_db


def arrival(task, worker_account, name="mturk:AWORKER:unconfirmed:1"):
    """A provisional user and its session (a crowd arrival not confirmed yet)."""
    user = get_user_model().objects.create_user(name)
    return user, sessions.start_session(user, task, mturk_assignment_id="ASSIGNJOIN01", provisional=True)


def test_the_work_moves_and_a_vote_on_the_account_s_own_or_twice_decided_example_is_dropped(demo_tasks):
    task = demo_tasks["sentiment"]
    worker, other = account("worker"), account("other_writer")
    own = write(task, worker, fooled=True, text="The account's own example")
    theirs = write(task, other, fooled=False, text="Someone else's example")
    both = write(task, other, fooled=True, text="Validated by both")
    vote(worker, both)
    provisional, session = arrival(task, worker)
    trust.record_address(provisional, "198.51.100.44")
    written = write(task, provisional, fooled=True, session=session, text="Written before the confirmation")
    for example in (own, theirs, both):  # the arrival may be served the account's own example
        vote(provisional, example, session=session)
    no_drift()

    joined = joining.join(provisional, worker)
    assert (joined.examples, joined.validations, joined.dropped_validations) == (1, 1, 2)
    assert Example.objects.get(pk=written.pk).annotator == worker
    assert AnnotationSession.objects.get(pk=session.pk).user == worker
    assert set(Validation.objects.filter(validator=worker).values_list("example_id", flat=True)) == {
        both.pk, theirs.pk}
    assert not Validation.objects.filter(example=own).exists()  # nobody validates their own example
    assert Validation.objects.filter(example=both).count() == 1  # nor one example twice
    assert AccountAddress.objects.filter(user=worker, address_hash=trust.address_hash("198.51.100.44")).exists()
    assert not get_user_model().objects.filter(pk=provisional.pk).exists()
    no_drift()
    session.refresh_from_db()
    assert sessions.session_problem(session) is None  # its token goes on working, for the account


def test_onboarding_tries_add_up_a_pass_passes_and_the_account_s_block_stands(with_onboarding, demo_tasks):
    task = demo_tasks["sentiment"]
    max_tries = task.parsed_config.onboarding["max_tries"]
    worker = account("worker")
    OnboardingRecord.objects.create(user=worker, task=task, tries=max_tries - 1, last_score=1)
    provisional, _ = arrival(task, worker)
    OnboardingRecord.objects.create(user=provisional, task=task, tries=1, last_score=2)
    onboarding.join(provisional, worker)
    record = OnboardingRecord.objects.get(user=worker, task=task)
    assert record.tries == max_tries and record.blocked_at is not None and record.passed_at is None

    passer = account("passer")
    provisional, _ = arrival(task, passer, "mturk:APASSER:unconfirmed:2")
    OnboardingRecord.objects.create(user=provisional, task=task, tries=1, last_score=4,
                                    passed_at=record.updated_at)
    onboarding.join(provisional, passer)
    assert OnboardingRecord.objects.get(user=passer, task=task).passed_at is not None

    late = account("late")  # blocked already: a pass made meanwhile does not lift it
    OnboardingRecord.objects.create(user=late, task=task, tries=max_tries, blocked_at=record.updated_at)
    provisional, _ = arrival(task, late, "mturk:ALATE:unconfirmed:3")
    OnboardingRecord.objects.create(user=provisional, task=task, tries=1, passed_at=record.updated_at)
    onboarding.join(provisional, late)
    kept = OnboardingRecord.objects.get(user=late, task=task)
    assert kept.blocked_at is not None and kept.passed_at is None
    assert not OnboardingRecord.objects.filter(user=provisional).exists()


def test_carry_pass_copies_only_a_pass(with_onboarding, demo_tasks):
    task = demo_tasks["sentiment"]
    worker, failed = account("worker"), account("failed")
    OnboardingRecord.objects.create(user=worker, task=task, tries=1, passed_at=worker.date_joined)
    OnboardingRecord.objects.create(user=failed, task=task, tries=2, blocked_at=failed.date_joined)
    arriving, _ = arrival(task, worker)
    assert onboarding.carry_pass(task, worker, arriving) and onboarding.standing(task, arriving).passed
    other, _ = arrival(task, failed, "mturk:AFAILED:unconfirmed:4")
    assert not onboarding.carry_pass(task, failed, other)
    state = onboarding.standing(task, other)
    assert not state.passed and not state.blocked and state.tries == 0  # nothing of the account's record
