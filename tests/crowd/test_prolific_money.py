"""Prolific's bonuses, paid exactly once on a pay call that is not idempotent: the lost
answer, the refusal, the crash between "sent" and the call, two runs at once, the
person who settles what nobody can tell; and GBP and USD."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from annotation import validation
from annotation.models import Example
from core.errors import Forbidden
from crowd import bonuses, costs, prolific, sent_bonuses, sync
from crowd.models import Batch, BonusPayment
from tests.crowd.platforms import ProlificSide

pytestmark = pytest.mark.django_db


def ready(live_tasks, fake, client, researcher, currency="USD") -> tuple[ProlificSide, BonusPayment]:
    """An approved submission with one verified fooling example, its ledger row settled."""
    side = ProlificSide(fake, currency)
    batch = side.publish(live_tasks["sentiment"])
    assignment = side.do_work(client, batch)
    assert sync.sync().approved == 1
    for example in Example.objects.filter(session=assignment.session):
        validation.validate_example(example.pk, researcher, label="correct")
    row = bonuses.settle(type(assignment).objects.get(pk=assignment.pk))
    assert row.status == BonusPayment.Status.PENDING and row.amount == Decimal("0.25")
    return side, row


@pytest.mark.parametrize("currency", ["GBP", "USD"])
def test_a_bonus_is_set_up_then_paid_once_in_the_study_currency(live_tasks, prolific_crowd, client, researcher,
                                                                 currency):
    side, row = ready(live_tasks, prolific_crowd, client, researcher, currency)
    report = bonuses.pay_bonuses()
    assert report.paid == 1, report
    row.refresh_from_db()
    assert row.status == BonusPayment.Status.PAID and row.platform_ref and row.sent_at
    assert row.fees == Decimal("0.08") and row.total == Decimal("0.33")  # 33.3% of 25 (minor units), half up
    [payment] = prolific_crowd.payments
    assert payment["amount"] == 25 and payment["currency"] == currency
    assert str(Decimal("0.25")) in row.message and {"GBP": "£", "USD": "$"}[currency] in row.message
    spent = costs.batch_spend(row.assignment.hit.batch)
    assert spent.bonuses == Decimal("0.25") and spent.fees == Decimal("0.08") + costs.reward_fee(
        Decimal("1.00"), 2, "prolific")  # the set-up's own fees, and the estimate on the reward


def test_a_lost_pay_answer_is_never_sent_again_and_is_found_on_prolific(live_tasks, prolific_crowd, client,
                                                                        researcher):
    side, row = ready(live_tasks, prolific_crowd, client, researcher)
    prolific_crowd.inject("pay_bonus", "drop_after_commit")  # Prolific pays; the answer is lost
    report = bonuses.pay_bonuses()
    assert report.paid == 0 and len(report.errors) == 1
    row.refresh_from_db()
    assert row.status == BonusPayment.Status.PAID and "Found paid on Prolific" in row.last_error  # reconciled
    for _ in range(3):
        BonusPayment.objects.update(next_attempt_at=timezone.now() - timedelta(hours=2))
        bonuses.pay_bonuses()
    assert prolific_crowd.count("pay_bonus") == 1 and side.paid_to(side.worker) == [Decimal("0.25")]


def test_a_5xx_leaves_the_row_sent_until_a_superuser_settles_it(live_tasks, prolific_crowd, client, researcher,
                                                               django_user_model):
    side, row = ready(live_tasks, prolific_crowd, client, researcher)
    prolific_crowd.inject("pay_bonus", "server_error")  # nobody can tell whether it paid
    bonuses.pay_bonuses()
    row.refresh_from_db()
    assert row.status == BonusPayment.Status.SENT and "never sent again by itself" in row.last_error
    for _ in range(3):
        BonusPayment.objects.update(next_attempt_at=timezone.now() - timedelta(hours=2))
        report = bonuses.pay_bonuses()
        assert report.unconfirmed == 1
    assert prolific_crowd.count("pay_bonus") == 1 and side.paid_to(side.worker) == []
    assert not sent_bonuses.unconfirmed().exists()  # not yet long enough to ask a person
    BonusPayment.objects.update(sent_at=timezone.now() - timedelta(hours=3))
    bonuses.pay_bonuses()
    assert list(sent_bonuses.unconfirmed()) == [row]
    row.refresh_from_db()
    assert "Check the participant's submission on Prolific's site" in row.last_error

    with pytest.raises(Forbidden):
        sent_bonuses.settle_by_hand(row, researcher, paid=False)
    boss = django_user_model.objects.create_superuser("boss", "boss@example.org", "pw-boss-123456")
    settled = sent_bonuses.settle_by_hand(row, boss, paid=False, note="Not on Prolific's bonus page.")
    assert settled.status == BonusPayment.Status.FAILED and settled.platform_ref == ""
    assert settled.settled_by == boss and settled.settled_at and settled.settled_note
    bonuses.pay_bonuses()
    row.refresh_from_db()
    assert row.status == BonusPayment.Status.PAID and side.paid_to(side.worker) == [Decimal("0.25")]
    assert prolific_crowd.count("setup_bonus") == 2 and prolific_crowd.count("pay_bonus") == 2  # a new set-up


def test_a_settlement_as_paid_is_recorded(live_tasks, prolific_crowd, client, researcher, django_user_model):
    _, row = ready(live_tasks, prolific_crowd, client, researcher)
    prolific_crowd.inject("pay_bonus", "server_error")
    bonuses.pay_bonuses()
    boss = django_user_model.objects.create_superuser("boss", "boss@example.org", "pw-boss-123456")
    settled = sent_bonuses.settle_by_hand(row, boss, paid=True, note="Shown paid on Prolific's site.")
    assert settled.status == BonusPayment.Status.PAID and settled.settled_by == boss
    with pytest.raises(Exception, match="only a sent, unconfirmed bonus"):
        sent_bonuses.settle_by_hand(row, boss, paid=False)


def test_a_throttled_pay_call_was_refused_and_is_sent_later_once(live_tasks, prolific_crowd, client, researcher):
    side, row = ready(live_tasks, prolific_crowd, client, researcher)
    prolific_crowd.inject("pay_bonus", "throttle")
    report = bonuses.pay_bonuses()
    assert report.paid == 0 and "throttling" in report.errors[0]
    row.refresh_from_db()
    assert row.status == BonusPayment.Status.FAILED and row.platform_ref and row.sent_at is None
    BonusPayment.objects.update(next_attempt_at=timezone.now())
    assert bonuses.pay_bonuses().paid == 1
    assert prolific_crowd.count("setup_bonus") == 1 and prolific_crowd.count("pay_bonus") == 2
    assert side.paid_to(side.worker) == [Decimal("0.25")]


def test_a_crash_between_sent_and_the_call_never_sends(live_tasks, prolific_crowd, client, researcher,
                                                       monkeypatch):
    side, row = ready(live_tasks, prolific_crowd, client, researcher)

    def crash(bulk_id):
        raise RuntimeError("the worker process died here")

    monkeypatch.setattr(prolific, "pay_bonus", crash)
    with pytest.raises(RuntimeError):
        bonuses.pay_bonuses()
    monkeypatch.undo()
    row.refresh_from_db()
    assert row.status == BonusPayment.Status.SENT and row.sent_at
    for _ in range(3):
        BonusPayment.objects.update(next_attempt_at=timezone.now() - timedelta(hours=2))
        bonuses.pay_bonuses()
    assert prolific_crowd.count("pay_bonus") == 0 and side.paid_to(side.worker) == []
    assert BonusPayment.objects.get().status == BonusPayment.Status.SENT


def test_two_runs_at_once_send_once(live_tasks, prolific_crowd, client, researcher, monkeypatch):
    side, row = ready(live_tasks, prolific_crowd, client, researcher)
    real_pay, inner = prolific.pay_bonus, []

    def pay_while_another_run_starts(bulk_id):
        if not inner:
            inner.append(bonuses.pay_bonuses())  # a second run while the first one's call is out
        return real_pay(bulk_id)

    monkeypatch.setattr(prolific, "pay_bonus", pay_while_another_run_starts)
    assert bonuses.pay_bonuses().paid == 1
    assert inner[0].paid == 0
    assert prolific_crowd.count("pay_bonus") == 1 and side.paid_to(side.worker) == [Decimal("0.25")]


def test_a_lost_set_up_answer_costs_nothing(live_tasks, prolific_crowd, client, researcher):
    side, row = ready(live_tasks, prolific_crowd, client, researcher)
    prolific_crowd.inject("setup_bonus", "drop_after_commit")
    bonuses.pay_bonuses()
    row.refresh_from_db()
    assert row.status == BonusPayment.Status.FAILED and row.platform_ref == ""
    BonusPayment.objects.update(next_attempt_at=timezone.now())
    assert bonuses.pay_bonuses().paid == 1
    assert side.paid_to(side.worker) == [Decimal("0.25")]  # the orphaned set-up was never paid


def test_a_sent_bonus_counts_as_committed_money(live_tasks, prolific_crowd, client, researcher):
    _, row = ready(live_tasks, prolific_crowd, client, researcher)
    prolific_crowd.inject("pay_bonus", "server_error")
    bonuses.pay_bonuses()
    batch = Batch.objects.get()
    assert costs.committed(Batch.objects.filter(pk=batch.pk)) >= Decimal("0.33")
