"""Fair pay, measured: how long an assignment takes and what it pays per hour, from the
stored times of submitted assignments, and the floor a new batch is held to.

- **Time per assignment**: from the worker's arrival (``accepted_at``) to their
  submission (MTurk's SubmitTime, else when they pressed Submit here), over the
  assignments that were submitted (submitted, approved or rejected). Time spent
  reading the instructions or waiting for the model counts as work.
- **Effective hourly pay** of a batch: for each approved assignment with both times,
  its reward plus the bonuses paid for it (the ledger's paid rows; MTurk's fees are
  the requester's cost, not the worker's pay), over its time; the median of those.
  The release card quotes the same figure (``crowd.releases``).
- **Estimate for a new batch** (the publish form, and the floor's check): the median
  time per assignment of the task's earlier batches of the same kind of work (a small
  pilot batch is one), the newest ``ESTIMATE_SAMPLE`` submitted assignments at most,
  and the bonus an assignment earned there on average (verified fooling examples per
  assignment times the new batch's bonus per example). No earlier timed assignment: no
  estimate, and the form says so (publish a pilot first).
- **The floor**: ``DYNABENCH_MIN_HOURLY_PAY`` (USD per hour; 0 for none). The publish
  form warns when the estimate is below it and asks to confirm; with
  ``DYNABENCH_REFUSE_BELOW_MIN_PAY`` the service refuses the batch (``PayBelowFloor``,
  409 with the code ``pay_below_floor``), whoever publishes it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, ROUND_UP, Decimal

from django.conf import settings
from django.db.models import Avg, Q, Sum

from core.errors import Conflict

from .models import Assignment, Batch, BonusPayment

CENT = Decimal("0.01")
HOUR = Decimal(3600)
ESTIMATE_SAMPLE = 2000
SUBMITTED = (Assignment.Status.SUBMITTED, Assignment.Status.APPROVED, Assignment.Status.REJECTED)


def _seconds(accepted, submitted, finished) -> float | None:
    ended = submitted or finished
    if ended is None or accepted is None:
        return None
    seconds = (ended - accepted).total_seconds()
    return seconds if seconds > 0 else None


def hourly(pay: Decimal, seconds: float) -> Decimal:
    return (pay * HOUR / Decimal(str(seconds))).quantize(CENT, rounding=ROUND_HALF_UP)


@dataclass
class BatchPay:
    timed: int = 0  # submitted assignments with both times
    median_seconds: float | None = None
    paid_timed: int = 0  # approved assignments with both times
    median_hourly: Decimal | None = None

    @property
    def median_minutes(self) -> float | None:
        return None if self.median_seconds is None else self.median_seconds / 60


def pay_by_batch(batch_ids) -> dict[int, BatchPay]:
    """Each batch's time per assignment and effective hourly pay, for a page of batches:
    one query over their submitted assignments, with each one's paid bonuses summed."""
    rows = (Assignment.objects.filter(hit__batch_id__in=list(batch_ids), status__in=SUBMITTED)
            .values("status", "accepted_at", "submitted_at", "finished_at", "hit__batch_id", "hit__batch__reward")
            .annotate(bonus=Sum("bonuses__amount", filter=Q(bonuses__status=BonusPayment.Status.PAID))))
    times: dict[int, list[float]] = {}
    rates: dict[int, list[Decimal]] = {}
    for row in rows.iterator(chunk_size=2000):
        seconds = _seconds(row["accepted_at"], row["submitted_at"], row["finished_at"])
        if seconds is None:
            continue
        batch = row["hit__batch_id"]
        times.setdefault(batch, []).append(seconds)
        if row["status"] == Assignment.Status.APPROVED:
            rates.setdefault(batch, []).append(hourly(row["hit__batch__reward"] + (row["bonus"] or 0), seconds))
    found = {}
    for batch in batch_ids:
        spent, earned = times.get(batch, []), rates.get(batch, [])
        found[batch] = BatchPay(
            timed=len(spent), median_seconds=statistics.median(spent) if spent else None,
            paid_timed=len(earned), median_hourly=statistics.median(earned).quantize(CENT) if earned else None)
    return found


