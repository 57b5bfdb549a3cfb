"""A flagged or escalated paid example never settles at $0 because a deadline passed,
on both platforms: the assignment's base pay follows the platform (approved at the
sync, flags or not), the bonus waits for a researcher's decision past the deadline,
the researchers are reminded, and their decision pays it, or not, once."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.utils import timezone

from annotation import examples as example_services
from annotation import serving, validation
from annotation.models import Example, VouchedValidator
from crowd import bonuses, me, sync
from crowd.models import Assignment, BonusPayment, Watermark

pytestmark = pytest.mark.django_db


def written(side, client, batch):
    """One assignment done and confirmed by the platform: its (fooling, plain) examples."""
    assignment = side.do_work(client, batch)
    assert sync.sync().approved == 1
    fooling = Example.objects.get(session=assignment.session, fooled=True)
    plain = Example.objects.get(session=assignment.session, fooled=False)
    return Assignment.objects.get(pk=assignment.pk), fooling, plain


def deadline_passes(assignment):
    """The assignment's bonus deadline (its auto-approval time) is now behind us."""
    Assignment.objects.filter(pk=assignment.pk).update(auto_approval_at=timezone.now() - timedelta(seconds=1))


def vote(example, validator, label):
    serving.assign(example, validator)
    validation.give_blind_answer(example.pk, validator, {"label": example.target["label"]})
    return validation.validate_example(example.pk, validator, label=label)


@pytest.fixture
def two_validators(live_tasks, annotator, second_annotator, researcher):
    """Two established site accounts the researcher vouches for, with no address in
    common: two people whose votes decide a paid example (the fixed policy: two
    matching votes decide, so no reliability estimate is involved)."""
    task = live_tasks["sentiment"]
    task.config = {**task.config, "num_matching_validations": 2,
                   "validation": {**task.config.get("validation", {}), "policy": "fixed"}}
    task.save()
    for validator in (annotator, second_annotator):
        VouchedValidator.objects.create(task=task, validator=validator, vouched_by=researcher)
    return annotator, second_annotator


def test_a_flag_just_before_the_deadline_holds_the_bonus_until_a_researcher_pays_it_once(
        live_tasks, side, client, researcher, two_validators):
    batch = side.publish(live_tasks["sentiment"], user=researcher)
    assignment, fooling, plain = written(side, client, batch)
    assert assignment.status == Assignment.Status.APPROVED and side.approved_there(assignment)  # base pay
    for validator in two_validators:
        vote(fooling, validator, "correct")
    validation.validate_example(plain.pk, researcher, label="correct")
    fooling.refresh_from_db()
    assert fooling.validation_status == Example.ValidationStatus.VERIFIED  # two people verified it
    # A second before its deadline, the verified example is flagged.
    Assignment.objects.filter(pk=assignment.pk).update(auto_approval_at=timezone.now() + timedelta(seconds=1))
    example_services.flag_example(fooling, researcher, "Is this label right?")
    deadline_passes(assignment)
    for _ in range(2):
        report = bonuses.pay_bonuses()
        assert report.held == 1 and report.settled == 0, report
    assert not BonusPayment.objects.exists() and side.paid_to(side.worker) == []
    assert Assignment.objects.get(pk=assignment.pk).bonus_held_since is not None
    [row] = me.assignments_page(assignment.worker.user).rows  # the worker is told why it waits
    assert row["bonus_held"] and not row["bonus_settled"]
    # A researcher looks and clears the flag: the validators' decision stands, and it is paid, once.
    example_services.unflag_example(Example.objects.get(pk=fooling.pk), researcher)
    report = bonuses.pay_bonuses()
    assert report.paid == 1 and report.amount == Decimal("0.25"), report
    for _ in range(2):
        assert bonuses.pay_bonuses().paid == 0
    assert side.paid_to(side.worker) == [Decimal("0.25")]
    assert BonusPayment.objects.get().example_ids == [fooling.pk]
    assert Assignment.objects.get(pk=assignment.pk).bonus_held_since is None
    [row] = me.assignments_page(assignment.worker.user).rows
    assert row["bonus_settled"] and not row["bonus_held"] and row["bonus_paid"] == Decimal("0.25")


