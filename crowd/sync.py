"""Bringing our records in line with the crowd platform's, and deciding submitted work.

The rules below are written for MTurk and hold for Prolific through the platform
interface (``crowd.platforms``): a study is the batch's one HIT, a submission an
assignment (its id is the ``SESSION_ID`` of the participant's link), and the
completion token is the batch's completion code. Work is matched to our rows by its
work id under its worker id only. A Prolific rejection carries at least 100
characters and a category.

``sync_batch`` (Celery beat, ``manage.py mturk_sync`` and the admin) is safe to
run at any time and any number of times. For each HIT it lists MTurk's
assignments and applies these rules, which docs/crowd.md documents:

0. **Confirmed as the worker's** when MTurk lists the assignment under the worker the
   arrival named, on the same HIT (Prolific: the submission under that participant in
   the study, in any state): an arrival's work, done as a provisional identity of its
   own, joins the worker's account then (``assignments.confirm_worker``).
1. **Verified** only when MTurk lists the assignment as submitted by the same
   worker, on the same HIT, with the completion token our page issued when the
   worker pressed Submit. Only then does the worker's identity become verified.
2. **Approved** when verified and the work the HIT asked for was recorded (the
   page refuses Submit before that, so this is the normal case).
3. **Rejected**, always with feedback, when MTurk has a submission we cannot
   match: no arrival recorded for that worker, a missing or wrong completion
   token, or work that was never finished on our page.
4. A row still *working* after its deadline was returned or abandoned: it is
   marked so and its token ends; so is one whose assignment id MTurk lists under
   another worker (MTurk reuses returned assignments' ids), and one finished here
   but never confirmed, past its deadline, that the platform does not show as its
   worker's (``_give_up_unconfirmed``).
5. A published batch whose lifetime is over, or whose every assignment was
   decided, is expired on MTurk and marked finished once no confirmed work is open
   (work never confirmed does not hold it open). It is still synced until
   MTurk can hold no submission of it (``Batch.review_until``), so a late or
   direct submission is never left to auto-approval.
6. With a quality threshold set, a worker whose examples of the batch's task are
   validated correct less often than it (once enough are decided) is blocked on
   that task only (``workers.task_block``); blocks on every task stay with
   superusers. Each sync judges again only the workers whose evidence changed
   since the batch's last check (``quality_blocks``), so a check costs what
   changed, not the task's history.

One run per batch: a run takes the batch's lock (``SyncLock``, two columns of the
batch row, taken, renewed and released by compare-and-set on its token), renews it
while it works, and stops when it finds the lock gone to another run. Every write of
an assignment's status is a compare-and-set from the status the run read, and what
follows it (a worker verified, a session ended, a count) happens only when that one
row changed: two runs at once never decide one assignment twice.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from annotation import sessions, validation

from . import watermarks, workers
from .assignments import SUBMITTED_MESSAGE, confirm_worker
from .models import Assignment, Batch, WorkerIdentity
from .platforms import Listed, PlatformError, for_batch

logger = logging.getLogger(__name__)

APPROVE_FEEDBACK = "Thank you: your work was recorded and approved."
NO_RECORD = ("We have no record of work for this assignment on the HIT's page: the HIT must be done on its page, "
             "which records each piece of work.")
BAD_TOKEN = ("The completion code sent with this assignment does not match the one the HIT's page issued "
             "when the work was submitted there.")
NOT_FINISHED = "The work for this assignment was not finished on the HIT's page before it was submitted."
# A sync holds its batch this long past its last renewal (then another may start); a
# run renews it every third of that while it works.
SYNC_LOCK_SECONDS = 900


class LostLock(Exception):
    """The run's lock expired and another run took the batch: this run stops."""


