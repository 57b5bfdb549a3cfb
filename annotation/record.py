"""A validator's record on checked items moves in steps, never one item at a time.

Checked items are gold items and examples a researcher (or trusted votes on a paid
example) decided (``trust.standing``). What a validator can see of their record (the
agreement on their page and in a decision's note, whether their votes count, the stop
after failed checks) would point at one item if it moved with each answer: vote, look,
and the item whose vote moved it was a gold item, with its verdict. So the record reads
only the validator's work up to the last closed *step*: once their decisions on a task
since the last step reach ``CHECKED_RECORD_STEP``, all their work on the task so far
(decisions and blind answers) joins the record at once (``in_record``). A change in the
record then covers a whole step of decisions, among which the validator cannot tell
which were checked, and it happens at a point they knew in advance (every
``CHECKED_RECORD_STEP``-th decision), so its timing says nothing either.

The agreement itself is shown only once the record holds
``CHECKED_AGREEMENT_MIN_ANSWERS`` answers on checked items (``shown_agreement``).
"""

from __future__ import annotations

from django.conf import settings
from django.db.models import Q

from tasks.models import Task

from .models import Validation


def step() -> int:
    return max(int(settings.CHECKED_RECORD_STEP), 1)


def in_record() -> Q:
    """The validations that make up validators' records (on ``Validation``): all of them
    when the step is one decision, else those whose step closed."""
    return Q() if step() <= 1 else Q(in_record=True)


def close_step(task: Task, user) -> bool:
    """After a decision by ``user`` on ``task``: when their decisions outside the record
    reach a step, their whole work on the task joins it. Returns whether a step closed
    (one count of a few rows, and one update when it closes)."""
    outside = Validation.objects.filter(validator=user, task=task, in_record=False)
    if outside.exclude(label="").count() < step():
        return False
    outside.update(in_record=True)
    return True


def shown_agreement_from() -> int:
    return max(int(settings.CHECKED_AGREEMENT_MIN_ANSWERS), 1)


def shown_agreement(answers: int) -> bool:
    """Whether an agreement over ``answers`` checked answers may be shown to the validator."""
    return answers >= shown_agreement_from()
