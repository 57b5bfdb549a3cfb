# Long on purpose: the whole life of a bonus (what is paid, when, held for a researcher, how, reminded) in one
# module, so that its money rules are read together.
"""Bonuses for verified model-fooling examples, paid exactly once.

``pay_bonuses`` (Celery beat, ``manage.py mturk_pay_bonuses`` and the admin) is
safe to run at any time and any number of times.

What is paid: for each approved, MTurk-verified assignment of a writing batch,
the examples written in it that fooled the model, were not retracted or
flagged, whose signature still checks, and whose validation is final and
*verified*, at the batch's amount per example, for at most the number of
examples the HIT asked for (the earliest ones; the budget counted no more). An assignment is settled once,
when all of its model-fooling examples are decided or, at the latest, at its
auto-approval time (MTurk's deadline for the assignment, by which a worker
should know what they earned); examples verified after that are not paid.

**A flag or an escalation holds the bonus for a researcher, past any deadline**
(``held``). The assignment's base pay follows the platform's deadline as ever (the
sync approves confirmed work at once; nothing here waits on it), but while one of
its model-fooling examples is escalated, or flagged (by its author, a researcher,
or anyone acting as the worker), or was flagged and cleared by a researcher without
being decided since, its bonus is not settled at all: the deadline that settles
undecided examples at $0 does not apply to them. A researcher's decision ends the
hold: deciding the example (correct pays it, incorrect or flagged does not; a
researcher's counted decision is final, so a flag placed after it holds nothing),
or clearing the flag of an example the validators had decided (their decision
stands). The next run then settles the assignment once, as any other. The run
marks each held assignment (``Assignment.bonus_held_since``: the admin's list
"bonus held for a researcher"), and reminds each task's researchers and the site's
admins by e-mail of what waits on them, at most once per
``BONUS_DECISION_REMINDER_HOURS`` (``remind_researchers``).

How it is paid (the ledger first):
1. A ``BonusPayment`` row, unique per (assignment, reason), is written with a
   deterministic UniqueRequestToken before MTurk is called. A second run, a
   second worker process or a crash can never make a second row.
2. ``SendBonus`` goes out with that token. boto3 retries a lost response with the
   same token, and MTurk pays a token once.
3. When a call fails or its answer is lost, the row stays pending; before any
   retry, ``ListBonusPayments`` is asked whether MTurk paid it after all (the
   bonus's reason names the ledger row). Only if it did not is it sent again.
   An answer that looks like "already processed" is no proof either: the row is
   marked paid only if ``ListBonusPayments`` lists the payment.
   A run holds a row for ``lease()``, longer than its two calls with every retry
   can take; each of its writes checks that the row is still its own (the attempt
   it claimed), so a run that outlived its lease changes nothing.
4. Throttling, MTurk faults and too little money leave the row failed with a
   readable error and a later retry time (backoff), never a loop. A row MTurk
   refuses with a request error ``BONUS_MAX_ATTEMPTS`` times ends as ``gave_up``,
   with the reason, and the site's admins get an e-mail: a person must look.
5. Every settlement keeps a note of how its amount was reached: a $0 row says
   which examples did not count and why.

On Prolific, whose pay call is not idempotent, step 2-3 differ: the row's bonus is
set up, marked *sent* before the one pay call, and a sent row is never sent again by
a run; it is reconciled from Prolific's records or settled by a person
(``crowd.sent_bonuses``).

What a run reads (``crowd.watermarks``): only the assignments that can have
changed since the last run: approved since, with a model-fooling example
stamped since (decided, flagged, retracted), or whose deadline
(``Assignment.bonus_settle_by``, noted when a run first finds one waiting) passed
since. A settled assignment never comes back. The first run, and
``pay_bonuses(full=True)`` (``mturk_pay_bonuses --full``), walk every assignment
still to settle; both settle the same assignments, at the same runs, with the
same rules (``settle``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.mail import mail_admins, send_mail
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from annotation.examples import signature_ok
from annotation.models import Example, Validation

from . import sent_bonuses, watermarks
from .models import Assignment, Batch, BonusPayment, Watermark
from .money import money, usd
from .platforms import PLATFORMS, PlatformError, for_batch

logger = logging.getLogger(__name__)

MAX_BACKOFF = timedelta(hours=1)
# MTurk keeps a UniqueRequestToken for 24 hours: a token it calls a duplicate but has
# not paid can be sent again only after that.
TOKEN_LIFETIME = timedelta(hours=24)


def lease() -> timedelta:
    """How long one run holds a ledger row: its ListBonusPayments and its SendBonus,
    each with every retry boto3 may make, and a margin."""
    return timedelta(seconds=2 * max(p.longest_call_seconds() for p in PLATFORMS.values()) + 60)


@dataclass
class BonusReport:
    settled: int = 0
    paid: int = 0
    amounts: dict = field(default_factory=dict)  # currency -> paid by this run (never summed across currencies)
    waiting: int = 0
    held: int = 0  # of the waiting: held for a researcher's decision (a flag or an escalation)
    reminded: int = 0  # researchers' reminder e-mails this run sent
    reconciled: int = 0  # sent rows (Prolific) found paid on the platform
    unconfirmed: int = 0  # sent rows the platform does not show paid (yet)
    errors: list[str] = field(default_factory=list)

    def add_paid(self, amount: Decimal, currency: str) -> None:
        self.paid += 1
        self.amounts[currency] = self.amounts.get(currency, Decimal("0.00")) + amount

    @property
    def amount(self) -> Decimal:
        """What this run paid, in its one currency (0 when nothing was paid); a run that paid
        in several currencies has no one amount: read ``amounts``."""
        if len(self.amounts) > 1:
            raise ValueError(f"paid in several currencies ({', '.join(sorted(self.amounts))}): read amounts")
        return next(iter(self.amounts.values()), Decimal("0.00"))

    def __str__(self):
        paid = ", ".join(money(value, currency) for currency, value in sorted(self.amounts.items())) or money(0)
        text = (f"{self.settled} assignments settled, {self.paid} bonuses paid ({paid}), "
                f"{self.waiting} waiting for validation")
        if self.held:
            text += f" ({self.held} held for a researcher's decision on a flagged or escalated example)"
        if self.reconciled or self.unconfirmed:
            text += (f", {self.reconciled} sent bonuses found paid, {self.unconfirmed} sent and not yet "
                     "confirmed (never sent again by themselves)")
        return text + (f"; {len(self.errors)} errors: " + "; ".join(self.errors) if self.errors else "")


def ledger_token(assignment: Assignment, reason: str) -> str:
    """Unique across databases too (the batch's uid): two installations on one
    requester account never mistake each other's bonuses for their own."""
    return f"dynabench-{assignment.hit.batch.uid.hex}-{assignment.pk}-{reason[:8]}"[:64]


def fooling_examples(assignment: Assignment):
    return Example.objects.filter(session_id=assignment.session_id, fooled=True,
                                  retracted=False, source=Example.Source.ANNOTATION)


def deadline(assignment: Assignment, now=None):
    """When the assignment is settled at the latest, whatever is still undecided: its
    auto-approval time, else its submission plus the batch's auto-approval delay. With
    no time known, ``now`` stands for the submission (None when ``now`` is None: no
    fixed deadline)."""
    submitted = assignment.submitted_at or assignment.finished_at or now
    if assignment.auto_approval_at is None and submitted is None:
        return None
    return assignment.auto_approval_at or (
        submitted + timedelta(seconds=assignment.hit.batch.auto_approval_delay_seconds))


def researcher_decided(examples) -> set[int]:
    """The ids among ``examples`` that a researcher's counted decision decided (final:
    a flag placed after it holds nothing)."""
    return set(Validation.objects.filter(example_id__in=[e.pk for e in examples], mode=Validation.Mode.OWNER,
                                         counted=True).exclude(label="").values_list("example_id", flat=True))


def _was_flagged(example: Example) -> bool:
    metadata = example.metadata if isinstance(example.metadata, dict) else {}
    return example.flagged or example.flagged_by_id is not None or "unflagged" in metadata


def holds(example: Example, decided: set[int]) -> bool:
    """Whether ``example`` holds its assignment's bonus for a researcher's decision:
    escalated, or flagged, or flagged once and cleared while still undecided, and no
    researcher's counted decision on it."""
    if example.pk in decided:
        return False
    status = example.validation_status
    return (status == Example.ValidationStatus.ESCALATED or example.flagged
            or (status == Example.ValidationStatus.PENDING and _was_flagged(example)))


def held(assignment: Assignment) -> list[Example]:
    """The assignment's model-fooling examples that hold its bonus for a researcher."""
    examples = list(fooling_examples(assignment).order_by("pk"))
    decided = researcher_decided(examples)
    return [e for e in examples if holds(e, decided)]


def settle(assignment: Assignment, now=None) -> BonusPayment | None:
    """The assignment's ledger row, written once it can be settled; None while it waits
    (for its validators until the deadline, for a researcher past it: ``holds``)."""
    now = now or timezone.now()
    batch = assignment.hit.batch
    examples = list(fooling_examples(assignment))
    decided = researcher_decided(examples)
    if any(holds(e, decided) for e in examples):
        return None  # a researcher's decision is due: no deadline settles it at $0
    # What is left undecided was never flagged nor escalated: the deadline settles it.
    pending = [e for e in examples if e.validation_status == Example.ValidationStatus.PENDING]
    cutoff = deadline(assignment, now)
    if pending and now < cutoff:
        return None
    # A flag still on a verified example here was answered by a researcher's decision.
    verified = [e for e in examples if e.validation_status == Example.ValidationStatus.VERIFIED]
    paid = [e for e in verified if signature_ok(e)]
    # At most the examples the HIT asked for (the earliest), as the batch's budget counted.
    capped = sorted(paid, key=lambda e: (e.created_at, e.pk))
    paid = capped[:batch.examples_per_assignment]
    not_counted = {
        "rejected": sum(e.validation_status == Example.ValidationStatus.REJECTED for e in examples),
        "flagged": sum(e.validation_status == Example.ValidationStatus.FLAGGED for e in examples),
        "undecided at the deadline": len(pending),
        "with a signature that no longer checks": len(verified) - len(capped),
        "over the examples the HIT asked for": len(capped) - len(paid),
    }
    note = (f"{len(paid)} of {len(examples)} model-fooling example{'s' if len(examples) != 1 else ''} counted"
            + "".join(f"; {n} {why}" for why, n in not_counted.items() if n))
    reason = BonusPayment.Reason.VERIFIED_FOOLING
    amount = batch.bonus_per_example * len(paid)
    token = ledger_token(assignment, reason)
    message = (f"Bonus for {len(paid)} example{'s' if len(paid) != 1 else ''} that fooled the model and were "
               f"confirmed correct by other workers ({money(batch.bonus_per_example, batch.currency)} each). "
               f"Thank you! [{token}]")
    try:
        with transaction.atomic():
            return BonusPayment.objects.create(
                assignment=assignment, reason=reason, amount=amount, example_count=len(paid),
                example_ids=[e.pk for e in paid], message=message[:1024], unique_request_token=token, note=note[:500],
                # Nothing owed: settled without a call to MTurk.
                status=BonusPayment.Status.PAID if amount == 0 else BonusPayment.Status.PENDING,
                paid_at=now if amount == 0 else None)
    except IntegrityError:  # settled by another run meanwhile
        return BonusPayment.objects.get(assignment=assignment, reason=reason)


def _already_paid(payment: BonusPayment) -> bool:
    """Whether MTurk has this ledger row's bonus on record (its reason names the row)."""
    return bool(for_batch(payment.assignment.hit.batch).bonus_on_record(payment))


def send(payment: BonusPayment) -> bool:
    """Pay one due ledger row; True when this run got it paid, False when it is not
    this run's to pay (paid already, or another run holds it, or its retry is not
    due): a run's report counts only its own payments. An ``MTurkError`` leaves it to
    a later run. Call it outside any transaction: its lease must be committed before
    MTurk is called."""
    with transaction.atomic():
        payment = BonusPayment.objects.select_for_update().select_related(
            "assignment__worker", "assignment__hit__batch").get(pk=payment.pk)
        if payment.status in (BonusPayment.Status.PAID, BonusPayment.Status.SENT, BonusPayment.Status.GAVE_UP):
            return False  # another run paid it (or sent it) since this run listed it as due
        now = timezone.now()
        if payment.next_attempt_at > now:
            return False  # another run holds it (or its retry is not due)
        payment.attempts += 1
        # Until MTurk answers, a crash leaves the row pending, to be reconciled
        # (attempts > 1) once the lease is over; a concurrent run skips it meanwhile.
        payment.status = BonusPayment.Status.PENDING
        payment.next_attempt_at = now + lease()
        payment.save(update_fields=["attempts", "status", "next_attempt_at"])
    platform = for_batch(payment.assignment.hit.batch)
    if not platform.idempotent_pay:  # Prolific: set up, marked sent, paid once (crowd.sent_bonuses)
        return sent_bonuses.send_once(payment, platform)
    try:
        if payment.attempts > 1 and _already_paid(payment):
            return _paid(payment, "found on MTurk after an unanswered attempt")
        platform.send_bonus(payment)
        return _paid(payment)
    except PlatformError as exc:
        if exc.kind == "duplicate":  # proof only if MTurk lists the payment
            if _already_paid(payment):
                return _paid(payment, "MTurk had processed this token already, and lists the payment")
            _mine(payment).update(
                status=BonusPayment.Status.FAILED, next_attempt_at=timezone.now() + TOKEN_LIFETIME,
                last_error=("MTurk answered that this token was processed already, but lists no such payment: "
                            f"not paid. The token can be sent again once MTurk forgets it. ({exc})")[:2000])
            logger.error("Bonus %s: MTurk says duplicate but lists no payment", payment.pk)
            raise
        if exc.kind == "request" and payment.attempts >= settings.BONUS_MAX_ATTEMPTS:
            _give_up(payment, exc)
            raise
        wait = min(MAX_BACKOFF, timedelta(minutes=2 ** min(payment.attempts, 10)))
        status = BonusPayment.Status.PENDING if exc.kind == "connection" else BonusPayment.Status.FAILED
        _mine(payment).update(status=status, last_error=str(exc)[:2000], next_attempt_at=timezone.now() + wait)
        logger.warning("Bonus %s not paid (attempt %s): %s", payment.pk, payment.attempts, exc)
        raise


def _give_up(payment: BonusPayment, exc: Exception) -> None:
    """MTurk refused the row ``BONUS_MAX_ATTEMPTS`` times: it ends, and a person is told."""
    reason = f"MTurk refused this bonus {payment.attempts} times; no more tries. Last answer: {exc}"
    if not _mine(payment).update(status=BonusPayment.Status.GAVE_UP, last_error=reason[:2000]):
        return
    worker = payment.assignment.worker.worker_id
    logger.error("Bonus %s ($%s to %s) given up: %s", payment.pk, payment.amount, worker, exc)
    mail_admins(f"A bonus could not be paid: {usd(payment.amount)} to {worker}",
                f"Bonus ledger row {payment.pk} (assignment {payment.assignment.assignment_id}) {reason}\n\n"
                "It is marked gave_up in the admin (Crowd > Bonus payments). Check the assignment on MTurk, then "
                "pay it by hand or mark it as settled.", fail_silently=True)


def _mine(payment: BonusPayment):
    """The ledger row while this run still holds it: its attempt is the one this run
    claimed. A run that outlived its lease (another run claimed the row since) writes nothing."""
    return BonusPayment.objects.filter(pk=payment.pk, attempts=payment.attempts)


def _paid(payment: BonusPayment, note: str = "") -> bool:
    """Mark the row paid; False when this run no longer holds it (the run that does
    finds the payment on MTurk with ListBonusPayments)."""
    return bool(_mine(payment).update(status=BonusPayment.Status.PAID, paid_at=timezone.now(), last_error=note))


BONUS_WATERMARK = "bonuses"


def settleable():
    """Assignments whose bonus is still to settle: approved, MTurk-verified, of a
    writing batch with a bonus, and no ledger row yet (a settled one never comes back)."""
    return Assignment.objects.select_related("hit__batch", "worker", "session").filter(
        status=Assignment.Status.APPROVED, verified_at__isnull=False, worker__verified_at__isnull=False,
        hit__batch__mode=Batch.Mode.CREATE, hit__batch__bonus_per_example__gt=0).exclude(
        bonuses__reason=BonusPayment.Reason.VERIFIED_FOOLING)


def changed_since(since, now) -> set[int]:
    """The assignments whose settlement may have changed since ``since`` (ids): approved
    since, with a model-fooling example stamped since (decided, flagged, retracted),
    or whose deadline (``Assignment.bonus_settle_by``) passed since. Each read through
    an index on its stamp: it costs what changed, not the history."""
    approved = Assignment.objects.filter(status=Assignment.Status.APPROVED, decided_at__gte=since).order_by()
    due = Assignment.objects.filter(bonus_settle_by__gte=since, bonus_settle_by__lte=now).order_by()
    tasks = sorted(set(Batch.objects.filter(mode=Batch.Mode.CREATE, bonus_per_example__gt=0).order_by()
                       .values_list("task_id", flat=True)))
    examples = (Example.objects.filter(task_id__in=tasks, updated_at__gte=since, fooled=True,
                                       source=Example.Source.ANNOTATION, session__isnull=False)
                .order_by().values("session_id"))
    touched = Assignment.objects.filter(session_id__in=examples).order_by()
    return {pk for found in (approved, due, touched) for pk in found.values_list("pk", flat=True)}


def settle_all(assignments, now, report: BonusReport) -> None:
    """Settle each of ``assignments`` that can be settled; remember the deadline of each
    that waits, so that the run after it passes finds it, and whether a researcher's
    decision holds it (``bonus_held_since``)."""
    for assignment in assignments.order_by("pk"):
        if settle(assignment, now) is None:
            report.waiting += 1
            changes = {}
            settle_by = deadline(assignment)
            if settle_by != assignment.bonus_settle_by:
                changes["bonus_settle_by"] = settle_by
            if held(assignment):
                report.held += 1
                if assignment.bonus_held_since is None:
                    changes["bonus_held_since"] = now
            elif assignment.bonus_held_since is not None:
                changes["bonus_held_since"] = None
            if changes:
                Assignment.objects.filter(pk=assignment.pk).update(**changes)
        else:
            report.settled += 1
            if assignment.bonus_held_since is not None:
                Assignment.objects.filter(pk=assignment.pk).update(bonus_held_since=None)


def pay_bonuses(batch_id: int | None = None, *, full: bool = False) -> BonusReport:
    """Settle what can be settled, then send the due ledger rows.

    A run settles only the assignments that may have changed since the last run
    (``changed_since``, from the ``bonuses`` watermark; ``crowd.watermarks``); the
    first run, and a ``full`` one, walk every assignment still to settle. A run for
    one batch reads the same changes, of that batch only, and leaves the watermark
    where it is. ``waiting`` counts the assignments this run looked at and left
    waiting."""
    report = BonusReport()
    now = timezone.now()  # the new mark: taken before anything is read
    since = None if full else watermarks.read_from(watermarks.get(BONUS_WATERMARK))
    assignments = settleable()
    if batch_id is not None:
        assignments = assignments.filter(hit__batch_id=batch_id)
    if since is None:
        settle_all(assignments, now, report)
    else:
        for chunk in watermarks.chunks(sorted(changed_since(since, now))):
            settle_all(assignments.filter(pk__in=chunk), now, report)
    if batch_id is None:
        watermarks.advance(BONUS_WATERMARK, now)
        report.reminded = remind_researchers(now)
    due = BonusPayment.objects.select_related("assignment__worker", "assignment__hit__batch").filter(
        status__in=[BonusPayment.Status.PENDING, BonusPayment.Status.FAILED], next_attempt_at__lte=timezone.now())
    if batch_id is not None:
        due = due.filter(assignment__hit__batch_id=batch_id)
    for payment in due.order_by("pk"):
        try:
            if send(payment):
                report.add_paid(payment.amount, payment.assignment.hit.batch.currency)
        except PlatformError as exc:
            report.errors.append(f"bonus {payment.pk} to {payment.assignment.worker.worker_id}: {exc}")
            if exc.kind in ("throttled", "insufficient_funds"):
                break  # the rest would fail the same way: next run
    reconcile_sent(report, batch_id)
    return report


def reconcile_sent(report: BonusReport, batch_id: int | None = None) -> None:
    """Look for the payment of each sent row (a pay call whose answer was lost) in the
    platform's records (``crowd.sent_bonuses.reconcile``); never send one again."""
    sent = BonusPayment.objects.select_related("assignment__worker", "assignment__hit__batch").filter(
        status=BonusPayment.Status.SENT)
    if batch_id is not None:
        sent = sent.filter(assignment__hit__batch_id=batch_id)
    for payment in sent.order_by("pk"):
        try:
            if sent_bonuses.reconcile(payment, for_batch(payment.assignment.hit.batch)):
                report.reconciled += 1
            else:
                report.unconfirmed += 1
        except PlatformError as exc:
            report.unconfirmed += 1
            report.errors.append(f"bonus {payment.pk} (sent): {exc}")
            if exc.kind == "throttled":
                break


# --- bonuses held for a researcher: the due list and the reminder ----------------------

REMINDER_MARK = "bonus-decision-reminder"  # a Watermark row: when the last reminder went out
REMINDER_ROWS = 200  # assignments one reminder lists at most (the rest are counted)


def held_for_researchers():
    """The assignments whose bonus a researcher's decision holds, longest held first (the
    index on ``bonus_held_since``: a few rows, however long the history)."""
    return (Assignment.objects.filter(bonus_held_since__isnull=False)
            .exclude(bonuses__reason=BonusPayment.Reason.VERIFIED_FOOLING)
            .select_related("hit__batch__task", "worker").order_by("bonus_held_since", "pk"))


def _claim_reminder(now) -> bool:
    """Whether this run sends the reminder: one UPDATE that succeeds only when the last
    one is ``BONUS_DECISION_REMINDER_HOURS`` old, so two runs at once send one."""
    every = timedelta(hours=settings.BONUS_DECISION_REMINDER_HOURS)
    Watermark.objects.bulk_create([Watermark(name=REMINDER_MARK, until=now - every)], ignore_conflicts=True)
    return bool(Watermark.objects.filter(name=REMINDER_MARK, until__lte=now - every).update(until=now))


def _reminder_line(assignment: Assignment, examples: list[Example], now) -> str:
    base = settings.PUBLIC_BASE_URL.rstrip("/")
    links = ", ".join(f"{base}{reverse('admin:annotation_example_change', args=[e.pk])} "
                      f"({'escalated' if e.validation_status == Example.ValidationStatus.ESCALATED else 'flagged'})"
                      for e in examples)
    settle_by = deadline(assignment)
    due = (f"its deadline passed {settle_by:%Y-%m-%d %H:%M} UTC" if settle_by and settle_by <= now
           else f"its deadline is {settle_by:%Y-%m-%d %H:%M} UTC" if settle_by else "no deadline known yet")
    return (f"- batch {assignment.hit.batch_id}, {assignment.worker.worker_id}'s assignment "
            f"{assignment.assignment_id}, held since {assignment.bonus_held_since:%Y-%m-%d %H:%M} UTC ({due}): "
            f"{links or 'no example holds it any more (the next bonus run settles it)'}")


def remind_researchers(now=None) -> int:
    """E-mail each task's researchers (its owners with an address) the bonuses held for
    their decision, and the site's admins all of them, when any are held and the last
    reminder is ``BONUS_DECISION_REMINDER_HOURS`` old; the number of e-mails sent (the
    admins' one counted when ``ADMINS`` is set)."""
    now = now or timezone.now()
    rows = list(held_for_researchers()[:REMINDER_ROWS + 1])
    if not rows or not _claim_reminder(now):
        return 0
    more = len(rows) > REMINDER_ROWS
    rows = rows[:REMINDER_ROWS]
    by_task: dict = {}
    for assignment in rows:
        by_task.setdefault(assignment.hit.batch.task, []).append(assignment)
    explain = ("Each example below is flagged or escalated, and the worker's bonus for its assignment waits for a "
               "researcher's decision: no deadline settles it. Decide the example (correct pays it; incorrect or "
               "flagged does not), or clear a flag the validators' decision should stand against. The next bonus "
               "run settles the assignment, once.")
    sent, everything = 0, []
    for task, assignments in sorted(by_task.items(), key=lambda item: item[0].slug):
        lines = [_reminder_line(a, held(a), now) for a in assignments]
        everything += [f"{task.slug}:"] + lines
        owners = list(task.owners.filter(is_active=True).exclude(email="").order_by("pk")
                      .values_list("email", flat=True))
        if owners:
            sent += send_mail(f"Bonuses wait for your decision on {task.slug}: {len(lines)} assignment(s)",
                              explain + "\n\n" + "\n".join(lines) + "\n", None, owners, fail_silently=True)
    if more:
        everything.append(f"... and more than {REMINDER_ROWS} assignments in all (the admin's list: Assignments, "
                          "filter 'bonus held for a researcher').")
    mail_admins(f"Bonuses held for a researcher's decision: {len(rows)}{'+' if more else ''} assignment(s)",
                explain + "\n\n" + "\n".join(everything) + "\n", fail_silently=True)
    return sent + (1 if settings.ADMINS else 0)
