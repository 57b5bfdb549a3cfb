"""What a data release's card says about the crowd: how the task's MTurk workers were
recruited and what they were paid, from this app's own records.

The release code lives in the leaderboard app, below this one (crowd > leaderboard),
so it cannot read these tables itself; ``CrowdConfig.ready`` registers
``recruitment_section`` as a card section (``leaderboard.releases.contributions``).
Nothing is said for rounds with no batch: the card then says that no crowd-work
record exists.

Pay per hour, per approved assignment: its reward plus the bonuses paid for it
(MTurk's fees are the requester's cost, not the worker's pay), over the time from the
worker's arrival to their submission (MTurk's SubmitTime, else when they pressed
Submit here). The card gives the median over the assignments with both times, and
says how many those are. Sandbox batches pay no real money: their figures are given
only where there is no live batch, and say so.
"""

from __future__ import annotations

import statistics
from decimal import Decimal

from django.db.models import Q, Sum

from leaderboard.releases.contributions import CardSection

from .models import Assignment, Batch, BonusPayment

CENT = Decimal("0.01")


def _money(value: Decimal) -> str:
    return f"${value.quantize(CENT)}"


def _range(values) -> str:
    values = sorted(set(values))
    if not values:
        return "–"
    return _money(values[0]) if len(values) == 1 else f"{_money(values[0])} to {_money(values[-1])}"


def pay_per_hour(batches) -> tuple[list[Decimal], int, int]:
    """(pay per hour of each approved assignment with both times, approved assignments,
    distinct workers among them) for ``batches``; one query over the approved
    assignments, with their paid bonuses summed in it."""
    rows = (Assignment.objects.filter(hit__batch__in=batches, status=Assignment.Status.APPROVED)
            .values("worker_id", "accepted_at", "submitted_at", "finished_at", "hit__batch__reward")
            .annotate(bonus=Sum("bonuses__amount", filter=Q(bonuses__status=BonusPayment.Status.PAID))))
    rates, approved, workers = [], 0, set()
    for row in rows.iterator(chunk_size=2000):
        approved += 1
        workers.add(row["worker_id"])
        ended = row["submitted_at"] or row["finished_at"]
        if ended is None or row["accepted_at"] is None:
            continue
        seconds = (ended - row["accepted_at"]).total_seconds()
        if seconds <= 0:
            continue
        pay = row["hit__batch__reward"] + (row["bonus"] or Decimal("0"))
        rates.append(pay * Decimal(3600) / Decimal(str(seconds)))
    return rates, approved, len(workers)


def recruitment_section(task, rounds) -> CardSection | None:
    batches = Batch.objects.filter(task=task, round__in=list(rounds)).exclude(status=Batch.Status.CANCELLED)
    chosen = list(batches.only("mode", "sandbox", "reward", "bonus_per_example", "locales", "min_approval_rate",
                               "min_approved_count", "round__number").select_related("round"))
    if not chosen:
        return None
    live = [b for b in chosen if not b.sandbox]
    counted = live or chosen
    sandbox = not live
    writing = [b for b in counted if b.mode == Batch.Mode.CREATE]
    validating = [b for b in counted if b.mode == Batch.Mode.VALIDATE]
    rounds_text = ", ".join(str(n) for n in sorted({b.round.number for b in counted}))
    where = "the MTurk sandbox (test batches: no real money was paid)" if sandbox else "Amazon Mechanical Turk"
    paragraphs = [
        f"Crowd workers were recruited on {where} for round(s) {rounds_text}: {len(writing)} batch(es) of HITs "
        f"to write examples and {len(validating)} to validate them. Each worker also has an account here; "
        "their MTurk worker id is not in the release."]
    requirements = []
    locales = sorted({code for b in counted for code in (b.locales or [])})
    if locales:
        requirements.append(f"located in {', '.join(locales)}")
    rates_required = sorted({b.min_approval_rate for b in counted if b.min_approval_rate is not None})
    if rates_required:
        requirements.append(f"at least {'/'.join(map(str, rates_required))}% of their past MTurk work approved")
    counts_required = sorted({b.min_approved_count for b in counted if b.min_approved_count is not None})
    if counts_required:
        requirements.append(f"at least {'/'.join(map(str, counts_required))} approved HITs")
    if requirements:
        paragraphs.append("Workers had to be " + "; ".join(requirements) + ".")
    pay = f"A reward of {_range(b.reward for b in counted)} per approved assignment"
    bonuses = [b.bonus_per_example for b in writing if b.bonus_per_example > 0]
    if bonuses:
        pay += (f", and to writers a bonus of {_range(bonuses)} for each of their examples that fooled the model "
                "and was then verified")
    paragraphs.append(pay + ".")
    rates, approved, workers = pay_per_hour([b.pk for b in counted])
    median = statistics.median(rates) if rates else None
    if median is not None:
        paragraphs.append(
            f"**Median pay: {_money(median)} per hour**{' (sandbox)' if sandbox else ''}, over {len(rates)} of "
            f"{approved} approved assignment(s) by {workers} worker(s): the reward plus the bonuses paid, over "
            "the time from accepting the HIT to submitting it (time spent reading or waiting counts as work).")
    else:
        paragraphs.append(f"{approved} approved assignment(s): none with both an accept and a submit time, so no "
                          "pay per hour can be given.")
    return CardSection(
        key="recruitment", heading="Recruitment and pay", paragraphs=paragraphs,
        facts={"sandbox": sandbox, "batches": len(counted), "approved_assignments": approved, "workers": workers,
               "timed_assignments": len(rates),
               "median_pay_per_hour": None if median is None else str(median.quantize(CENT))})
