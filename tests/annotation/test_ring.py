"""The ring's tools against the validation queue, tried from the attacker's side: accounts
that ask at the same moment, and a script that asks again until what it wants comes up."""

from __future__ import annotations

import random

import pytest

from annotation import sessions, validation
from annotation.models import AnnotationSession, Example

from .test_trust import account, write

pytestmark = pytest.mark.django_db


def writes_paid(task, writer, *, label: str, text: str) -> Example:
    """An example written in the writer's MTurk assignment (it pays when verified)."""
    hit = (AnnotationSession.objects.filter(user=writer, task=task).exclude(mturk_assignment_id="").first()
           or sessions.start_session(writer, task, mturk_assignment_id=f"A-{writer.username}",
                                     mode=AnnotationSession.Mode.CREATE))
    return write(task, writer, label=label, text=text, session=hit)


# --- the ring's tools: the queue's head, and asking again --------------------------------


def pending_fooling(task, writer, n: int) -> list[Example]:
    return [writes_paid(task, writer, label="positive", text=f"Waiting {i}") for i in range(n)]


def test_accounts_asking_at_the_same_moment_do_not_land_on_one_example(demo_tasks, monkeypatch):
    """The queue's head was everyone's to predict: accounts of one script that asked at
    once were all served the same example, and two of them decide a paid one. Now each
    is drawn among the most urgent examples."""
    task = demo_tasks["sentiment"]
    monkeypatch.setattr(validation, "_draws", random.Random("same moment"))
    waiting = pending_fooling(task, account("writer", "203.0.113.80"), 20)
    accounts = [account(f"ring{i}", f"192.0.2.{20 + i}") for i in range(12)]
    served = [validation.next_for(task, user).pk for user in accounts]
    assert set(served) <= {example.pk for example in waiting}
    assert len(set(served[:3])) > 1  # the first three are not all on one
    assert len(set(served)) >= 6  # spread over the waiting examples (about 9 of 20 expected)


def test_asking_again_serves_the_same_example_until_the_claim_lapses(demo_tasks, researcher, monkeypatch):
    """A script that asks the queue again and again, answering only what it wants (a gold
    item it knows, its accomplice's example), is served the same example every time: a
    fresh draw costs waiting out the claim."""
    from datetime import timedelta

    from django.utils import timezone

    from annotation.models import ValidationClaim

    task = demo_tasks["sentiment"]
    monkeypatch.setattr(validation, "_draws", random.Random("asking again"))
    gold_writer = account("gold-writer", "203.0.113.81")
    for i in range(5):
        validation.mark_gold(write(task, gold_writer, text=f"Gold {i}").pk, researcher, "correct")
    pending_fooling(task, account("writer", "203.0.113.82"), 10)
    member = account("ring0", "192.0.2.30")
    first = validation.next_for(task, member)
    assert all(validation.next_for(task, member).pk == first.pk for _ in range(60))
    # Once answered, or once the claim lapses, the next one is drawn.
    ValidationClaim.objects.filter(validator=member).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert validation.next_for(task, member) is not None
