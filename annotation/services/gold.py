"""Known-answer (gold) items: the ground truth a ring of accounts cannot write.

A task's researcher marks an example (one they wrote for the purpose, or any
example written on the platform) with its true verdict: is the writer's answer
right? Marking is the researcher's decision on it, so a gold item is decided like
any example a researcher decided, and it is training data like them.

- **Served like any item.** The validation queue (``validation.next_for``) mixes
  gold items in at the task config's ``validation.gold_rate`` (0.1: one item in
  ten), each at most once to a validator and never to its writer or an account
  that counts as the writer. The item carries nothing that sets it apart; nor does
  the answer to the decision (``masked_state``): a validator never learns which
  items were gold, so a ring cannot pass their verdicts around.
- **What an answer is.** Evidence about the validator, not about the example: it is
  stored with ``not_counted_because = "gold"`` and ``gold_agrees`` (the decision
  matches the verdict; a flag never does), moves no counter and decides nothing.
- **What it is worth.** Answers on gold items are the reliability fit's anchors
  (``reliability.refit``) and half of a validator's record for trust
  (``trust.standing``); a validator below ``validator_trust.gold_min_agreement`` on
  at least ``gold_min_answers`` gold items stops counting on the task
  (``trust.failed_gold``, ``trust.why_not_counted``), and a crowd worker is blocked there.
"""

from __future__ import annotations

import random

from django.db import transaction
from django.db.models import Count, Q

from core.errors import Conflict, Forbidden, InvalidInput, NotFound
from tasks.models import Task
from tasks.roles import is_researcher

from ..models import Example, Validation
from . import trust

VERDICTS = (Validation.Label.CORRECT, Validation.Label.INCORRECT)


def gold_items(task: Task):
    return Example.objects.filter(task=task).exclude(gold_verdict="")


def mark(example_id: int, researcher, verdict: str) -> Example:
    """Make the example a gold item with ``verdict`` (the writer is right: "correct";
    wrong: "incorrect"), as ``researcher``'s decision on it. A researcher's earlier
    decision must agree; marking again with the same verdict changes nothing."""
    from .validation import validate_example  # validation imports this module

    if verdict not in VERDICTS:
        raise InvalidInput.field("verdict", f"{verdict!r} is not one of {list(VERDICTS)}.")
    example = Example.objects.select_related("task").filter(pk=example_id).first()
    if example is None:
        raise NotFound("No such example.")
    if not is_researcher(researcher, example.task):
        raise Forbidden("Only the task's researchers mark gold items.")
    if example.source != Example.Source.ANNOTATION or example.retracted:
        raise Conflict("Only examples written on the platform and not retracted can be gold items.")
    if trust.counts_as_writer(researcher, example):
        raise Conflict("Your account counts as this example's writer (a shared address): another researcher "
                       "must make it a gold item.")
    with transaction.atomic():
        decided = (Validation.objects.filter(example=example, mode=Validation.Mode.OWNER, counted=True)
                   .exclude(label="")
                   .values_list("label", flat=True).first())
        if decided is not None and decided != verdict:
            raise Conflict(f"A researcher decided this example {decided!r} already; its gold verdict must agree.")
        if decided is None:
            if Validation.objects.filter(example=example, validator=researcher).exclude(label="").exists():
                raise Conflict("You validated this example as a user; a gold item needs a researcher's decision.")
            validate_example(example.pk, researcher, label=verdict)
        Example.objects.filter(pk=example.pk).update(gold_verdict=verdict)
    example.refresh_from_db()
    return example


def pick(task: Task, user, rng: random.Random | None = None) -> Example | None:
    """A gold item for ``user`` on this draw (at the task's ``gold_rate``), or None: one
    they have not answered, not written by them or an account that counts as them."""
    rate = float(task.parsed_config.validation.get("gold_rate", 0))
    if rate <= 0 or (rng or random.SystemRandom()).random() >= rate:
        return None
    candidates = (gold_items(task).exclude(validations__validator=user).exclude(annotator=user)
                  .exclude(annotator__in=trust.same_person(user)).exclude(retracted=True)
                  .select_related("context", "round", "task").order_by("?"))
    return candidates.first()


def masked_state(example: Example, validation: Validation, counted: bool) -> dict:
    """The example as a validator who decided a gold item is told it is: still waiting,
    with the users' decisions on it (their own counted as it would be on any item),
    the researchers' verdict left out."""
    mine = Q(pk=validation.pk)
    others = ~mine & Q(not_counted_because__in=["", Validation.NotCounted.GOLD])
    shown = others | (mine if counted else Q(pk__in=[]))
    users = (Validation.objects.filter(example=example, mode=Validation.Mode.USER).filter(shown)
             .aggregate(correct=Count("pk", filter=Q(label=Validation.Label.CORRECT)),
                        incorrect=Count("pk", filter=Q(label=Validation.Label.INCORRECT)),
                        flagged=Count("pk", filter=Q(label=Validation.Label.FLAGGED))))
    return {"id": example.pk, "retracted": False, "flagged": False, "flag_reason": "",
            "validation_status": Example.ValidationStatus.PENDING, "validations_correct": users["correct"],
            "validations_incorrect": users["incorrect"], "validations_flagged": users["flagged"]}