def batch_pay(batch: Batch) -> BatchPay:
    return pay_by_batch([batch.pk])[batch.pk]


@dataclass
class Estimate:
    task_slug: str
    mode: str
    samples: int  # timed submitted assignments of earlier batches it rests on
    median_seconds: float | None
    bonus_examples_per_assignment: float  # verified fooling examples paid per settled assignment
    floor: Decimal

    @property
    def median_minutes(self) -> float | None:
        return None if self.median_seconds is None else self.median_seconds / 60

    def hourly_for(self, reward: Decimal, bonus_per_example: Decimal = Decimal("0")) -> Decimal | None:
        """The effective hourly pay a batch paying ``reward`` (and ``bonus_per_example``)
        is expected to give; None without earlier timings."""
        if not self.median_seconds:
            return None
        bonus = Decimal(str(self.bonus_examples_per_assignment)) * bonus_per_example
        return hourly(reward + bonus, self.median_seconds)

    def reward_for_floor(self, bonus_per_example: Decimal = Decimal("0")) -> Decimal | None:
        """The least reward that reaches the floor at the median time."""
        if not self.median_seconds or not self.floor:
            return None
        bonus = Decimal(str(self.bonus_examples_per_assignment)) * bonus_per_example
        needed = self.floor * Decimal(str(self.median_seconds)) / HOUR - bonus
        return max(needed, Decimal("0.01")).quantize(CENT, rounding=ROUND_UP)

    def below_floor(self, reward: Decimal, bonus_per_example: Decimal = Decimal("0")) -> bool:
        rate = self.hourly_for(reward, bonus_per_example)
        return bool(self.floor) and rate is not None and rate < self.floor


def floor() -> Decimal:
    return Decimal(settings.DYNABENCH_MIN_HOURLY_PAY or 0)


def estimate(task, mode: str) -> Estimate:
    """What the task's earlier batches of ``mode`` say of a new one (module note):
    the newest ``ESTIMATE_SAMPLE`` submitted assignments, by their arrival (an index walk)."""
    earlier = Assignment.objects.filter(hit__batch__task=task, hit__batch__mode=mode, status__in=SUBMITTED)
    rows = list(earlier.order_by("-accepted_at", "-id")
                .values_list("id", "accepted_at", "submitted_at", "finished_at")[:ESTIMATE_SAMPLE])
    times = [s for s in (_seconds(a, b, c) for _, a, b, c in rows) if s is not None]
    examples = 0.0
    if mode == Batch.Mode.CREATE and rows:
        examples = float(BonusPayment.objects.filter(assignment_id__in=[r[0] for r in rows],
                                                     reason=BonusPayment.Reason.VERIFIED_FOOLING)
                         .aggregate(n=Avg("example_count"))["n"] or 0.0)
    return Estimate(task.slug, mode, len(times), statistics.median(times) if times else None, examples, floor())


class PayBelowFloor(Conflict):
    code = "pay_below_floor"


def check_floor(task, mode: str, reward: Decimal, bonus_per_example: Decimal) -> Estimate:
    """The estimate for a new batch; ``PayBelowFloor`` when it is below the floor and
    ``DYNABENCH_REFUSE_BELOW_MIN_PAY`` is on."""
    found = estimate(task, mode)
    if settings.DYNABENCH_REFUSE_BELOW_MIN_PAY and found.below_floor(reward, bonus_per_example):
        rate = found.hourly_for(reward, bonus_per_example)
        raise PayBelowFloor(
            f"This batch would pay about ${rate}/hour (its earlier batches took a median "
            f"{found.median_minutes:.1f} minutes per assignment, over {found.samples}), below the floor of "
            f"${found.floor}/hour (DYNABENCH_MIN_HOURLY_PAY); publishing below it is refused "
            f"(DYNABENCH_REFUSE_BELOW_MIN_PAY). A reward of ${found.reward_for_floor(bonus_per_example)} reaches it.")
    return found
