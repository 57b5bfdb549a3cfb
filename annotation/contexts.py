"""Which context an annotator writes about next."""

from __future__ import annotations

import random

from django.db import transaction
from django.db.models import F, Q, Subquery

from core.errors import Conflict, NotFound
from tasks.models import Context, Round, Task

from .models import AnnotationSession


def open_round_or_error(task: Task) -> Round:
    rnd = task.open_round()
    if rnd is None:
        raise Conflict(f"Task {task.slug} has no open round: collection is closed.")
    return rnd


def servable_contexts(task: Task):
    """The task's active contexts for its open round, each annotated with that round's
    ``round_number``. The round is found in the same query (a subquery), so serving a
    context reads the database once. When no round is open every row's ``round_number``
    is None: the subquery answers the same for every row, so the caller checks the row
    it chose (``next_context``) instead of filtering on it, which would put the subquery
    in the WHERE clause too and cost compiling it twice on every serving."""
    open_rounds = Round.objects.filter(task=task, status=Round.Status.OPEN).order_by("pk")
    return (Context.objects.filter(task=task, is_active=True)
            .filter(Q(round__isnull=True) | Q(round__status=Round.Status.OPEN))
            .annotate(round_number=Subquery(open_rounds.values("number")[:1])))


def _pick_least(ranked: list[Context], order: list[str], last_served: int | None) -> Context | None:
    """Among the 20 least used other than the one served last (that one only when it
    is the only context there is), one of the ties for the least, at random, so
    annotators spread out."""
    pool = [c for c in ranked if c.pk != last_served] or ranked
    pool = pool[:20]
    if not pool:
        return None
    least = [getattr(pool[0], name) for name in order]
    return random.choice([c for c in pool if [getattr(c, name) for name in order] == least])


def next_context(task: Task, session: AnnotationSession) -> Context:
    """A context by the task's sampling strategy, never the one served last (unless
    it is the only one). Sets ``round_number`` on it: the round it is served for.

    Three statements for the default strategy: the candidates (with the open round),
    then one transaction that counts the serving and remembers it on the session. A
    context deactivated or deleted between the two is not served: another is chosen.
    A provisional session's serving (a crowd assignment not yet verified) is not counted:
    ``times_used`` steers what is served next, so only confirmed work moves it; once the
    session is confirmed, each example it wrote counts as one use of its context
    (``validation.confirm_session``)."""
    gone: list[int] = []
    for _ in range(3):
        candidates = servable_contexts(task)
        if gone:  # only after a race: an empty exclude costs a query's compiling for nothing
            candidates = candidates.exclude(pk__in=gone)
        context = _choose(task, session, candidates)
        if context is None or context.round_number is None:  # none, or no round is open
            rnd = open_round_or_error(task)
            raise NotFound(f"Task {task.slug} has no contexts for round {rnd.number}.")
        counted = not session.provisional
        with transaction.atomic():
            live = Context.objects.filter(pk=context.pk, is_active=True)
            if live.update(times_used=F("times_used") + 1) if counted else live.exists():
                AnnotationSession.objects.filter(pk=session.pk).update(last_context=context)
                session.last_context = context
                context.times_used += int(counted)
                return context
        gone.append(context.pk)
    raise Conflict(f"The contexts of task {task.slug} are changing right now; ask again.")


def _choose(task: Task, session: AnnotationSession, candidates) -> Context | None:
    strategy = task.parsed_config.context_sampling
    if strategy == "uniform":
        if session.last_context_id:
            others = candidates.exclude(pk=session.last_context_id)
            if others.exists():
                candidates = others
        count = candidates.count()
        return candidates.order_by("pk")[random.randrange(count)] if count else None
    order = ["times_fooled", "times_used"] if strategy == "least_fooled" else ["times_used"]
    # The 21 least used hold the 20 least used other than the last served one.
    return _pick_least(list(candidates.order_by(*order, "pk")[:21]), order, session.last_context_id)
