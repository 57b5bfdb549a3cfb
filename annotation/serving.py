"""Serving validators: which example a validator is served next, and the claims that
bind their answers to what was served.

Validators are assigned, not self-chosen: a blind answer or a decision is accepted
only on an example the queue served to that validator (``next_for``, a
``ValidationClaim`` that expires after ``VALIDATION_CLAIM_SECONDS``); any other id
gets 409 ``not_assigned`` (``check_assigned``). The task's researchers are the
exception: they may decide any example. What is served is drawn at random among the
queue's most urgent examples (``draw_from_queue``), and asking again serves the same
one while its claim lasts (``held_claim``): accounts that ask at the same moment do
not land on one example together, and a script cannot ask until the gold item or the
example it wants comes up. Answering and deciding are ``validation``'s.
"""

from __future__ import annotations

import random
from datetime import timedelta

from django.conf import settings
from django.db.models import FilteredRelation, Q
from django.utils import timezone

from core.errors import Conflict
from tasks.models import Task
from tasks.roles import is_researcher

from . import gold, reliability, trust
from .models import QUEUE_STEP, Example, Validation, ValidationClaim

# Where the queue's draws come from (and the gold draw's): not predictable from outside.
_draws = random.SystemRandom()


def validation_queue(task: Task, user):
    """Examples ``user`` may validate, most urgent first: model-fooling ones first, then
    those with the fewest validations (on an adaptive task, for a validator whose
    reliability is known: those closest to a decision), the oldest first among equals
    (``Example.queue_priorities``); the queue serves one drawn among the first of them
    (``draw_from_queue``).
    Never their own, never retracted, flagged or decided ones, never twice, never one
    from an MTurk assignment that MTurk has not confirmed yet: exactly those have a
    queue priority. The next item is read from the first entries of a partial index on
    it, not a sort of the task's pending examples. (Those they answered blind and have
    not decided yet, and the one they hold a claim on, come before all of these:
    ``next_for``.)"""
    known = task.parsed_config.adaptive_validation and reliability.is_known(task, user)
    priority = "queue_priority_adaptive" if known else "queue_priority"
    return (
        Example.objects.filter(task=task, **{f"{priority}__isnull": False})
        # Their own validation of each walked example, by a join on its unique key: left
        # out when they decided it (an undecided blind answer stays in).
        .annotate(mine=FilteredRelation("validations", condition=Q(validations__validator=user)))
        .filter(Q(mine__isnull=True) | Q(mine__label=""))
        .exclude(annotator=user)
        .exclude(annotator__in=trust.same_person(user))  # accounts at the writer's address count as the writer
        .select_related("context", "round", "task")
        .order_by(priority, "pk")
    )


QUEUE_PAGE = 50  # entries of the queue's index read at a time, and the most urgent a draw is among


def _kind(example: Example, priority: str) -> int:
    """The example's rank in the queue's first key: model-fooling, not fooling, no model."""
    place = getattr(example, priority)
    return place // QUEUE_STEP // (QUEUE_STEP if priority == "queue_priority_adaptive" else 1)


def draw_from_queue(task: Task, user, rng: random.Random | None = None) -> Example | None:
    """An example of ``validation_queue(task, user)``, drawn at random among the first
    ``QUEUE_PAGE`` that ``user`` has not decided, of the kind the queue serves first
    (model-fooling ones while any wait for them). The queue's partial index is walked a
    page at a time (not the validator's nor their accounts' examples), with no join to
    their validations (given that, a planner may read and sort every waiting example);
    one small read per page leaves out what they decided.

    At random, so that the queue's head is nobody's to predict: three accounts that ask
    at the same moment land on three examples, not together on one."""
    rng = rng or _draws
    known = task.parsed_config.adaptive_validation and reliability.is_known(task, user)
    priority = "queue_priority_adaptive" if known else "queue_priority"
    walk = (Example.objects.filter(task=task, **{f"{priority}__isnull": False})
            .exclude(annotator=user).exclude(annotator__in=trust.same_person(user))
            .select_related("context", "round", "task").order_by(priority, "pk"))
    after = None
    while True:
        page = walk if after is None else walk.filter(
            Q(**{f"{priority}__gt": getattr(after, priority)}) | Q(**{priority: getattr(after, priority),
                                                                     "pk__gt": after.pk}))
        rows = list(page[:QUEUE_PAGE])
        decided = set(Validation.objects.filter(validator=user, example_id__in=[e.pk for e in rows])
                      .exclude(label="").order_by().values_list("example_id", flat=True)) if rows else set()
        waiting = [example for example in rows if example.pk not in decided]
        if waiting:
            first_kind = _kind(waiting[0], priority)
            return rng.choice([example for example in waiting if _kind(example, priority) == first_kind])
        if len(rows) < QUEUE_PAGE:
            return None
        after = rows[-1]


