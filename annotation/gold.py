"""Known-answer (gold) items: the ground truth a ring of accounts cannot write.

A task's researcher marks an example (``validation.mark_gold``) (one they wrote for the purpose, or any
example written on the platform) with its true verdict: is the writer's answer
right? Marking is the researcher's decision on it, so a gold item is decided like
any example a researcher decided, and it is training data like them.

- **Served like any item.** The validation queue (``serving.next_for``) mixes
  gold items in at the task config's ``validation.gold_rate`` (0.1: one item in
  ten), each at most once to a validator and never to its writer or an account
  that counts as the writer. Nothing a validator sees sets it apart: no item
  carries other validators' votes, a validator's decision answer tells no
  outcome, and whether the decision counts (and why not) is told as on any other
  item (``told``); their page says the same, and their record on checked items
  moves only in steps (``annotation.record``). So a validator never learns which
  items were gold, and a ring cannot pass their verdicts around.
- **What an answer is.** Evidence about the validator, not about the example: it is
  stored with ``not_counted_because = "gold"`` and ``gold_agrees`` (the decision
  matches the verdict; a flag never does), with what the validator was told
  (``shown_not_counted_because``), moves no counter and decides nothing.
- **Never public while in use.** The data browser, releases and a HIT's preview
  leave out gold items in use (``not_in_use``). A researcher retires one (``retire``) to
  make it public; it is never served as gold again. An example that may have been
  public already never becomes one (``may_have_been_public``).
- **What it is worth.** Answers on gold items are the reliability fit's anchors
  (``reliability.refit``) and half of a validator's record for trust
  (``trust.standing``); a validator below ``validator_trust.gold_min_agreement`` on
  at least ``gold_min_answers`` gold items stops counting on the task
  (``trust.failed_gold``, ``trust.why_not_counted``), and a crowd worker is blocked there.
"""

from __future__ import annotations

import random

from django.db.models import Max, Min, Q
from django.utils import timezone

from core.errors import Conflict, Forbidden
from tasks.models import Round, Task
from tasks.roles import is_researcher

from . import trust
from .models import Example, Validation

VERDICTS = (Validation.Label.CORRECT, Validation.Label.INCORRECT)


def gold_items(task: Task):
    return Example.objects.filter(task=task).exclude(gold_verdict="")


def in_use_q(prefix: str = "") -> Q:
    """Gold items still in use (on ``Example``, or through ``prefix``): marked, not retired."""
    return ~Q(**{f"{prefix}gold_verdict": ""}) & Q(**{f"{prefix}gold_retired_at__isnull": True})


def not_in_use(queryset):
    """``queryset`` (of examples) without the gold items in use: what may be shown publicly."""
    return queryset.exclude(in_use_q())


def told(validation: Validation) -> tuple[bool, str]:
    """(counted, not_counted_because) as the validator is told them: on a gold item what
    they would be on any other item (stored when the decision was made), else as stored."""
    if validation.not_counted_because == Validation.NotCounted.GOLD or validation.gold_agrees is not None:
        return not validation.shown_not_counted_because, validation.shown_not_counted_because
    return validation.counted, validation.not_counted_because


GOLD_PAGE = 50  # gold items read at a time by ``pick``
GOLD_PAGES = 4  # and at most this many pages a draw: past them, no gold item this time


def pick(task: Task, user, rng: random.Random | None = None) -> Example | None:
    """A gold item for ``user`` on this draw (at the task's ``gold_rate``), or None: one
    they have not answered, not written by them or an account that counts as them, not
    retracted. The gold index is walked from a random point, a page at a time (at most
    ``GOLD_PAGES``, wrapping round once): a draw costs pages, never the gold set."""
    rng = rng or random.SystemRandom()
    rate = float(task.parsed_config.validation.get("gold_rate", 0))
    if rate <= 0 or rng.random() >= rate:
        return None
    items = gold_items(task).filter(gold_retired_at__isnull=True).order_by("pk")
    bounds = items.aggregate(first=Min("pk"), last=Max("pk"))
    first, last = bounds["first"], bounds["last"]
    if first is None:
        return None
    start = rng.randint(first, last)
    themselves = {user.pk, *trust.same_person(user).values_list("user", flat=True)}
    pages = [items.filter(pk__gte=start), items.filter(pk__lt=start)]
    read = 0
    for walk in pages:
        after = None
        while read < GOLD_PAGES:
            page = walk if after is None else walk.filter(pk__gt=after)
            rows = list(page.values_list("pk", "annotator_id", "retracted")[:GOLD_PAGE])
            if not rows:
                break
            read += 1
            answered = set(Validation.objects.filter(validator=user, example_id__in=[pk for pk, _, _ in rows])
                           .order_by().values_list("example_id", flat=True))
            for pk, annotator_id, retracted in rows:
                if not retracted and pk not in answered and annotator_id not in themselves:
                    return Example.objects.select_related("context", "round", "task").get(pk=pk)
            if len(rows) < GOLD_PAGE:
                break  # the end of this stretch
            after = rows[-1][0]
    return None


def may_have_been_public(example: Example) -> bool:
    """Whether ``example`` may have been shown publicly (the data browser, a release): a
    closed round's example that was ever decided. (A decided example changes only by a
    researcher's decision, never back to waiting: one that waits was never verified.)"""
    waiting = (Example.ValidationStatus.PENDING, Example.ValidationStatus.ESCALATED)
    return example.round.status == Round.Status.CLOSED and example.validation_status not in waiting


def check_never_public(example: Example, verdict: str) -> None:
    """Refuse to make ``example`` a gold item (``validation.mark_gold``) when its answer may
    have been public already; marking a gold item again with its verdict changes nothing."""
    if may_have_been_public(example) and example.gold_verdict != verdict:
        raise Conflict("This example of a closed round was decided, so it may have been public already (the data "
                       "browser, a release): a gold item must be one whose answer nobody could look up. Choose one "
                       "of an open round, or one still waiting for validation.")


def tell_confirmed(session) -> None:
    """The provisional session was confirmed (``validation.confirm_session``): its answers
    on gold items are told as its other decisions now are, what they would be on any item."""
    for validation in (Validation.objects.filter(session=session, not_counted_because=Validation.NotCounted.GOLD,
                                                 shown_not_counted_because=Validation.NotCounted.PROVISIONAL)
                       .select_related("example__task", "validator").order_by("pk")):
        validation.shown_not_counted_because = trust.why_not_counted(validation.example, validation.validator, session)
        validation.save(update_fields=["shown_not_counted_because"])


def retire(example: Example, researcher) -> Example:
    """``researcher`` ends ``example``'s use as a gold item: the queue serves it no more as
    one, and it is public like any example (verified ones of closed rounds are in the
    browser and releases). Answers given on it stay evidence. Retiring again changes nothing."""
    if not is_researcher(researcher, example.task):
        raise Forbidden("Only the task's researchers retire gold items.")
    if not example.gold_verdict:
        raise Conflict("This example is not a gold item.")
    if example.gold_retired_at is None:
        Example.objects.filter(pk=example.pk, gold_retired_at__isnull=True).update(gold_retired_at=timezone.now())
        example.refresh_from_db()
    return example
