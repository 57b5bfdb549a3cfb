"""Mechanical Turk behind the crowd interface (``crowd.platform.Platform``), over
``crowd/mturk.py``: every call goes through that module's functions, so what MTurk
sees is what the crowd app sent before the interface existed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from .. import mturk
from ..completion import completion_ok
from ..hit_types import qualifications
from ..platform import Listed, Platform
from ..qualifications import block_qualification_id, onboarded_qualification_id

STATUSES = {"Submitted": Listed.SUBMITTED, "Approved": Listed.APPROVED, "Rejected": Listed.REJECTED}


def _when(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(float(value), tz=UTC)


def hit_url() -> str:
    """The ExternalURL of every HIT: MTurk appends its query parameters."""
    return settings.PUBLIC_BASE_URL + reverse("mturk-hit")


def unique_request_token(hit) -> str:
    return f"dynabench-{hit.batch.uid.hex}-{hit.number}"


class MTurkPlatform(Platform):
    name = "mturk"
    label = "Mechanical Turk"
    error = mturk.MTurkError
    idempotent_pay = True  # SendBonus pays a UniqueRequestToken once

    def credentials_found(self) -> bool:
        return mturk.credentials_found()

    def balance(self, *, sandbox: bool, currency: str = "USD") -> Decimal:
        return mturk.account_balance(sandbox=sandbox)

    def publish(self, batch) -> None:
        """The batch's HIT type (once), then each HIT with no id yet, each under its own
        UniqueRequestToken: a retry posts only what is missing, never a HIT twice."""
        if not batch.hit_type_id:
            # The batch's own keyword makes its HIT type its own (MTurk gives equal parameters one type).
            keywords = ", ".join(k for k in (batch.keywords, f"dynabench-{batch.uid.hex[:12]}") if k)
            batch.hit_type_id = mturk.create_hit_type(
                title=batch.title, description=batch.description, keywords=keywords, reward=batch.reward,
                assignment_duration=batch.assignment_duration_seconds,
                auto_approval_delay=batch.auto_approval_delay_seconds, qualifications=qualifications(batch),
                sandbox=batch.sandbox)
            batch.save(update_fields=["hit_type_id"])
        question = mturk.external_question(hit_url())
        for hit in batch.hit_rows.filter(hit_id__isnull=True).order_by("number"):
            hit.batch = batch
            hit.hit_id = mturk.create_hit(
                hit_type_id=batch.hit_type_id, question=question, max_assignments=batch.assignments_per_hit,
                lifetime=batch.lifetime_seconds, unique_request_token=unique_request_token(hit),
                annotation=f"dynabench batch {batch.pk}", sandbox=batch.sandbox)
            hit.created_at = timezone.now()
            hit.save(update_fields=["hit_id", "created_at"])

    def close(self, batch, hit) -> None:
        mturk.expire_hit(hit.hit_id, sandbox=batch.sandbox)

    def list_work(self, batch, hit) -> Iterator[Listed]:
        for found in mturk.list_assignments(hit.hit_id, sandbox=batch.sandbox):
            answer = mturk.parse_answer(found.get("Answer", ""))
            yield Listed(work_id=found["AssignmentId"], worker_id=found["WorkerId"],
                         status=STATUSES.get(found["AssignmentStatus"], Listed.OTHER),
                         submitted_at=_when(found.get("SubmitTime")),
                         auto_approval_at=_when(found.get("AutoApprovalTime")),
                         completion=answer.get("completionToken", ""), raw=found)

    def confirm_work(self, batch, hit, work_id: str, worker_id: str, *, at_once: bool = False) -> bool | None:
        """GetAssignment: True when MTurk shows the assignment under that worker on that HIT,
        False under another; None when MTurk does not show it, which before the assignment's
        deadline proves nothing (MTurk hides an assignment until it is submitted) and after it
        means it was never submitted. Arrivals do not ask (``confirms_on_arrival`` is false):
        the sync's listing confirms an assignment once it is submitted."""
        found = mturk.get_assignment(work_id, sandbox=batch.sandbox)
        if found is None:
            return None
        return found.get("WorkerId") == worker_id and found.get("HITId") == hit.hit_id

    def completion_ok(self, assignment, listed: Listed) -> bool:
        return completion_ok(assignment, listed.completion)

    def approve(self, batch, work_id: str, feedback: str) -> None:
        mturk.approve(work_id, feedback, sandbox=batch.sandbox)

    def reject(self, batch, work_id: str, feedback: str, *, reason: str = "") -> None:
        mturk.reject(work_id, feedback, sandbox=batch.sandbox)

    def longest_call_seconds(self) -> int:
        return mturk.longest_call_seconds()

    def send_bonus(self, payment) -> None:
        """SendBonus under the row's UniqueRequestToken: MTurk pays a token once."""
        assignment = payment.assignment
        mturk.send_bonus(worker_id=assignment.worker.worker_id, assignment_id=assignment.assignment_id,
                         amount=payment.amount, reason=payment.message,
                         unique_request_token=payment.unique_request_token, sandbox=assignment.hit.batch.sandbox)

    def bonus_on_record(self, payment) -> bool:
        """Whether MTurk lists this ledger row's bonus (its reason names the row)."""
        assignment = payment.assignment
        return any(payment.unique_request_token in (found.get("Reason") or "")
                   and found.get("WorkerId") == assignment.worker.worker_id
                   for found in mturk.bonuses_for(assignment.assignment_id, sandbox=assignment.hit.batch.sandbox))

    def block_everywhere(self, identity, reason: str, *, sandbox: bool) -> None:
        mturk.give_qualification(block_qualification_id(sandbox), identity.worker_id, sandbox=sandbox)

    def unblock_everywhere(self, identity, *, sandbox: bool) -> None:
        mturk.take_qualification(block_qualification_id(sandbox), identity.worker_id,
                                 "You are admitted to Dynabench HITs again.", sandbox=sandbox)

    def block_on_task(self, identity, task, reason: str, *, sandbox: bool) -> None:
        mturk.give_qualification(block_qualification_id(sandbox, task), identity.worker_id, sandbox=sandbox)

    def unblock_on_task(self, identity, task, *, sandbox: bool) -> None:
        try:
            mturk.take_qualification(block_qualification_id(sandbox, task), identity.worker_id,
                                     f"You are admitted to the Dynabench task {task.slug} again.", sandbox=sandbox)
        except mturk.MTurkError as exc:
            if exc.kind != "request":  # a request error: MTurk has no such qualification to take
                raise

    def block_account(self, identity, reason: str, *, sandbox: bool) -> None:
        mturk.block_worker(identity.worker_id, reason, sandbox=sandbox)

    def unblock_account(self, identity, *, sandbox: bool) -> None:
        mturk.unblock_worker(identity.worker_id, "Unblocked by the requester.", sandbox=sandbox)

    def mark_onboarded(self, identity, task, *, sandbox: bool) -> None:
        mturk.give_qualification(onboarded_qualification_id(sandbox, task), identity.worker_id, sandbox=sandbox)

    def notify(self, worker_ids: list[str], subject: str, message: str, *, sandbox: bool) -> list[dict]:
        return mturk.notify(worker_ids, subject, message, sandbox=sandbox)