def held_claim(task: Task, user) -> Example | None:
    """The example the queue served ``user`` on ``task`` and they have not answered, while
    the claim lasts and it still waits (a gold item, or in the queue): asking again
    serves it again, so drawing anew costs ``VALIDATION_CLAIM_SECONDS`` of waiting.
    One read of their live claims, newest first, joined to their own validation of each
    example on its unique key (left out when there is one)."""
    claim = (ValidationClaim.objects.filter(validator=user, expires_at__gt=timezone.now(), example__task=task)
             .filter(Q(example__queue_priority__isnull=False)
                     | (~Q(example__gold_verdict="") & Q(example__retracted=False)))
             .annotate(mine=FilteredRelation("example__validations",
                                             condition=Q(example__validations__validator=user)))
             .filter(mine__isnull=True)
             .exclude(example__annotator__in=trust.same_person(user))
             .select_related("example__context", "example__round", "example__task")
             .order_by("-expires_at", "-pk").first())
    return claim.example if claim is not None else None


STARTED_MOST = 100  # a validator's undecided blind answers read at once (usually none or one)


def started_for(task: Task, user):
    """The examples of ``task`` that ``user`` answered blind and has not decided yet,
    still waiting for validation (their own unanswered validations: a few rows). Their
    ids come first from the partial index of undecided validations: handed the whole
    filter, SQLite (which keeps no statistics here) walked all of the task's examples."""
    undecided = list(Validation.objects.filter(validator=user, label="").order_by()
                     .values_list("pk", flat=True)[:STARTED_MOST])
    return (Validation.objects.filter(Q(example__queue_priority__isnull=False) | ~Q(example__gold_verdict=""),
                                      pk__in=undecided, example__task=task)
            .exclude(example__annotator__in=trust.same_person(user))
            .select_related("example__context", "example__round", "example__task")
            .order_by("example__queue_priority", "example_id"))


class NotAssigned(Conflict):
    """A blind answer or a decision on an example the queue did not serve to the caller."""

    code = "not_assigned"


def assign(example: Example, user) -> ValidationClaim:
    """Serve ``example`` to ``user``: theirs to answer and decide until the claim expires
    (a claim served again is renewed)."""
    expires = timezone.now() + timedelta(seconds=settings.VALIDATION_CLAIM_SECONDS)
    [claim] = ValidationClaim.objects.bulk_create(  # one upsert: the queue answers on every "next"
        [ValidationClaim(example=example, validator=user, expires_at=expires)],
        update_conflicts=True, unique_fields=["example", "validator"], update_fields=["expires_at"])
    return claim


def next_for(task: Task, user) -> Example | None:
    """The next example for ``user``, assigned to them (the claim renewed): one they
    answered blind and have not decided yet, else the one they were served and have not
    answered (``held_claim``), else a gold item at the task's rate (``gold.pick``), else a
    draw from the queue (``draw_from_queue``). It carries ``my_blind_answer`` (their
    stored blind answer, or None)."""
    started = started_for(task, user).first()
    if started is not None:
        example, example.my_blind_answer = started.example, started.blind_answer
    else:
        example = held_claim(task, user) or gold.pick(task, user, _draws) or draw_from_queue(task, user)
        if example is None:
            return None
        example.my_blind_answer = None
    assign(example, user)
    return example


def check_assigned(example: Example, user, *, answered: bool) -> None:
    """NotAssigned unless the queue served ``example`` to ``user`` and the claim is live.
    ``answered``: they gave their blind answer under a claim already, which stands."""
    if answered or is_researcher(user, example.task):
        return
    if not ValidationClaim.objects.filter(example=example, validator=user, expires_at__gt=timezone.now()).exists():
        raise NotAssigned(
            "This example was not served to you by the validation queue, or your claim on it expired: "
            f"GET /api/tasks/{example.task.slug}/validations/next/ for the next one that is yours to validate.")
