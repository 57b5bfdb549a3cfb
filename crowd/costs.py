"""What crowd work costs: the platforms' fees, a batch's most it could cost, what it may
still cost (committed), and what was spent, per batch, task and worker, down to
the cost of one verified model-fooling example (what researchers budget by).

MTurk's fees (requester pricing): 20% of each reward and bonus, 40% of the
reward on HITs with 10 or more assignments, and at least $0.01 per assignment
or bonus. Prolific's: ``PROLIFIC_FEE_RATE`` of each reward and bonus, an estimate
until a bonus's set-up answers its real ``fees`` (kept on the ledger row, and
counted from then on). Amounts are in the batch's currency.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, DecimalField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce

from annotation.models import Example, Validation
from annotation.reliability import validation_forecast

from .models import Assignment, Batch, BonusPayment
from .money import CENT, cents

FEE = Decimal("0.20")
FEE_MANY_ASSIGNMENTS = Decimal("0.40")
MANY_ASSIGNMENTS = 10




def reward_fee(reward: Decimal, assignments_per_hit: int, platform: str = "mturk") -> Decimal:
    if platform == "prolific":
        return cents(reward * Decimal(settings.PROLIFIC_FEE_RATE))
    rate = FEE_MANY_ASSIGNMENTS if assignments_per_hit >= MANY_ASSIGNMENTS else FEE
    return max(CENT, cents(reward * rate))


def bonus_fee(amount: Decimal, platform: str = "mturk") -> Decimal:
    """The platform's fee on a bonus: MTurk's rule, or for Prolific the estimate
    ``PROLIFIC_FEE_RATE`` (a set-up bonus's own ``fees`` replace it: ``paid_bonus_fee``)."""
    if amount <= 0:
        return Decimal("0.00")
    if platform == "prolific":
        return cents(amount * Decimal(settings.PROLIFIC_FEE_RATE))
    return max(CENT, cents(amount * FEE))


def paid_bonus_fee(amount: Decimal, platform: str, fees: Decimal | None) -> Decimal:
    """A ledger row's fee: what Prolific's set-up answered when it did, else the rule."""
    return fees if fees is not None else bonus_fee(amount, platform)


def max_cost(*, hits: int, assignments_per_hit: int, reward: Decimal, bonus_per_example: Decimal,
             examples_per_assignment: int, mode: str, platform: str = "mturk") -> Decimal:
    """The most a batch can cost: every assignment approved and, for writing, every
    required example a verified model-fooling one (more examples are not paid)."""
    per_assignment = reward + reward_fee(reward, assignments_per_hit, platform)
    if mode == Batch.Mode.CREATE and bonus_per_example > 0:
        bonus = bonus_per_example * examples_per_assignment
        per_assignment += bonus + bonus_fee(bonus, platform)
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
                .values("hit__batch", "hit__batch__reward", "hit__batch__assignments_per_hit", "hit__batch__platform")
                .annotate(n=Count("id")))
    for row in approved:
        entry, reward, n = result[row["hit__batch"]], row["hit__batch__reward"], row["n"]
        entry.rewards += reward * n
        entry.fees += reward_fee(reward, row["hit__batch__assignments_per_hit"], row["hit__batch__platform"]) * n
        entry.approved_assignments += n
    paid = BonusPayment.objects.filter(assignment__hit__batch__in=batches, status=BonusPayment.Status.PAID,
                                       amount__gt=0).values_list("assignment__hit__batch", "amount",
                                                                 "assignment__hit__batch__platform", "fees")
    for batch_id, amount, platform, fees in paid:
        result[batch_id].bonuses += amount
        result[batch_id].fees += paid_bonus_fee(amount, platform, fees)
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


# Batches that may still cost money: a cancelled one never will.
MAY_COST = [Batch.Status.AWAITING_APPROVAL, Batch.Status.PUBLISHING, Batch.Status.PUBLISHED,
            Batch.Status.FINISHED]
# Batches whose HITs take (or will take) workers: every slot not yet decided may still be paid.
TAKING_WORK = [Batch.Status.AWAITING_APPROVAL, Batch.Status.PUBLISHING, Batch.Status.PUBLISHED]
OPEN_WORK = [Assignment.Status.WORKING, Assignment.Status.FINISHED, Assignment.Status.SUBMITTED]


def _most_bonus(batch: Batch) -> Decimal:
    """The most one approved assignment's bonus may come to, with its fee."""
    if batch.mode != Batch.Mode.CREATE or batch.bonus_per_example <= 0:
        return Decimal("0.00")
    bonus = batch.bonus_per_example * batch.examples_per_assignment
    return bonus + bonus_fee(bonus, batch.platform)