@dataclass
class SyncLock:
    """One run's hold on a batch (``Batch.sync_holder``, ``Batch.sync_held_until``)."""

    batch_id: int
    token: str
    renewed: float = field(default_factory=time.monotonic)

    @classmethod
    def take(cls, batch: Batch) -> SyncLock | None:
        """The batch's lock when it is free (never taken, released, or expired); None
        while another run holds it. One UPDATE: two runs cannot both take it."""
        now, token = timezone.now(), uuid.uuid4().hex
        taken = Batch.objects.filter(Q(sync_held_until__isnull=True) | Q(sync_held_until__lte=now),
                                     pk=batch.pk).update(sync_holder=token,
                                                         sync_held_until=now + timedelta(seconds=SYNC_LOCK_SECONDS))
        return cls(batch.pk, token) if taken else None

    def keep(self) -> None:
        """Renew the lock when a third of its time has gone; LostLock when another run
        holds it now (this one outlived it and was replaced)."""
        if time.monotonic() - self.renewed < SYNC_LOCK_SECONDS / 3:
            return
        held = Batch.objects.filter(pk=self.batch_id, sync_holder=self.token).update(
            sync_held_until=timezone.now() + timedelta(seconds=SYNC_LOCK_SECONDS))
        if not held:
            raise LostLock(f"batch {self.batch_id}: this sync outlived its lock and another run took the batch; "
                           "it stopped")
        self.renewed = time.monotonic()

    def release(self) -> bool:
        """Free the lock if this run still holds it (one UPDATE on the token): a lock
        another run took meanwhile is not this run's to free."""
        return bool(Batch.objects.filter(pk=self.batch_id, sync_holder=self.token).update(
            sync_holder="", sync_held_until=None))


def _set_status(assignment: Assignment, old: str, **values) -> bool:
    """Compare-and-set: write ``values`` (a new ``status`` among them) only if the
    row's status is still ``old``; True when this call changed it (and then
    ``assignment`` carries the values)."""
    changed = Assignment.objects.filter(pk=assignment.pk, status=old).update(**values)
    if changed:
        for name, value in values.items():
            setattr(assignment, name, value)
    return bool(changed)


