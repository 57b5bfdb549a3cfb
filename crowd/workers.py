"""MTurk workers: their platform accounts, blocks, messages and quality.

A worker's account is a platform user made for their identity on first sight, with no
usable password: workers reach the platform only through an assignment's signed
token (``core.backends`` refuses them a password sign-in and the admin is for staff
only). An arrival acts for that account only once the platform confirmed that the
assignment is the worker's; before that, it is a provisional identity with a user of
its own (``arrival_user``), whose work joins the account on confirmation.

- Soft block: our own qualification, which every batch's HIT type requires to be
  absent; MTurk then hides our HITs from the worker. The arrival page refuses a
  soft-blocked worker too (a server rule, not only MTurk's). It spans every
  task, so only superusers give it.
- Task block: the same, for one task only (``TaskBlock``; a qualification per
  task that the task's HIT types require absent). A batch's quality threshold
  gives it, so a researcher's threshold keeps a worker out of their own task's
  HITs and no other; the task's researchers may lift it.
- Hard block: ``CreateWorkerBlock``, the requester-wide block on MTurk.

Quality: a writer's record is their decided examples and how many were verified.
An example they retracted while it was heading for rejection (at least one counted
vote called it incorrect, and no more called it correct) stays in the record as a
rejection (``rejected_or_retracted``): retracting must not wash a bad example out.
``with_quality`` annotates a page of identities (the admin) from the rows;
``decided_counts`` reads the same record from the writers' counters
(``WriterCounts.record_decided``, kept by every save: the example rows' provisional
flag stands for MTurk's confirmation, which a worker's only sessions need);
``below_threshold`` and ``uninformative_validators`` judge a set of workers, each
from their own rows; ``changed_since`` says whose evidence changed since a
watermark, so that the sync judges only those (``crowd.sync.quality_blocks``).
"""

from __future__ import annotations

import re
import uuid

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.db.models import Count, IntegerField, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotation import counters, onboarding, reliability, trust
from annotation.models import Example, Validation, ValidatorReliability, WriterCounts
from core.errors import Forbidden
from tasks.models import Task
from tasks.roles import is_researcher

from .models import Assignment, TaskBlock, WorkerIdentity
from .platforms import by_name, for_identity
from .qualifications import block_qualification_id, onboarded_qualification_id  # noqa: F401  (re-exported)
from .watermarks import chunks

WORKER_ID = re.compile(r"A[A-Z0-9]{5,63}")
# Quality is judged only once this many of the worker's examples are decided.
QUALITY_MIN_DECIDED = 5


def is_worker_id(value: str) -> bool:
    return bool(WORKER_ID.fullmatch(value or ""))


def identity_for(worker_id: str, *, sandbox: bool, platform: str = "mturk") -> WorkerIdentity:
    """The worker's identity on ``platform``, created (provisional, with its own user) on first sight."""
    found = WorkerIdentity.objects.select_related("user").filter(platform=platform, worker_id=worker_id)
    identity = found.first()
    if identity is not None:
        return identity
    User = get_user_model()
    try:
        with transaction.atomic():
            # ':' is refused in the usernames people sign up with: no one can take a worker's name.
            user = User(username=f"{platform}:{worker_id}"[:150])
            user.set_unusable_password()
            user.save()
            return WorkerIdentity.objects.create(user=user, platform=platform, worker_id=worker_id, sandbox=sandbox)
    except IntegrityError:  # the same worker, arriving twice at once: the first one made it
        return found.get()


def arrival_user(identity: WorkerIdentity):
    """A user of its own for one arrival under ``identity``'s worker id that the platform has
    not confirmed as the worker's: the arrival's provisional identity. It reaches nothing of
    the worker's account until the platform confirms the assignment, and then its work joins
    the account (``crowd.assignments.confirm_worker``). No password; its name, with ':' in it,
    is one no one can sign up with."""
    user = get_user_model()(username=f"{identity.platform}:{identity.worker_id}:unconfirmed:{uuid.uuid4().hex[:12]}")
    user.set_unusable_password()
    user.save()
    return user


def _where(sandbox: bool | None) -> bool:
    return settings.MTURK_SANDBOX if sandbox is None else sandbox


def soft_block(identity: WorkerIdentity, reason: str, *, sandbox: bool | None = None) -> None:
    """Keep the worker out of every batch of ours on their platform (MTurk: our block
    qualification on the sandbox or live site, default ``MTURK_SANDBOX``'s); our pages
    refuse them everywhere."""
    for_identity(identity).block_everywhere(identity, reason, sandbox=_where(sandbox))
    WorkerIdentity.objects.filter(pk=identity.pk).update(soft_blocked_at=timezone.now(), block_reason=reason[:500])


