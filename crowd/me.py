"""A worker's own page (``/me/``, ``GET /api/me/``, and inside a HIT under its token):
what they wrote and what became of it, their votes and whether they counted, their
HITs and what they were paid, and their standing on each task.

Everything is read for one user, the caller: no id from the request chooses whose
rows are read. Inside an assignment the platform has not confirmed as the worker's, the
caller is that arrival's provisional identity (``crowd.assignments``): the page shows
its own work only, says so (``unconfirmed``), and nothing of the account of the worker
whose id the link named; a worker's own page lists only the assignments confirmed as
theirs. Each list is paged (``PAGE_SIZE`` rows, newest first, one query of at
most a page and one row more, so a worker with a long history costs a page, not the
history). The reasons come from the services that made the decisions: the status
of an example from its stored fields, why a vote does not count from what
``annotation.trust`` stored and explains, the pay from the bonus ledger,
the blocks from ``crowd.workers``' rows. This module lives in ``crowd`` because the
HITs and the ledger are the crowd's; the annotation side it reads lies below it.

``standing[].onboarding`` is whether the worker passed the task's onboarding
(``annotation.onboarding``), None where the task asks for none or the worker is
one of its researchers (never asked to take it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal

from django.db.models import Exists, OuterRef, Q, Sum

from annotation import onboarding, trust
from annotation.models import Example, OnboardingRecord, Validation
from core.errors import InvalidInput
from core.pagination import whole_number
from tasks.models import Task
from tasks.roles import is_researcher

from . import workers
from .models import Assignment, BonusPayment, TaskBlock, WorkerIdentity
from .platforms import by_name

PAGE_SIZE = 20
MAX_PAGE = 100_000
SNIPPET = 160
SECTIONS = ("examples", "validations", "assignments")
ZERO = Decimal("0.00")


@dataclass
class Page:
    number: int
    rows: list = field(default_factory=list)
    has_next: bool = False

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def page_number(value, section: str) -> int:
    """A section's page from the query string: a whole number from 1 (400 otherwise)."""
    if value in (None, ""):
        return 1
    number = whole_number(str(value), MAX_PAGE)
    if number is None:
        raise InvalidInput({f"{section}_page": [f"Must be a whole number from 1 to {MAX_PAGE}."]},
                           message=f"{section}_page must be a whole number from 1 to {MAX_PAGE}.")
    return number


def _page(queryset, number: int, size: int) -> tuple[list, bool]:
    start = (number - 1) * size
    rows = list(queryset[start:start + size + 1])
    return rows[:size], len(rows) > size


def example_status(example: Example) -> str:
    """pending, verified, rejected, flagged or retracted, from the example's own fields:
    a retraction first, then a flag (by a validator, or the decision), then the decision;
    an escalated example waits for a researcher, so it is pending."""
    if example.retracted:
        return "retracted"
    status = example.validation_status
    if example.flagged or status == Example.ValidationStatus.FLAGGED:
        return "flagged"
    if status in (Example.ValidationStatus.VERIFIED, Example.ValidationStatus.REJECTED):
        return status
    return "pending"


def _snippet(inputs) -> str:
    if isinstance(inputs, dict):
        text = " / ".join(str(value) for value in inputs.values())
    else:
        text = str(inputs)
    return text if len(text) <= SNIPPET else text[:SNIPPET - 1] + "…"


def examples_page(user, number: int = 1, size: int = PAGE_SIZE) -> Page:
    rows, more = _page(Example.objects.filter(annotator=user).select_related("task", "round")
                       .only("id", "inputs", "target", "fooled", "retracted", "flagged", "validation_status",
                             "provisional", "created_at", "validations_correct", "validations_incorrect",
                             "task__slug", "task__name", "round__number").order_by("-id"), number, size)
    return Page(number, [{
        "id": e.pk, "task": e.task.slug, "task_name": e.task.name, "round": e.round.number,
        "text": _snippet(e.inputs), "status": example_status(e), "fooled_model": e.fooled,
        "provisional": e.provisional, "votes_correct": e.validations_correct,
        "votes_incorrect": e.validations_incorrect, "created_at": e.created_at} for e in rows], more)


