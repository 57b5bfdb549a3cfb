"""Prolific behind the crowd interface (``crowd.platform.Platform``), over
``crowd/prolific.py``.

- A batch is one study (its one ``Hit`` row holds the study id); a participant's
  submission is an ``Assignment`` whose ``assignment_id`` is the submission id
  (Prolific's ``SESSION_ID`` in the study URL is the submission id).
- A participant is confirmed as the one the study URL names when Prolific shows the
  submission (``SESSION_ID``) as theirs in the study (``confirm_work``): at their arrival,
  or, when Prolific could not answer then, at the next sync's listing.
- A participant proves the work was done on our page with the batch's completion
  code, which our page shows only once the work asked for is done.
- Money: Prolific's pay call is not idempotent, so the ledger sends it at most once
  per row (``crowd.sent_bonuses``); ``bonus_on_record`` reads what Prolific shows
  paid on the participant's submission.
- Blocks: our pages refuse blocked participants; a block on every task also adds
  them to ``PROLIFIC_BLOCKLIST_GROUP_ID`` (a participant group every study of ours
  excludes) when that is set. With ``PROLIFIC_WORKSPACE_ID`` set, each task has its
  own groups (``crowd.prolific_groups``): its blocked participants (its studies'
  blocklist) and those who passed its onboarding (the allowlist of a study that
  requires it); without it, task blocks and required onboarding hold at our page only.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.urls import reverse
from django.utils import timezone
from django.utils.crypto import constant_time_compare
from django.utils.dateparse import parse_datetime

from .. import prolific, prolific_groups
from ..platform import Listed, Platform

STATUSES = {"AWAITING REVIEW": Listed.SUBMITTED, "APPROVED": Listed.APPROVED, "REJECTED": Listed.REJECTED}
# What the participant reads with a rejection (Prolific wants 100 characters at least),
# and its category, for each reason the sync rejects for.
REJECTION_TAIL = (" The study's page records each piece of work and shows the completion code only once the work "
                  "the study asks for is done there.")


def entry_url(batch) -> str:
    """Where Prolific sends a participant (before its parameters)."""
    return settings.PUBLIC_BASE_URL + reverse("prolific-entry", args=[batch.uid.hex])


def internal_name(batch) -> str:
    """The study's name for researchers only, unique to the batch (its uid): how a retried
    publish finds a study whose create answer was lost."""
    return f"dynabench batch {batch.pk} ({batch.uid.hex})"


CATEGORIES = {"no_record": "NO_DATA", "bad_code": "BAD_CODE", "not_finished": "FAILED_INSTRUCTIONS"}


def _minor_to_major(value) -> Decimal | None:
    """Pence or cents as Prolific answers them (a number, which may carry a fraction: 33.3)
    to pounds or dollars, to the nearest cent."""
    return None if value is None else (Decimal(str(value)) / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


class ProlificPlatform(Platform):
    name = "prolific"
    label = "Prolific"
    error = prolific.ProlificError
    idempotent_pay = False
    confirms_on_arrival = True  # a submission is shown from its start (RESERVED, then ACTIVE)
    work_name = "study"
    work_plural = "studies"
    hand_in = "finish"
    give_back = "please return your submission on Prolific"

    def credentials_found(self) -> bool:
        return bool(settings.PROLIFIC_TOKEN)

    def balance(self, *, sandbox: bool, currency: str) -> None:
        """Prolific's API does not show the wallet: the budget alone bounds a batch."""
        return None

    def publish(self, batch) -> None:
        """Create the batch's study once (its id is kept at once), then publish it if it is
        still a draft. Before creating, the study is looked up by its internal name (the
        batch's uid is in it): a create whose answer was lost left a draft, which is reused,
        never made twice."""
        hit = batch.hit_rows.order_by("number").first()
        if hit.hit_id is None:
            found = prolific.find_study(internal_name(batch))
            # A row of the list is short: the study itself says what it pays in.
            study = prolific.get_study(found["id"]) if found else prolific.create_study(
                name=batch.title, internal_name=internal_name(batch),
                description=batch.description, external_study_url=prolific.study_url_template(entry_url(batch)),
                completion_code=batch.completion_code, estimated_completion_time_minutes=batch.estimated_minutes,
                reward_cents=prolific.to_minor(batch.reward), total_available_places=batch.assignments_per_hit,
                currency=batch.currency, **prolific_groups.study_filters(batch))
            prolific.check_currency(study, batch.currency)  # before it is kept: never published in another
            hit.hit_id, hit.created_at = study["id"], timezone.now()
            hit.save(update_fields=["hit_id", "created_at"])
        if prolific.get_study(hit.hit_id).get("status") == "UNPUBLISHED":
            prolific.publish_study(hit.hit_id)

    def close(self, batch, hit) -> None:
        """Stop the study; one that is full or stopped already needs nothing."""
        if prolific.get_study(hit.hit_id).get("status") in ("ACTIVE", "PAUSED"):
            prolific.stop_study(hit.hit_id)

    def list_work(self, batch, hit) -> Iterator[Listed]:
        for found in prolific.list_submissions(hit.hit_id):
            completed = found.get("completed_at")
            yield Listed(work_id=found["id"], worker_id=found.get("participant_id") or found.get("participant", ""),
                         status=STATUSES.get(found.get("status"), Listed.OTHER),
                         submitted_at=parse_datetime(completed) if completed else None,
                         completion=found.get("study_code") or "", raw=found)

    def confirm_work(self, batch, hit, work_id: str, worker_id: str, *, at_once: bool = False) -> bool:
        """The submission ``work_id`` (the SESSION_ID), as Prolific shows it from the moment the
        participant takes a place: True when it is ``worker_id``'s in the batch's study; False
        when it is another participant's or another study's, or Prolific has no such submission."""
        try:
            found = prolific.get_submission(work_id, retry=not at_once)
        except prolific.ProlificError as exc:
            if exc.kind == "not_found":
                return False
            raise
        participant = found.get("participant") or found.get("participant_id")
        return participant == worker_id and found.get("study_id") == hit.hit_id

    def completion_ok(self, assignment, listed: Listed) -> bool:
        code = assignment.hit.batch.completion_code
        return bool(code) and constant_time_compare(listed.completion or "", code)

    def approve(self, batch, work_id: str, feedback: str) -> None:
        prolific.approve_submission(work_id)

    def reject(self, batch, work_id: str, feedback: str, *, reason: str = "") -> None:
        message = feedback if len(feedback) >= prolific.MIN_REJECTION_MESSAGE else feedback + REJECTION_TAIL
        prolific.reject_submission(work_id, message, CATEGORIES.get(reason, "OTHER"))

    def longest_call_seconds(self) -> int:
        attempts = prolific.MAX_ATTEMPTS
        return attempts * (prolific.CONNECT_TIMEOUT + prolific.READ_TIMEOUT) + (attempts - 1) * prolific.RETRY_AFTER_CAP

    # --- bonuses: set up, then pay once (crowd.sent_bonuses) ------------------------------
    @staticmethod
    def _row(payment) -> tuple[str, list[tuple[str, Decimal]]]:
        assignment = payment.assignment
        return assignment.hit.hit_id, [(assignment.worker.worker_id, payment.amount)]

    def setup_bonus(self, payment) -> tuple[str, Decimal | None, Decimal | None]:
        """Set up the row's bonus (moves no money): Prolific's bulk id, fees and total."""
        study_id, rows = self._row(payment)
        answer = prolific.setup_bonus(study_id, rows)
        return str(answer["id"]), _minor_to_major(answer.get("fees")), _minor_to_major(answer.get("total_amount"))

    def bonuses_seen(self, payment) -> list[int]:
        """What Prolific shows paid to the participant on the study (minor units), before a pay call."""
        study_id, rows = self._row(payment)
        return prolific.bonuses_paid(study_id, [rows[0][0]]).get(rows[0][0], [])

    def send_bonus(self, payment) -> None:
        """The pay call, once (never retried: each call pays again)."""
        prolific.pay_bonus(payment.platform_ref)

    def bonus_on_record(self, payment) -> bool | None:
        """True when Prolific shows a new bonus of the row's amount on the participant's
        submission (new: not among ``bonuses_before``); None otherwise: Prolific pays in the
        minutes after the call, so not seeing it proves nothing."""
        study_id, rows = self._row(payment)
        found = prolific.bonus_payment_status(study_id, rows,
                                              paid_before={rows[0][0]: list(payment.bonuses_before or [])})
        return True if found.state == "paid" else None

    # --- workers ------------------------------------------------------------------------
    def block_everywhere(self, identity, reason: str, *, sandbox: bool) -> None:
        if settings.PROLIFIC_BLOCKLIST_GROUP_ID:
            prolific.block_participant(settings.PROLIFIC_BLOCKLIST_GROUP_ID, identity.worker_id)

    def unblock_everywhere(self, identity, *, sandbox: bool) -> None:
        if settings.PROLIFIC_BLOCKLIST_GROUP_ID:
            prolific.unblock_participant(settings.PROLIFIC_BLOCKLIST_GROUP_ID, identity.worker_id)

    def block_on_task(self, identity, task, reason: str, *, sandbox: bool) -> None:
        """The task's blocked group (the blocklist of its studies), with ``PROLIFIC_WORKSPACE_ID``
        set; the ``TaskBlock`` row keeps them out at our door either way."""
        prolific_groups.add(prolific_groups.BLOCKED, task, identity.worker_id)

    def unblock_on_task(self, identity, task, *, sandbox: bool) -> None:
        prolific_groups.remove(prolific_groups.BLOCKED, task, identity.worker_id)

    block_account = block_everywhere
    unblock_account = unblock_everywhere

    def mark_onboarded(self, identity, task, *, sandbox: bool) -> None:
        """The task's onboarded group (the allowlist of its studies that require the onboarding),
        with ``PROLIFIC_WORKSPACE_ID`` set; the onboarding record admits them at our door either way."""
        prolific_groups.add(prolific_groups.ONBOARDED, task, identity.worker_id)

    def notify(self, worker_ids: list[str], subject: str, message: str, *, sandbox: bool) -> list[dict]:
        raise prolific.ProlificError("request", "Messages to Prolific participants are sent on Prolific's site; "
                                                "this platform does not send them.", operation="notify")