def soft_unblock(identity: WorkerIdentity, *, sandbox: bool | None = None) -> None:
    for_identity(identity).unblock_everywhere(identity, sandbox=_where(sandbox))
    WorkerIdentity.objects.filter(pk=identity.pk).update(soft_blocked_at=None)


def hard_block(identity: WorkerIdentity, reason: str, *, sandbox: bool | None = None) -> None:
    if not reason:
        raise ValueError("MTurk needs a reason to block a worker.")
    for_identity(identity).block_account(identity, reason, sandbox=_where(sandbox))
    WorkerIdentity.objects.filter(pk=identity.pk).update(hard_blocked_at=timezone.now(), block_reason=reason[:500])


def hard_unblock(identity: WorkerIdentity, *, sandbox: bool | None = None) -> None:
    for_identity(identity).unblock_account(identity, sandbox=_where(sandbox))
    WorkerIdentity.objects.filter(pk=identity.pk).update(hard_blocked_at=None)


def is_blocked_on(identity: WorkerIdentity, task: Task) -> bool:
    return TaskBlock.objects.filter(worker=identity, task=task).exists()


def task_block(identity: WorkerIdentity, task: Task, reason: str, *, sandbox: bool | None = None,
               batch=None) -> TaskBlock:
    """Keep the worker out of ``task``'s batches only: on their platform where it can
    (MTurk: the task's block qualification), and a ``TaskBlock`` our pages refuse them by."""
    sandbox = _where(sandbox)
    for_identity(identity).block_on_task(identity, task, reason, sandbox=sandbox)
    block, _ = TaskBlock.objects.update_or_create(
        worker=identity, task=task,
        defaults={"sandbox": sandbox, "batch": batch, "reason": reason[:500], "blocked_at": timezone.now()})
    return block


def task_unblock(block: TaskBlock, user) -> None:
    """Lift a task block: the task's researchers (or a superuser) only."""
    if not is_researcher(user, block.task):
        raise Forbidden("Only the task's researchers lift its blocks.")
    for_identity(block.worker).unblock_on_task(block.worker, block.task, sandbox=block.sandbox)
    block.delete()
    onboarding.reset(block.task, block.worker.user)  # blocked for failed onboarding tries: they may try again


def notify(identities, subject: str, message: str, *, sandbox: bool | None = None) -> list[dict]:
    """Message workers through their platform; the failures it reports."""
    identities = list(identities)
    failures = []
    for name in sorted({identity.platform for identity in identities}):
        ids = [identity.worker_id for identity in identities if identity.platform == name]
        failures += by_name(name).notify(ids, subject, message, sandbox=_where(sandbox))
    return failures


def rejected_or_retracted() -> Q:
    """Examples that count against their writer: rejected ones, and those the writer
    retracted while heading for rejection (undecided, at least one counted "incorrect"
    vote and no more "correct" ones). A retracted example whose votes so far agreed with
    the writer (or that had none) leaves the record."""
    return counters.against_writer_q()


def decided_in_record() -> Q:
    """The examples a writer's quality is judged on: verified, and ``rejected_or_retracted``."""
    return counters.in_record_q()


def _count(queryset):
    """A correlated count of ``queryset``'s rows, 0 when there are none."""
    counted = queryset.order_by().annotate(group=Value(1)).values("group").annotate(n=Count("pk")).values("n")[:1]
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def with_quality(identities, task: Task | None = None):
    """``identities`` annotated with the worker's quality (on ``task`` only, if given):
    ``decided`` examples of theirs and how many of them were ``verified``; ``judged``
    validations of theirs on decided examples and how many ``agreeing`` with the final
    decision."""
    # Only work from assignments MTurk confirmed: a worker id typed into a URL must not
    # spoil a real worker's record (nor earn them a block).
    examples = Example.objects.filter(annotator=OuterRef("user"), source=Example.Source.ANNOTATION,
                                      session__mturk_assignment__verified_at__isnull=False)
    judged = Validation.objects.filter(validator=OuterRef("user"), label__in=["correct", "incorrect"],
                                       example__validation_status__in=["verified", "rejected"],
                                       session__mturk_assignment__verified_at__isnull=False)
    if task is not None:
        examples, judged = examples.filter(task=task), judged.filter(example__task=task)
    return identities.annotate(
        decided=_count(examples.filter(decided_in_record())),
        verified=_count(examples.filter(validation_status="verified")),
        judged=_count(judged),
        agreeing=_count(judged.filter(Q(label="correct", example__validation_status="verified")
                                      | Q(label="incorrect", example__validation_status="rejected"))),
    )


