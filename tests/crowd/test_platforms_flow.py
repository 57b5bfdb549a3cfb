"""The crowd's core flow on both platforms, through the same services: publish, arrive,
work, finish, sync (verified and approved), validate, bonus paid once; a forged worker
or participant id earns nothing; budgets hold in the batch's currency."""

from decimal import Decimal

import pytest

from annotation import validation
from annotation.models import Example
from core.errors import Conflict, Forbidden
from crowd import bonuses, publishing, sync
from crowd.models import Assignment, Batch, BonusPayment, CrowdBudget, WorkerIdentity

pytestmark = pytest.mark.django_db

# ``side`` (tests/crowd/conftest.py): each test runs once on MTurk, once on Prolific.


def test_publish_work_sync_approve_and_a_bonus_paid_once(live_tasks, side, client, researcher):
    batch = side.publish(live_tasks["sentiment"])
    assert batch.status == Batch.Status.PUBLISHED and batch.platform == side.name
    assignment = side.do_work(client, batch)
    assert assignment.status == Assignment.Status.FINISHED and not assignment.worker.is_verified

    report = sync.sync()
    assert report.approved == 1 and report.rejected == 0, report
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.APPROVED and assignment.verified_at
    assert WorkerIdentity.objects.get(pk=assignment.worker_id).is_verified
    assert side.approved_there(assignment)

    assert bonuses.pay_bonuses().waiting == 1 and not BonusPayment.objects.exists()
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    report = bonuses.pay_bonuses()
    assert report.paid == 1 and report.amount == Decimal("0.25"), report
    assert side.paid_to(side.worker) == [Decimal("0.25")]
    for _ in range(3):  # again and again: nothing more
        assert bonuses.pay_bonuses().paid == 0
    assert sync.sync().approved == 0
    assert side.paid_to(side.worker) == [Decimal("0.25")]
    assert BonusPayment.objects.get().status == BonusPayment.Status.PAID


def test_a_forged_worker_id_earns_nothing_and_decides_nothing(live_tasks, side, client, researcher):
    batch = side.publish(live_tasks["sentiment"])
    forged = side.forge(client, batch, side.other)
    for example in Example.objects.filter(session=forged.session):
        validation.validate_example(example.pk, researcher, label="correct")
    sync.sync()
    bonuses.pay_bonuses()
    forged.refresh_from_db()
    assert forged.status == Assignment.Status.FINISHED and forged.verified_at is None
    assert not WorkerIdentity.objects.get(worker_id=side.other).is_verified
    assert side.paid_to(side.other) == [] and not BonusPayment.objects.exists()


def test_the_budget_holds_on_both_platforms(live_tasks, side):
    task = live_tasks["sentiment"]
    side.publish(task)
    CrowdBudget.objects.filter(task=task).update(amount=Decimal("1.00"))
    CrowdBudget.objects.get_or_create(task=task, defaults={"amount": Decimal("1.00")})
    with pytest.raises(Conflict, match="crowd budget"):
        side.publish(task)


def test_a_large_batch_waits_for_a_second_person_on_both_platforms(live_tasks, side, researcher, superuser,
                                                                   settings):
    settings.CROWD_APPROVAL_THRESHOLD = Decimal("0.50")
    before = side.calls()
    batch = side.publish(live_tasks["sentiment"], user=researcher)
    assert batch.status == Batch.Status.AWAITING_APPROVAL and not batch.hit_rows.filter(hit_id__isnull=False)
    posted = [name for name, *_ in (side.fake.calls[before:])]
    assert not [name for name in posted if "create" in name.lower() or name == "CreateHITWithHITType"]
    with pytest.raises(Forbidden):
        publishing.approve(batch, researcher)  # not its creator, and only a superuser
    batch = publishing.approve(batch, superuser)
    assert batch.status == Batch.Status.PUBLISHED and batch.approved_by == superuser
    assert batch.hit_rows.get().hit_id