def committed_by_batch(batches) -> dict[int, Decimal]:
    """The most each of ``batches`` (a queryset) may still cost, by batch id, in three
    queries: money promised but not yet paid, the part of ``max_cost`` not yet spent
    nor released.

    - an undecided slot (every assignment not yet approved or rejected, taken or not,
      while the batch takes workers; after it finished, only work already taken)
      may still cost its reward, its most bonus and their fees;
    - an approved assignment not yet settled may still cost its most bonus;
    - a settled bonus not yet paid (pending, failed, or given up: a person may still
      pay it by hand) costs its amount and fee.
    Rejected slots and paid money are released (paid money counts as spent)."""
    chosen = list(batches.filter(status__in=MAY_COST).only(
        "id", "status", "mode", "hits", "assignments_per_hit", "reward", "bonus_per_example",
        "examples_per_assignment", "platform"))
    if not chosen:
        return {}
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    for batch_id, status, n in (Assignment.objects.filter(hit__batch__in=chosen).values_list("hit__batch", "status")
                                .annotate(n=Count("id")).order_by()):
        counts[batch_id][status] = n
    settled: dict[int, int] = defaultdict(int)
    unpaid: dict[int, Decimal] = defaultdict(Decimal)
    platforms = {batch.pk: batch.platform for batch in chosen}
    for batch_id, status, amount, fees in BonusPayment.objects.filter(assignment__hit__batch__in=chosen).values_list(
            "assignment__hit__batch", "status", "amount", "fees"):
        settled[batch_id] += 1
        if status != BonusPayment.Status.PAID and amount > 0:  # a sent, unconfirmed one among them
            unpaid[batch_id] += amount + paid_bonus_fee(amount, platforms[batch_id], fees)
    result = {}
    for batch in chosen:
        seen = counts[batch.pk]
        approved = seen.get(Assignment.Status.APPROVED, 0)
        decided = approved + seen.get(Assignment.Status.REJECTED, 0)
        if batch.status in TAKING_WORK:
            slots = max(0, batch.hits * batch.assignments_per_hit - decided)
        else:
            slots = sum(seen.get(status, 0) for status in OPEN_WORK)
        most_bonus = _most_bonus(batch)
        per_slot = batch.reward + reward_fee(batch.reward, batch.assignments_per_hit, batch.platform) + most_bonus
        result[batch.pk] = cents(slots * per_slot + max(0, approved - settled[batch.pk]) * most_bonus
                                 + unpaid[batch.pk])
    return result


def committed(batches) -> Decimal:
    """The most ``batches`` (a queryset) may still cost, all together."""
    return sum(committed_by_batch(batches).values(), Decimal("0.00"))


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


@dataclass
class Forecast:
    """What one verified model-fooling example of a task is expected to cost, from its
    history (``validation_forecast``) and its past batches on the same MTurk site."""

    task: object
    validation: dict
    examples_per_verified_fooling: float | None
    validations_per_verified_fooling: float | None
    writing_cost: Decimal | None  # per verified fooling example, from past writing batches
    validation_cost: Decimal | None  # per verified fooling example, from past validation batches
    validations_paid: int

    @property
    def total(self) -> Decimal | None:
        if self.writing_cost is None or self.validation_cost is None:
            return None
        return self.writing_cost + self.validation_cost


def forecast(task, sandbox: bool) -> Forecast:
    """Per verified model-fooling example: how many examples are written and validated
    for one (every written example is validated, fooling ones first), and what the
    task's past batches say each costs. Writing's cost is what its writing batches
    paid (rewards, bonuses, fees) over the verified fooling examples they bought; a
    validation's is what its validation batches paid over the decisions made in them."""
    validation = validation_forecast(task)
    fooled, verified = validation["fooled_share"], validation["verified_share_of_fooling"]
    examples = 1 / (fooled * verified) if fooled and verified else None
    per_example = validation["validations_per_example"]
    validations = examples * per_example if examples is not None and per_example is not None else None
    batches = Batch.objects.filter(task=task, sandbox=sandbox, status__in=MAY_COST)
    writing = spend(batches.filter(mode=Batch.Mode.CREATE))
    checking_batches = batches.filter(mode=Batch.Mode.VALIDATE)
    checking = spend(checking_batches)
    paid_decisions = (Validation.objects.filter(session__mturk_assignment__hit__batch__in=checking_batches,
                                                session__mturk_assignment__status=Assignment.Status.APPROVED)
                      .exclude(label="").count())
    validation_cost = None
    if validations is not None and paid_decisions:
        validation_cost = cents(checking.total / paid_decisions * Decimal(str(validations)))
    return Forecast(task=task, validation=validation, examples_per_verified_fooling=examples,
                    validations_per_verified_fooling=validations, writing_cost=writing.per_verified_fooling,
                    validation_cost=validation_cost, validations_paid=paid_decisions)
