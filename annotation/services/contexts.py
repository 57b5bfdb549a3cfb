"""Which context an annotator writes about next."""

from __future__ import annotations

import random

from django.db import transaction
from django.db.models import F, Q

from core.errors import Conflict, NotFound
from tasks.models import Context, Round, Task

from ..models import AnnotationSession


def open_round_or_error(task: Task) -> Round:
    rnd = task.open_round()
    if rnd is None:
        raise Conflict(f"Task {task.slug} has no open round: collection is closed.")
    return rnd


def usable_contexts(task: Task, rnd: Round):
    """The task's active contexts for ``rnd``: its own, and those for every round."""
    return Context.objects.filter(task=task, is_active=True).filter(Q(round__isnull=True) | Q(round=rnd))


def next_context(task: Task, session: AnnotationSession) -> Context:
    """A context by the task's sampling strategy, never the one served last (unless
    it is the only one). Sets ``round_number`` on it: the round it is served for."""
    rnd = open_round_or_error(task)
    candidates = usable_contexts(task, rnd)
    strategy = task.parsed_config.context_sampling
    if strategy == "uniform":
        if session.last_context_id:
            others = candidates.exclude(pk=session.last_context_id)
            if others.exists():
                candidates = others
        count = candidates.count()
        context = candidates.order_by("pk")[random.randrange(count)] if count else None
    else:
        order = ["times_fooled", "times_used"] if strategy == "least_fooled" else ["times_used"]
        # The 21 least used hold the 20 least used other than the last served one; that
        # one stays only when it is the only context there is. Ranked on the counters
        # alone (no texts decoded), then the chosen context is read whole.
        context = None
        for _ in range(3):  # again if the chosen one was deactivated or deleted meanwhile
            ranked = list(candidates.order_by(*order, "pk").values_list("pk", *order)[:21])
            pool = [row for row in ranked if row[0] != session.last_context_id] or ranked
            pool = pool[:20]
            if not pool:
                break
            # Among the ties for the least, pick at random so annotators spread out.
            pk = random.choice([row for row in pool if row[1:] == pool[0][1:]])[0]
            context = candidates.filter(pk=pk).first()
            if context is not None:
                break
    if context is None:
        raise NotFound(f"Task {task.slug} has no contexts for round {rnd.number}.")
    with transaction.atomic():
        Context.objects.filter(pk=context.pk).update(times_used=F("times_used") + 1)
        AnnotationSession.objects.filter(pk=session.pk).update(last_context=context)
    session.last_context = context
    context.times_used += 1
    context.round_number = rnd.number
    return context