def test_examples_the_validators_flag_wait_for_a_researcher_who_may_refuse_them(
        live_tasks, side, client, researcher, two_validators):
    """Two validators flag the fooling example: escalated, not settled at $0 at the
    deadline. The researcher decides it incorrect: settled at $0, once, with the reason."""
    batch = side.publish(live_tasks["sentiment"], user=researcher)
    assignment, fooling, plain = written(side, client, batch)
    for validator in two_validators:
        vote(fooling, validator, "flagged")
    fooling.refresh_from_db()
    assert fooling.validation_status == Example.ValidationStatus.ESCALATED
    validation.validate_example(plain.pk, researcher, label="correct")
    deadline_passes(assignment)
    assert bonuses.pay_bonuses().held == 1 and not BonusPayment.objects.exists()
    validation.validate_example(fooling.pk, researcher, label="incorrect")
    assert bonuses.pay_bonuses().settled == 1
    [row] = BonusPayment.objects.all()
    assert row.amount == 0 and row.status == BonusPayment.Status.PAID and "1 rejected" in row.note
    assert bonuses.pay_bonuses().settled == 0 and side.paid_to(side.worker) == []


def test_a_flag_cleared_on_an_undecided_example_past_the_deadline_still_waits_for_a_decision(
        live_tasks, crowd, client, researcher):
    from tests.crowd.platforms import MTurkSide

    side = MTurkSide(crowd)
    batch = side.publish(live_tasks["sentiment"], user=researcher)
    assignment, fooling, plain = written(side, client, batch)
    validation.validate_example(plain.pk, researcher, label="correct")
    example_services.flag_example(fooling, researcher, "Check this one.")
    deadline_passes(assignment)
    assert bonuses.pay_bonuses().held == 1
    example_services.unflag_example(Example.objects.get(pk=fooling.pk), researcher)  # cleared, not decided
    assert bonuses.pay_bonuses().held == 1 and not BonusPayment.objects.exists()
    validation.validate_example(fooling.pk, researcher, label="correct")
    assert bonuses.pay_bonuses().amounts == {"USD": Decimal("0.25")}


def test_undecided_examples_that_nobody_flagged_still_settle_at_the_deadline(live_tasks, crowd, client, researcher):
    from tests.crowd.platforms import MTurkSide

    side = MTurkSide(crowd)
    assignment, fooling, plain = written(side, client, side.publish(live_tasks["sentiment"], user=researcher))
    deadline_passes(assignment)
    report = bonuses.pay_bonuses()
    assert report.settled == 1 and report.held == 0
    assert "undecided at the deadline" in BonusPayment.objects.get().note


def test_the_researchers_are_reminded_of_held_bonuses_and_the_admin_lists_them(
        live_tasks, crowd, client, researcher, admin_client, settings):
    from tests.crowd.platforms import MTurkSide

    settings.ADMINS = [("Ops", "ops@example.org")]
    settings.BONUS_DECISION_REMINDER_HOURS = 24
    side = MTurkSide(crowd)
    batch = side.publish(live_tasks["sentiment"], user=researcher)
    assignment, fooling, plain = written(side, client, batch)
    example_services.flag_example(fooling, researcher, "Check this one.")
    mail.outbox.clear()
    assert bonuses.pay_bonuses().reminded == 2
    to_researcher = [m for m in mail.outbox if m.to == [researcher.email]]
    assert len(to_researcher) == 1 and "sentiment" in to_researcher[0].subject
    assert f"/admin/annotation/example/{fooling.pk}/change/" in to_researcher[0].body
    assert "no deadline settles it" in to_researcher[0].body
    assert any(m.to == ["ops@example.org"] for m in mail.outbox)
    assert bonuses.pay_bonuses().reminded == 0  # once per BONUS_DECISION_REMINDER_HOURS
    Watermark.objects.filter(name=bonuses.REMINDER_MARK).update(until=timezone.now() - timedelta(hours=25))
    assert bonuses.pay_bonuses().reminded == 2
    # The admin's due list: the held assignment, with a link to each example to decide.
    listed = admin_client.get("/admin/crowd/assignment/", {"held": "yes"})
    page = listed.content.decode()
    assert listed.status_code == 200 and assignment.assignment_id in page
    assert f"/admin/annotation/example/{fooling.pk}/change/" in page
    assert "wait for a researcher" in admin_client.get("/admin/crowd/bonuspayment/").content.decode()