def validations_page(user, number: int = 1, size: int = PAGE_SIZE) -> Page:
    rows, more = _page(Validation.objects.filter(validator=user)
                       .select_related("example__task", "validator").order_by("-id"), number, size)
    why = trust.reasons(rows)
    return Page(number, [{
        "id": v.pk, "example": v.example_id, "task": v.example.task.slug, "task_name": v.example.task.name,
        "decision": v.label or None, "counted": bool(v.label) and not why[v.pk][0],
        "not_counted_because": why[v.pk][0] or None, "explanation": why[v.pk][1],
        "created_at": v.created_at} for v in rows], more)


def own_assignments(user, *, worker: bool | None = None):
    """The assignments whose work is ``user``'s: for a worker's account, those of their
    identity the platform confirmed as theirs (a made-up assignment under their id is not
    theirs); for an arrival's provisional identity, its own one. ``worker``: whether
    ``user`` has a worker identity, when the caller knows."""
    if worker is None:
        worker = WorkerIdentity.objects.filter(user=user).exists()
    if worker:
        return Assignment.objects.filter(worker__user=user, worker_confirmed_at__isnull=False)
    return Assignment.objects.filter(session__user=user)


def unconfirmed_arrival(user) -> Assignment | None:
    """The assignment ``user`` is the provisional identity of (an arrival its platform has not
    confirmed as the worker's yet), or None."""
    return (Assignment.objects.select_related("hit__batch", "worker")
            .filter(session__user=user, worker_confirmed_at__isnull=True).first())


def assignments_page(user, number: int = 1, size: int = PAGE_SIZE, *, worker: bool | None = None) -> Page:
    paid = Q(bonuses__status=BonusPayment.Status.PAID)
    owed = Q(bonuses__status__in=[BonusPayment.Status.PENDING, BonusPayment.Status.FAILED,
                                  BonusPayment.Status.GAVE_UP])
    queryset = (own_assignments(user, worker=worker)
                .select_related("hit__batch__task", "hit__batch__round")
                .annotate(bonus_paid=Sum("bonuses__amount", filter=paid), bonus_due=Sum("bonuses__amount", filter=owed))
                .order_by("-accepted_at", "-id"))
    rows, more = _page(queryset, number, size)
    settled = set(BonusPayment.objects.filter(assignment__in=[a.pk for a in rows]).values_list("assignment_id",
                                                                                                flat=True))
    found = []
    for a in rows:
        batch = a.hit.batch
        if a.status == Assignment.Status.APPROVED:
            reward_status = "paid"
        elif a.status == Assignment.Status.REJECTED:
            reward_status = "rejected"
        elif a.status == Assignment.Status.RETURNED:
            reward_status = "returned"
        else:
            reward_status = "due"  # working, finished or submitted: MTurk decides (at the latest auto-approval)
        found.append({
            "assignment_id": a.assignment_id, "task": batch.task.slug, "task_name": batch.task.name,
            "round": batch.round.number, "mode": batch.mode, "sandbox": batch.sandbox, "status": a.status,
            "reward": batch.reward, "reward_status": reward_status, "currency": batch.currency,
            "bonus_per_example": batch.bonus_per_example,
            "bonus_due": a.bonus_due or ZERO, "bonus_paid": a.bonus_paid or ZERO,
            "bonus_settled": a.pk in settled,
            "bonus_held": a.pk not in settled and a.bonus_held_since is not None, "accepted_at": a.accepted_at,
            "submitted_at": a.submitted_at or a.finished_at, "feedback": a.feedback})
    return Page(number, found, more)


def _tasks_of(user, worker: bool):
    return (Task.objects.filter(
        Exists(Example.objects.filter(annotator=user, task=OuterRef("pk")))
        | Exists(Validation.objects.filter(validator=user, task=OuterRef("pk")))
        | Exists(own_assignments(user, worker=worker).filter(hit__batch__task=OuterRef("pk")))
        | Exists(OnboardingRecord.objects.filter(user=user, task=OuterRef("pk"))))
        .order_by("slug"))


