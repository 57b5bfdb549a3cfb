"""What crowd work costs: MTurk's fees, a batch's most it could cost, and what was
spent, per batch, task and worker, down to the cost of one verified
model-fooling example (what researchers budget by).

MTurk's fees (requester pricing): 20% of each reward and bonus, 40% of the
reward on HITs with 10 or more assignments, and at least $0.01 per assignment
or bonus.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Count, DecimalField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from annotation.models import Example

from .models import Assignment, Batch, BonusPayment

CENT = Decimal("0.01")
FEE = Decimal("0.20")
FEE_MANY_ASSIGNMENTS = Decimal("0.40")
MANY_ASSIGNMENTS = 10


def cents(value: Decimal) -> Decimal:
    return Decimal(value).quantize(CENT, rounding=ROUND_HALF_UP)


def reward_fee(reward: Decimal, assignments_per_hit: int) -> Decimal:
    rate = FEE_MANY_ASSIGNMENTS if assignments_per_hit >= MANY_ASSIGNMENTS else FEE
    return max(CENT, cents(reward * rate))


def bonus_fee(amount: Decimal) -> Decimal:
    return max(CENT, cents(amount * FEE)) if amount > 0 else Decimal("0.00")


def max_cost(*, hits: int, assignments_per_hit: int, reward: Decimal, bonus_per_example: Decimal,
             examples_per_assignment: int, mode: str) -> Decimal:
    """The most a batch can cost: every assignment approved and, for writing, every
    required example a verified model-fooling one (more examples are not paid)."""
    per_assignment = reward + reward_fee(reward, assignments_per_hit)
    if mode == Batch.Mode.CREATE and bonus_per_example > 0:
        bonus = bonus_per_example * examples_per_assignment
        per_assignment += bonus + bonus_fee(bonus)
    return cents(per_assignment * hits * assignments_per_hit)


@dataclass
class Spend:
    rewards: Decimal = Decimal("0.00")
    bonuses: Decimal = Decimal("0.00")
    fees: Decimal = Decimal("0.00")
    approved_assignments: int = 0
    verified_fooling: int = 0

    @property
    def total(self) -> Decimal:
        return self.rewards + self.bonuses + self.fees

    @property
    def per_verified_fooling(self) -> Decimal | None:
        """Everything paid, divided by the verified model-fooling examples it bought."""
        return cents(self.total / self.verified_fooling) if self.verified_fooling else None


def spend_by_batch(batches) -> dict[int, Spend]:
    """What each of ``batches`` (a queryset) has cost so far, by batch id, in three
    queries: approved rewards, bonuses paid, MTurk's fees on both, and the verified
    model-fooling examples bought."""
    result: dict[int, Spend] = defaultdict(Spend)
    approved = (Assignment.objects.filter(hit__batch__in=batches, status=Assignment.Status.APPROVED)
                .values("hit__batch", "hit__batch__reward", "hit__batch__assignments_per_hit")
                .annotate(n=Count("id")))
    for row in approved:
        entry, reward, n = result[row["hit__batch"]], row["hit__batch__reward"], row["n"]
        entry.rewards += reward * n
        entry.fees += reward_fee(reward, row["hit__batch__assignments_per_hit"]) * n
        entry.approved_assignments += n
    paid = BonusPayment.objects.filter(assignment__hit__batch__in=batches, status=BonusPayment.Status.PAID,
                                       amount__gt=0).values_list("assignment__hit__batch", "amount")
    for batch_id, amount in paid:
        result[batch_id].bonuses += amount
        result[batch_id].fees += bonus_fee(amount)
    # Bought: from approved, MTurk-verified assignments only (a made-up worker id buys nothing).
    fooling = (Example.objects.filter(session__mturk_assignment__hit__batch__in=batches,
                                      session__mturk_assignment__status=Assignment.Status.APPROVED,
                                      session__mturk_assignment__verified_at__isnull=False,
                                      fooled=True, retracted=False, flagged=False,
                                      validation_status=Example.ValidationStatus.VERIFIED)
               .values("session__mturk_assignment__hit__batch").annotate(n=Count("id")))
    for row in fooling:
        result[row["session__mturk_assignment__hit__batch"]].verified_fooling += row["n"]
    return dict(result)


def spend(batches) -> Spend:
    """What ``batches`` (a queryset) have cost so far, all together."""
    total = Spend()
    for entry in spend_by_batch(batches).values():
        total.rewards += entry.rewards
        total.bonuses += entry.bonuses
        total.fees += entry.fees
        total.approved_assignments += entry.approved_assignments
        total.verified_fooling += entry.verified_fooling
    return total


def batch_spend(batch: Batch) -> Spend:
    return spend(Batch.objects.filter(pk=batch.pk))


def with_earnings(identities):
    """``identities`` annotated with ``earned_rewards`` and ``earned_bonuses`` (USD paid to them)."""
    rewards = (Assignment.objects.filter(worker=OuterRef("pk"), status=Assignment.Status.APPROVED)
               .order_by().values("worker").annotate(total=Sum("hit__batch__reward")).values("total")[:1])
    bonuses = (BonusPayment.objects.filter(assignment__worker=OuterRef("pk"), status=BonusPayment.Status.PAID)
               .order_by().values("assignment__worker").annotate(total=Sum("amount")).values("total")[:1])
    money = DecimalField(max_digits=12, decimal_places=2)
    return identities.annotate(
        earned_rewards=Coalesce(Subquery(rewards, output_field=money), Value(Decimal("0.00")), output_field=money),
        earned_bonuses=Coalesce(Subquery(bonuses, output_field=money), Value(Decimal("0.00")), output_field=money))


def bonus_totals(queryset) -> dict:
    """Paid, pending and failed sums of a queryset of ledger rows."""
    return queryset.aggregate(
        paid=Sum("amount", filter=Q(status=BonusPayment.Status.PAID), default=Decimal("0.00")),
        pending=Sum("amount", filter=Q(status=BonusPayment.Status.PENDING), default=Decimal("0.00")),
        failed=Sum("amount", filter=Q(status=BonusPayment.Status.FAILED), default=Decimal("0.00")),
        rows=Count("id"),
    )