@dataclass
class SyncReport:
    seen: int = 0
    approved: int = 0
    rejected: int = 0
    returned: int = 0
    task_blocked: int = 0
    finished_batches: int = 0
    errors: list[str] = field(default_factory=list)

    def add(self, other: SyncReport) -> None:
        for name in ("seen", "approved", "rejected", "returned", "task_blocked", "finished_batches"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors.extend(other.errors)

    def __str__(self):
        text = (f"{self.seen} submissions seen, {self.approved} approved, {self.rejected} rejected, "
                f"{self.returned} returned or abandoned, {self.task_blocked} blocked on their task, "
                f"{self.finished_batches} batches finished")
        return text + (f"; {len(self.errors)} errors: " + "; ".join(self.errors) if self.errors else "")


def _decide(batch: Batch, assignment: Assignment | None, listed: Listed, report: SyncReport) -> None:
    """Apply rules 1-3 to one piece of work the platform lists."""
    platform = for_batch(batch)
    status = listed.status
    if assignment is None:
        if status == Listed.SUBMITTED:
            platform.reject(batch, listed.work_id, NO_RECORD, reason="no_record")
            report.rejected += 1
        return
    assignment.refresh_from_db()  # the worker may have pressed Submit while the platform was listing
    if assignment.status in (Assignment.Status.APPROVED, Assignment.Status.REJECTED):
        return  # decided already
    now = timezone.now()
    assignment.submitted_at = listed.submitted_at or assignment.submitted_at
    assignment.auto_approval_at = listed.auto_approval_at or assignment.auto_approval_at
    if assignment.status not in (Assignment.Status.FINISHED, Assignment.Status.SUBMITTED):
        feedback, reason = NOT_FINISHED, "not_finished"
    elif not platform.completion_ok(assignment, listed):
        feedback, reason = BAD_TOKEN, "bad_code"
    else:
        feedback, reason = None, ""
    times = {"submitted_at": assignment.submitted_at, "auto_approval_at": assignment.auto_approval_at}
    # Rule 1: the platform's record and our proof of work agree.
    if feedback is None and assignment.status != Assignment.Status.SUBMITTED:
        with transaction.atomic():
            if not _set_status(assignment, assignment.status, status=Assignment.Status.SUBMITTED,
                               verified_at=assignment.verified_at or now, **times):
                return  # another run moved it meanwhile: that run decides it
            WorkerIdentity.objects.filter(pk=assignment.worker_id, verified_at__isnull=True).update(verified_at=now)
            validation.confirm_session(assignment.session)  # its validations count from now on
    if status in (Listed.APPROVED, Listed.REJECTED):  # decided there (auto-approval, or by hand on its site)
        decided = Assignment.Status.APPROVED if status == Listed.APPROVED else Assignment.Status.REJECTED
        if _set_status(assignment, assignment.status, status=decided, decided_at=now, **times):
            sessions.end_session(assignment.session, SUBMITTED_MESSAGE)
        return
    if status != Listed.SUBMITTED:
        return  # still working, returned or timed out there: nothing to decide yet
    before = assignment.status
    if feedback is None:
        platform.approve(batch, listed.work_id, APPROVE_FEEDBACK)
        if _set_status(assignment, before, status=Assignment.Status.APPROVED, decided_at=timezone.now(),
                       feedback=APPROVE_FEEDBACK, **times):
            report.approved += 1
    else:
        platform.reject(batch, listed.work_id, feedback, reason=reason)
        if _set_status(assignment, before, status=Assignment.Status.REJECTED, decided_at=timezone.now(),
                       feedback=feedback, **times):
            report.rejected += 1
            sessions.end_session(assignment.session, "This assignment was rejected; it takes no more work.")


def sync_batch(batch: Batch) -> SyncReport:
    """Sync one batch; a second sync of the same batch at the same time skips it."""
    lock = SyncLock.take(batch)
    if lock is None:
        report = SyncReport()
        report.errors.append(f"batch {batch.pk}: another sync is running; skipped")
        return report
    report = SyncReport()
    try:
        return _sync_batch(batch, lock, report)
    except LostLock as lost:
        report.errors.append(str(lost))
        logger.warning("%s", lost)
        return report
    finally:
        lock.release()


def _sync_batch(batch: Batch, lock: SyncLock, report: SyncReport) -> SyncReport:
    now = timezone.now()
    platform = for_batch(batch)
    for hit in batch.hit_rows.filter(hit_id__isnull=False):
        lock.keep()
        ours = {(a.assignment_id, a.worker.worker_id): a
                for a in hit.assignments.select_related("worker", "session", "hit")}
        try:
            for listed in platform.list_work(batch, hit):
                lock.keep()
                report.seen += 1
                # Only the work id under the worker id: the platform lists it as theirs, on this HIT.
                assignment = ours.get((listed.work_id, listed.worker_id))
                if assignment is not None and assignment.worker_confirmed_at is None:
                    confirm_worker(assignment)  # rule 0: its work joins the worker's account
                for (assignment_id, worker_id), other in ours.items():
                    if assignment_id == listed.work_id and worker_id != listed.worker_id \
                            and other.status == Assignment.Status.WORKING:
                        report.returned += _end(other, "This assignment went to another worker; "
                                                       "it takes no more work.")
                try:
                    _decide(batch, assignment, listed, report)
                except PlatformError as exc:
                    report.errors.append(f"{listed.work_id}: {exc}")
                    if not exc.retryable and exc.kind != "request":
                        raise
        except PlatformError as exc:
            report.errors.append(f"HIT {hit.hit_id}: {exc}")
            if exc.kind in ("throttled", "insufficient_funds"):
                break  # try again at the next sync
    lock.keep()
    report.returned += _mark_returned(batch, now)
    report.returned += _give_up_unconfirmed(batch, now, report, lock)
    if batch.quality_block_threshold is not None:
        report.task_blocked += quality_blocks(batch, report)
    if _finish_if_done(batch, now, report):
        report.finished_batches += 1
    Batch.objects.filter(pk=batch.pk).update(
        last_synced_at=now, last_error="; ".join(report.errors)[:2000] if report.errors else "")
    return report


def _mark_returned(batch: Batch, now) -> int:
    """Rule 4: work still open past its deadline was returned or abandoned. (A row
    finished on our page stays finished: MTurk may list its submission late.)"""
    count = 0
    late = Assignment.objects.select_related("session").filter(
        hit__batch=batch, status=Assignment.Status.WORKING, deadline__lte=now)
    for assignment in late:
        count += _end(assignment, "This assignment ended (it was returned or ran out of time).")
    return count


def _give_up_unconfirmed(batch: Batch, now, report: SyncReport, lock: SyncLock) -> int:
    """Rule 4 for work finished here that the platform never confirmed as its worker's:
    past its deadline it is asked about once more (``Platform.confirm_work``). Shown as that
    worker's, it is confirmed (the listing decides it); otherwise it was never handed in
    there (MTurk shows every submitted assignment; Prolific every submission) and ends as
    returned, so made-up ids neither keep the batch open nor its money committed."""
    platform, count = for_batch(batch), 0
    stale = Assignment.objects.select_related("hit", "worker", "session").filter(
        hit__batch=batch, status=Assignment.Status.FINISHED, worker_confirmed_at__isnull=True, deadline__lte=now)
    for assignment in stale:
        lock.keep()
        try:
            mine = platform.confirm_work(batch, assignment.hit, assignment.assignment_id, assignment.worker.worker_id)
        except PlatformError as exc:
            report.errors.append(f"{assignment.assignment_id}: {exc}")
            continue
        if mine:
            confirm_worker(assignment)
        elif _set_status(assignment, Assignment.Status.FINISHED, status=Assignment.Status.RETURNED):
            sessions.end_session(assignment.session, f"{platform.label} has no record of this work as yours; "
                                                     "it takes no more work.")
            count += 1
    return count


def _end(assignment: Assignment, reason: str) -> bool:
    """Mark a working row returned (compare-and-set); end its session only if this call did."""
    if not _set_status(assignment, Assignment.Status.WORKING, status=Assignment.Status.RETURNED):
        return False
    sessions.end_session(assignment.session, reason)
    return True


def quality_blocks(batch: Batch, report: SyncReport) -> int:
    """Rule 6, over the batch's MTurk-verified workers only, on the batch's task only: a
    writing batch blocks writers whose examples are validated correct too rarely; a
    validation batch blocks validators whose votes the reliability model weighs at
    next to nothing (``annotation.reliability.spammer_like``).

    From the batch's watermark (``Batch.quality_checked_until``; ``crowd.watermarks``):
    only the workers whose evidence changed since the last check are judged again
    (``workers.changed_since``), each from their own rows; the first check judges every
    worker of the batch. The new mark is taken before anything is read, and kept only
    when every block was given (a worker MTurk could not block yet is judged again)."""
    mark = timezone.now()
    since = watermarks.read_from(batch.quality_checked_until)
    candidates = WorkerIdentity.objects.filter(
        pk__in=Assignment.objects.filter(hit__batch=batch, verified_at__isnull=False).values("worker"),
        soft_blocked_at__isnull=True, hard_blocked_at__isnull=True).exclude(task_blocks__task=batch.task_id)
    validators = batch.mode == Batch.Mode.VALIDATE
    if since is None:
        groups = [candidates]
    else:
        changed = workers.changed_since(batch.task, since, validators=validators)
        groups = [candidates.filter(user_id__in=chunk) for chunk in watermarks.chunks(sorted(changed))]
    blocked = []
    for identities in groups:
        if validators:
            # Validators are judged by their votes: the reliability estimate's weight.
            blocked += [(identity, f"Validation votes on {batch.task.slug} carry next to no evidence (estimated "
                                   f"weight {weight:.2f} over {votes} votes: the same answer to everything, or "
                                   f"answers at random; batch {batch.pk}).")
                        for identity, weight, votes in workers.uninformative_validators(identities, batch.task)]
            flagged = {identity.pk for identity, _reason in blocked}
            blocked += [(identity, f"Validation decisions on {batch.task.slug} disagree with the researchers' own "
                                   f"answers on too many checked items (batch {batch.pk}).")
                        for identity in workers.failed_gold_validators(identities, batch.task)
                        if identity.pk not in flagged]
        else:
            blocked += [(identity, f"Examples of {batch.task.slug} validated correct less often than "
                                   f"{batch.quality_block_threshold:.0%} (batch {batch.pk}).")
                        for identity in workers.below_threshold(identities, batch.quality_block_threshold,
                                                                task=batch.task)]
    count, complete = 0, True
    for identity, reason in blocked:
        try:
            workers.task_block(identity, batch.task, reason, sandbox=batch.sandbox, batch=batch)
            count += 1
        except PlatformError as exc:
            complete = False
            report.errors.append(f"soft block {identity.worker_id}: {exc}")
    if complete:
        Batch.objects.filter(Q(quality_checked_until__isnull=True) | Q(quality_checked_until__lt=mark),
                             pk=batch.pk).update(quality_checked_until=mark)
        batch.quality_checked_until = mark
    return count


def _finish_if_done(batch: Batch, now, report: SyncReport) -> bool:
    if batch.status != Batch.Status.PUBLISHED:
        return False
    decided = Assignment.objects.filter(hit__batch=batch, status__in=[
        Assignment.Status.APPROVED, Assignment.Status.REJECTED]).count()
    # Only work the platform confirmed as its worker's holds the batch open: made-up ids do not.
    open_work = Assignment.objects.filter(hit__batch=batch, worker_confirmed_at__isnull=False, status__in=[
        Assignment.Status.WORKING, Assignment.Status.FINISHED, Assignment.Status.SUBMITTED]).exists()
    lifetime_over = batch.expires_at is not None and batch.expires_at <= now
    if open_work or not (lifetime_over or decided >= batch.hits * batch.assignments_per_hit):
        return False
    return expire_batch(batch, report)


def expire_batch(batch: Batch, report: SyncReport | None = None) -> bool:
    """Stop the batch's HITs taking workers, and mark it finished (work already taken goes on)."""
    for hit in batch.hit_rows.filter(hit_id__isnull=False, expired_at__isnull=True):
        try:
            for_batch(batch).close(batch, hit)
        except PlatformError as exc:
            if report is None:
                raise
            report.errors.append(f"expire {hit.hit_id}: {exc}")
            return False
        hit.expired_at = timezone.now()
        hit.save(update_fields=["expired_at"])
    Batch.objects.filter(pk=batch.pk).update(status=Batch.Status.FINISHED, finished_at=timezone.now())
    batch.refresh_from_db()
    return True


def batches_to_sync():
    """Batches being published or published, and finished ones whose submissions
    MTurk may still hold (``Batch.review_until``): a submission there is decided
    before MTurk's auto-approval, whatever state our rows are in."""
    now = timezone.now()
    live = list(Batch.objects.filter(status__in=[Batch.Status.PUBLISHING, Batch.Status.PUBLISHED]))
    finished = [b for b in Batch.objects.filter(status=Batch.Status.FINISHED)
                if b.review_until is not None and b.review_until > now]
    return sorted(live + finished, key=lambda b: b.pk)


def sync(batch_id: int | None = None) -> SyncReport:
    """Sync one batch, or every batch that may still have something to decide."""
    report = SyncReport()
    batches = Batch.objects.filter(pk=batch_id) if batch_id is not None else batches_to_sync()
    for batch in batches:
        try:
            report.add(sync_batch(batch))
        except PlatformError as exc:
            report.errors.append(f"batch {batch.pk}: {exc}")
            logger.warning("MTurk sync of batch %s failed: %s", batch.pk, exc)
    return report
