"""Onboarding on MTurk: the task's qualifications follow what the onboarding record says
(``annotation.onboarding``, which sends its signals once the record is stored).

- A worker who passes gets the task's *onboarded* qualification: a batch that
  ``require_onboarding`` shows its HITs only to them, and an onboarding-only batch
  only to workers without it.
- A worker who fails every try allowed is blocked on the task as the quality block
  does it (``workers.task_block``: the task's block qualification, and a ``TaskBlock``
  our HIT page refuses them by). Lifting that block lets them try again.

A site account (no MTurk identity) has nothing to give on MTurk. If MTurk cannot be
reached, the record still holds (our pages and the API go by it: a worker blocked
there is refused at the HIT's door, one who passed writes) and the error is logged;
``resync`` (run with every crowd sync) gives again what the records passed or blocked
since its last run say, so a call that failed is made again until it goes through.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.db.models import Q
from django.utils import timezone

from annotation.models import OnboardingRecord

from . import watermarks, workers
from .models import TaskBlock, WorkerIdentity
from .platforms import PlatformError, for_identity

log = logging.getLogger(__name__)

BLOCK_REASON = "Did not pass the task's onboarding within the tries allowed."


def _identity(user) -> WorkerIdentity | None:
    return WorkerIdentity.objects.filter(user=user).first()


def give_onboarded(task, identity: WorkerIdentity) -> None:
    for_identity(identity).mark_onboarded(identity, task, sandbox=identity.sandbox)


def block_failed(task, identity: WorkerIdentity) -> None:
    workers.task_block(identity, task, BLOCK_REASON, sandbox=identity.sandbox)


def on_passed(sender, task, user, **kwargs) -> None:
    identity = _identity(user)
    if identity is None:
        return
    try:
        give_onboarded(task, identity)
    except PlatformError as exc:
        log.warning("onboarding passed by %s on %s, but MTurk refused the qualification: %s",
                    identity.worker_id, task.slug, exc)


def on_blocked(sender, task, user, **kwargs) -> None:
    identity = _identity(user)
    if identity is None:
        return
    try:
        block_failed(task, identity)
    except PlatformError as exc:
        log.warning("onboarding failed by %s on %s, but MTurk refused the block qualification: %s",
                    identity.worker_id, task.slug, exc)


def on_reset(sender, task, user, by, **kwargs) -> None:
    """A researcher let the worker take the onboarding again: lift the task block that
    failing it gave (on the worker's platform and here). If the platform refuses, the block stays and says so in
    the log; it can be lifted by hand (Crowd > Task blocks)."""
    identity = _identity(user)
    block = TaskBlock.objects.filter(worker=identity, task=task, reason=BLOCK_REASON).first() if identity else None
    if block is None:
        return
    try:
        workers.task_unblock(block, by)
    except PlatformError as exc:
        log.warning("onboarding reset for %s on %s, but the platform refused to lift the block: %s",
                    identity.worker_id, task.slug, exc)


RESYNC_WATERMARK = "onboarding"
# The first run (no watermark yet) looks back this far: the signals gave what came before.
FIRST_LOOK_BACK = timedelta(days=1)


@dataclass
class ResyncReport:
    given: int = 0
    blocked: int = 0
    errors: list[str] = field(default_factory=list)

    def __str__(self):
        text = f"onboarding: {self.given} qualifications given again, {self.blocked} blocks given again"
        return text + (f"; {len(self.errors)} errors: " + "; ".join(self.errors) if self.errors else "")


def resync() -> ResyncReport:
    """Give again, on each worker's platform, what the onboarding records that passed or
    blocked since the last run say: the onboarded qualification, or the task's block.
    Both calls are idempotent there, so a pass the signal already gave costs one more call
    and one that failed is made again. The watermark moves only when every call went
    through: a failure is retried at the next run."""
    report = ResyncReport()
    mark = timezone.now()
    since = watermarks.read_from(watermarks.get(RESYNC_WATERMARK)) or mark - FIRST_LOOK_BACK
    # Read through the records' updated_at index (passing or blocking stamps it): what changed, not all.
    records = (OnboardingRecord.objects.filter(Q(passed_at__isnull=False) | Q(blocked_at__isnull=False),
                                               updated_at__gte=since, user__mturk_identity__isnull=False)
               .select_related("task", "user__mturk_identity").order_by("pk"))
    for record in records:
        identity = record.user.mturk_identity
        try:
            if record.passed_at is not None:
                give_onboarded(record.task, identity)
                report.given += 1
            elif record.blocked_at is not None:
                block_failed(record.task, identity)
                report.blocked += 1
        except PlatformError as exc:
            report.errors.append(f"{identity.worker_id} on {record.task.slug}: {exc}")
    if not report.errors:
        watermarks.advance(RESYNC_WATERMARK, mark)
    return report
