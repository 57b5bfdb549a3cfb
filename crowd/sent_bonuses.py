"""Bonuses on a platform whose pay call is not idempotent (Prolific): sent at most once.

Prolific pays a bonus in two calls: a set-up (``POST /submissions/bonus-payments/``,
which moves no money and answers a bulk bonus id, its fees and total), then the
pay call (``POST /bulk-bonus-payments/{id}/pay/``), which pays again each time it
is called. So, for a ledger row, under the lease ``crowd.bonuses.send`` took:

1. No bulk id yet: set it up, and keep the id, fees and total on the row. A crash
   here costs nothing: the next run sets up again or reuses the id it kept.
2. Note what Prolific shows paid to the participant on the study, then mark the row
   ``SENT`` (with ``sent_at``) in its own committed write, *before* the call.
3. Call pay once. A 2xx: ``PAID``. A refusal that proves nothing was paid (429, or a
   4xx): back to ``FAILED``, retried later with the same bulk id (an unknown bulk id
   is set up again); a row Prolific keeps refusing ends as ``gave_up``. A lost answer
   (timeout, dropped connection, 5xx): the row stays ``SENT``.
4. A ``SENT`` row is never sent again by a run. ``reconcile`` reads Prolific's records
   (a new bonus of the row's amount on the participant's submission) and marks it
   ``PAID`` when they show it; one still unconfirmed after
   ``PROLIFIC_UNCONFIRMED_AFTER_HOURS`` is listed in the admin (the "sent, unconfirmed"
   filter) for a superuser to settle by hand (``settle_by_hand``): "paid on Prolific",
   or "not paid: may be sent again", which clears the bulk id so a new set-up is made.
   Who settled it, when and why are kept on the row.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.mail import mail_admins
from django.db.models import Q
from django.utils import timezone

from core.errors import Conflict, Forbidden, InvalidInput

from .models import BonusPayment
from .platform import PlatformError

logger = logging.getLogger(__name__)

MAX_BACKOFF = timedelta(hours=1)
LOST = ("connection", "unavailable")  # the pay call may have been carried out
CHECK_ON_SITE = ("Check the participant's submission on Prolific's site (the study's submissions, the "
                 "participant's bonus payments): if the bonus shows there, settle this row as paid on Prolific; "
                 "if it does not, and the bulk bonus is not marked paid on Prolific, settle it as not paid, "
                 "and it will be set up and sent again.")


def _mine(payment: BonusPayment):
    """The row while this run holds it (its claimed attempt)."""
    return BonusPayment.objects.filter(pk=payment.pk, attempts=payment.attempts)


def _backoff(payment: BonusPayment, exc: PlatformError) -> timedelta:
    wait = min(MAX_BACKOFF, timedelta(minutes=2 ** min(payment.attempts, 10)))
    retry_after = getattr(exc, "retry_after", None)
    return max(wait, timedelta(seconds=retry_after)) if retry_after else wait


def _refused(payment: BonusPayment, exc: PlatformError, *, status_now: str) -> None:
    """Nothing was paid: the row goes back to ``FAILED`` for a later run (an unknown bulk
    id is set up again), or ends as ``gave_up`` after ``BONUS_MAX_ATTEMPTS`` refusals."""
    rows = _mine(payment).filter(status=status_now)
    clear = {"platform_ref": "", "fees": None, "total": None} if exc.kind == "not_found" else {}
    if exc.kind in ("request", "not_found", "auth") and payment.attempts >= settings.BONUS_MAX_ATTEMPTS:
        reason = (f"Prolific refused this bonus {payment.attempts} times; no more tries. Last answer: {exc}")
        if rows.update(status=BonusPayment.Status.GAVE_UP, sent_at=None, last_error=reason[:2000], **clear):
            worker = payment.assignment.worker.worker_id
            logger.error("Bonus %s (%s %s to %s) given up: %s", payment.pk, payment.amount,
                         payment.assignment.hit.batch.currency, worker, exc)
            mail_admins(f"A Prolific bonus could not be paid: {payment.amount} to {worker}",
                        f"Bonus ledger row {payment.pk} (submission {payment.assignment.assignment_id}): {reason}\n\n"
                        "It is marked gave_up in the admin (Crowd > Bonus payments).", fail_silently=True)
        return
    rows.update(status=BonusPayment.Status.FAILED, sent_at=None, last_error=str(exc)[:2000],
                next_attempt_at=timezone.now() + _backoff(payment, exc), **clear)
    logger.warning("Bonus %s not paid (attempt %s): %s", payment.pk, payment.attempts, exc)


def send_once(payment: BonusPayment, platform) -> bool:
    """Steps 1-3 for a row ``crowd.bonuses.send`` claimed (pending, under its lease).
    True when this run got it paid; a ``PlatformError`` when it was refused or its
    answer was lost (the row then says which)."""
    try:
        if not payment.platform_ref:
            ref, fees, total = platform.setup_bonus(payment)
            if not _mine(payment).filter(platform_ref="").update(platform_ref=ref, fees=fees, total=total):
                return False  # this run lost the row meanwhile
            payment.platform_ref, payment.fees, payment.total = ref, fees, total
        before = platform.bonuses_seen(payment)
    except PlatformError as exc:
        _refused(payment, exc, status_now=BonusPayment.Status.PENDING)
        raise
    # Marked sent, and committed, before the call: a crash after this line never sends again.
    if not _mine(payment).filter(status=BonusPayment.Status.PENDING).update(
            status=BonusPayment.Status.SENT, sent_at=timezone.now(), bonuses_before=before, last_error=""):
        return False
    payment.bonuses_before = before
    try:
        platform.send_bonus(payment)
    except PlatformError as exc:
        if exc.kind in LOST:
            BonusPayment.objects.filter(pk=payment.pk, status=BonusPayment.Status.SENT).update(
                last_error=(f"The pay call went out and its answer was lost ({exc}). It is never sent again by "
                            "itself: the next runs look for the payment on Prolific. " + CHECK_ON_SITE)[:2000])
            logger.error("Bonus %s: Prolific's answer to the pay call was lost: %s", payment.pk, exc)
        else:
            _refused(payment, exc, status_now=BonusPayment.Status.SENT)
        raise
    return bool(BonusPayment.objects.filter(pk=payment.pk, status=BonusPayment.Status.SENT).update(
        status=BonusPayment.Status.PAID, paid_at=timezone.now(), last_error=""))


def unconfirmed_q() -> Q:
    """Sent rows that Prolific's records have not shown paid for
    ``PROLIFIC_UNCONFIRMED_AFTER_HOURS``: a person must look."""
    since = timezone.now() - timedelta(hours=settings.PROLIFIC_UNCONFIRMED_AFTER_HOURS)
    return Q(status=BonusPayment.Status.SENT, sent_at__lte=since)


def unconfirmed():
    return BonusPayment.objects.filter(unconfirmed_q())


def reconcile(payment: BonusPayment, platform) -> bool:
    """Settle a sent row from the platform's records: True when they show it paid
    (the row is then ``PAID``); False when they do not (yet): it stays sent."""
    if platform.bonus_on_record(payment):
        return bool(BonusPayment.objects.filter(pk=payment.pk, status=BonusPayment.Status.SENT).update(
            status=BonusPayment.Status.PAID, paid_at=timezone.now(),
            last_error="Found paid on Prolific after the pay call's answer was lost."))
    late = payment.sent_at is not None and payment.sent_at <= timezone.now() - timedelta(
        hours=settings.PROLIFIC_UNCONFIRMED_AFTER_HOURS)
    BonusPayment.objects.filter(pk=payment.pk, status=BonusPayment.Status.SENT).update(last_error=(
        f"Sent {payment.sent_at:%Y-%m-%d %H:%M} UTC; Prolific did not show the payment when checked at "
        f"{timezone.now():%Y-%m-%d %H:%M} UTC. It is never sent again by itself. "
        + (CHECK_ON_SITE if late else "Prolific pays in the minutes after the call: the next runs look again."))[:2000])
    return False


MAX_SETTLEMENT_NOTE = 500


def settle_by_hand(payment: BonusPayment, user, *, paid: bool, note: str = "") -> BonusPayment:
    """A superuser settles a sent row after checking Prolific's site: ``paid`` (it shows
    there) marks it paid; not paid clears its bulk id and lets a later run set it up and
    send it again. Who, when and why are kept on the row."""
    if not (user and user.is_authenticated and user.is_active and user.is_superuser):
        raise Forbidden("Only a superuser settles a bonus whose pay call's answer was lost.")
    if not isinstance(note, str) or "\x00" in note or len(note) > MAX_SETTLEMENT_NOTE:
        raise InvalidInput.field("note", f"Must be text of at most {MAX_SETTLEMENT_NOTE} characters.")
    now = timezone.now()
    who = {"settled_by": user, "settled_at": now, "settled_note": note.strip()}
    if paid:
        values = {"status": BonusPayment.Status.PAID, "paid_at": now,
                  "last_error": "Settled by hand: paid on Prolific.", **who}
    else:
        values = {"status": BonusPayment.Status.FAILED, "platform_ref": "", "fees": None, "total": None,
                  "sent_at": None, "bonuses_before": [], "next_attempt_at": now,
                  "last_error": "Settled by hand: not paid on Prolific; to be set up and sent again.", **who}
    if not BonusPayment.objects.filter(pk=payment.pk, status=BonusPayment.Status.SENT).update(**values):
        payment.refresh_from_db()
        raise Conflict(f"Bonus {payment.pk} is {payment.get_status_display().lower()}: only a sent, unconfirmed "
                       "bonus is settled by hand.")
    payment.refresh_from_db()
    return payment