def correct_share(identity) -> float | None:
    """The share of the worker's decided examples validated correct (annotated identities)."""
    return identity.verified / identity.decided if identity.decided else None


def agreement(identity) -> float | None:
    """How often the worker's validations agreed with the final decision (annotated identities)."""
    return identity.agreeing / identity.judged if identity.judged else None


def changed_since(task: Task, since, *, validators: bool = False) -> set[int]:
    """The users whose quality evidence on ``task`` may have changed since ``since``: as
    writers, the authors of the task's examples stamped since (a decision, a flag, a
    retraction); as validators, those whose reliability estimate was refitted since;
    either way, the workers with an assignment on the task that MTurk confirmed since
    (their work counts from then on) or confirmed as theirs since (a provisional arrival's
    work, gold answers among it, joined their account), and validators who answered gold
    items since. Read
    through indexes on the stamps, so it costs what changed, not the task's history."""
    # Every task's confirmations since (few), its own picked here: a filter on the task
    # in the query could lead the planner through all of the task's assignments.
    confirmed = {user for stamp in ("verified_at", "worker_confirmed_at")  # two index reads, not an OR
                 for user, task_id in Assignment.objects.filter(**{f"{stamp}__gte": since}).order_by()
                 .values_list("worker__user_id", "hit__batch__task_id") if task_id == task.pk}
    if validators:
        refitted = ValidatorReliability.objects.filter(task=task, fitted_at__gte=since).order_by()
        on_gold = Validation.objects.filter(task=task, gold_agrees__isnull=False, decided_at__gte=since).order_by()
        return (confirmed | set(refitted.values_list("validator_id", flat=True))
                | set(on_gold.values_list("validator_id", flat=True)))
    written = (Example.objects.filter(task=task, updated_at__gte=since, source=Example.Source.ANNOTATION,
                                      annotator__isnull=False)
               .order_by().values_list("annotator_id", flat=True).distinct())
    return confirmed | set(written)


def decided_counts(user_ids, task: Task | None = None) -> dict[int, tuple[int, int]]:
    """For each of ``user_ids``: (decided, verified), their record on ``task`` (on every
    task, if none): their confirmed examples that are decided (``decided_in_record``: a
    retraction on the way to a rejection counts as one), and how many of those were
    verified. Read from the writers' counters (``WriterCounts``, a row per round), kept by
    every save: the check costs the writers it reads, not their history."""
    counts = {}
    for chunk in chunks(user_ids):
        rows = WriterCounts.objects.filter(annotator_id__in=chunk)
        if task is not None:
            rows = rows.filter(round__task=task)
        counts.update({row["annotator_id"]: (row["decided"], row["verified"])
                       for row in rows.order_by().values("annotator_id")
                       .annotate(decided=Sum("record_decided"), verified=Sum("record_verified"))})
    return counts


def uninformative_validators(identities, task: Task) -> list[tuple[WorkerIdentity, float, int]]:
    """Those of ``identities`` (a queryset) whose validation votes on ``task`` carry next
    to no evidence by the reliability model, with their weight and vote count (two
    queries: those identities' estimates, then the identities)."""
    rows = {row.validator_id: row
            for row in reliability.spammer_like(task).filter(validator_id__in=identities.values("user_id"))}
    if not rows:
        return []
    return [(identity, rows[identity.user_id].weight, rows[identity.user_id].votes)
            for identity in identities.filter(user_id__in=list(rows))]


def failed_gold_validators(identities, task: Task) -> list[WorkerIdentity]:
    """Those of ``identities`` (a queryset: the sync's chunk of workers whose evidence
    changed) who failed ``task``'s checks (``trust.failed_gold``: gold items and
    researchers' decisions, flags included), one query each."""
    return [identity for identity in identities.select_related("user") if trust.failed_gold(task, identity.user)]


def below_threshold(identities, threshold: float, task: Task | None = None) -> list[WorkerIdentity]:
    """Those of ``identities`` whose verified examples (of ``task``, if given), once
    ``QUALITY_MIN_DECIDED`` are decided, are validated correct less often than
    ``threshold``; each counted from their own examples (``decided_counts``)."""
    identities = list(identities)
    counts = decided_counts([identity.user_id for identity in identities], task)
    below = []
    for identity in identities:
        decided, verified = counts.get(identity.user_id, (0, 0))
        if decided >= QUALITY_MIN_DECIDED and verified / decided < threshold:
            below.append(identity)
    return below