def standing(user, arrival: Assignment | None = None) -> list[dict]:
    """The user's standing on each task they worked on: their writing record (decided,
    verified, the share), whether their votes count there and why not, and any block
    (on every task, or on this one) with its reason; a task whose onboarding they only
    took is listed too. ``arrival``: the assignment ``user`` is the provisional identity
    of (``unconfirmed_arrival``): its own record only, nothing of the worker's."""
    identity = WorkerIdentity.objects.filter(user=user).first()
    blocks = {}
    if identity is not None:
        blocks = {b.task_id: b for b in TaskBlock.objects.filter(worker=identity)}
    unverified = trust.email_unverified(user)
    too_new = trust.account_too_new(user) and identity is None
    passed, failed_onboarding = onboarding.passed_task_ids(user), onboarding.blocked_task_ids(user)
    rows = []
    platform = by_name(arrival.hit.batch.platform) if arrival is not None else None
    for task in _tasks_of(user, identity is not None):
        decided, verified = workers.decided_counts([user.pk], task).get(user.pk, (0, 0))
        record = trust.standing(task, user)
        researcher = is_researcher(user, task)
        failed = not researcher and trust.failed_gold(task, user)
        if researcher:
            votes = "Your decisions count: you are a researcher of this task."
        elif failed:
            votes = "Your decisions no longer count on this task: too many disagreed with the checked items."
        elif identity is not None:
            votes = "Your decisions in validation HITs count once MTurk confirms the assignment."
        elif platform is not None:
            votes = (f"Your decisions here count once {platform.label} confirms this {platform.work_name} as yours "
                     "and your work is handed in.")
        elif unverified:
            votes = "Your decisions do not count until you confirm your e-mail address."
        elif too_new:
            votes = f"Your decisions count once your account is {trust.min_account_age_text()} old."
        elif record.trusted:
            votes = f"Your decisions count: {record.describe()}."
        else:
            votes = f"Your decisions are stored but do not decide examples yet: {record.describe()}."
        blocked, why = False, ""
        if identity is not None and identity.hard_blocked_at:
            blocked, why = True, identity.block_reason or "Blocked from all of our HITs."
        elif identity is not None and identity.soft_blocked_at:
            blocked, why = True, identity.block_reason or "Not admitted to our HITs on any task."
        elif task.pk in blocks:
            blocked, why = True, blocks[task.pk].reason
        elif task.pk in failed_onboarding and task.parsed_config.onboarding and not researcher:
            blocked, why = True, onboarding.blocked_message(task)
        rows.append({
            "task": task.slug, "task_name": task.name,
            "onboarding": (task.pk in passed) if task.parsed_config.onboarding and not researcher else None,
            "examples_decided": decided, "examples_verified": verified,
            "quality": round(verified / decided, 3) if decided else None,
            "quality_judged": decided >= workers.QUALITY_MIN_DECIDED,
            "votes_count": researcher or (not failed and platform is None and (identity is not None or (
                not unverified and not too_new and record.trusted))),
            "votes": votes, "blocked": blocked, "blocked_because": why})
    return rows


def worker_page(user, pages: dict | None = None, size: int = PAGE_SIZE) -> dict:
    """All of it for ``user``; ``pages`` maps a section to its page number."""
    pages = pages or {}
    identity = WorkerIdentity.objects.filter(user=user).only("worker_id", "platform").first()
    arrival = None if identity is not None else unconfirmed_arrival(user)
    note, platform = "", None
    if identity is not None:
        platform = by_name(identity.platform)
    if arrival is not None:
        platform = by_name(arrival.hit.batch.platform)
        note = (f"{platform.label} has not confirmed this {platform.work_name} as yours yet, so this page shows "
                f"its own work only. Once {platform.label} confirms it, this work joins your account and your "
                "page shows all of it.")
    return {
        # A provisional identity's own name is internal (the worker id, a suffix of its own): the
        # worker is shown the id their link gave, which the page says is not confirmed yet.
        "username": f"{arrival.worker.worker_id}, not confirmed yet" if arrival is not None else user.get_username(),
        "mturk_worker": identity is not None or arrival is not None,
        "platform_label": platform.label if platform is not None else "",
        "unconfirmed": arrival is not None, "unconfirmed_note": note,
        "email_verified": not trust.email_unverified(user),
        "examples": examples_page(user, pages.get("examples", 1), size),
        "validations": validations_page(user, pages.get("validations", 1), size),
        "assignments": assignments_page(user, pages.get("assignments", 1), size, worker=identity is not None),
        "standing": standing(user, arrival)}
