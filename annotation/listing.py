"""A task's examples as its researchers list them (``GET /api/tasks/<slug>/examples/``).

``task_examples`` gives the rows of one page's query; the list pages them newest id
first with a keyset (``core.pagination.KeysetPagination``). Every mix of the filters
(round, split, validation status) has an index on ``Example`` that starts with
exactly those columns and ends with the id (``Example.Meta.indexes``), so a page is
an index walk, and one query with the round's number and the annotator's username
joined in, whatever the task's size.
"""

from __future__ import annotations

from django.db.models import F, QuerySet
from django.db.models.fields.json import KT

from core.errors import NotFound
from tasks.models import Round, Task
from tasks.roles import is_researcher

from .exporting import ANNOTATOR_METADATA_KEY
from .models import Example

# What a row of the list reads; the larger JSON columns (each model's prediction, the
# metadata) stay in the database.
LISTED_FIELDS = (
    "id", "uid", "external_uid", "task_id", "round__number", "context_id", "annotator_id", "source", "split",
    "inputs", "target", "prediction", "fooled", "retracted", "flagged", "flag_reason", "validation_status",
    "validations_correct", "validations_incorrect", "validations_flagged", "created_at",
)


def may_list_examples(user, task: Task) -> bool:
    """Who lists a task's examples: its researchers (owners and superusers). The public
    sees none yet."""
    return is_researcher(user, task)


def task_examples(task: Task, *, round_number: int | None = None, split: str | None = None,
                  status: str | None = None) -> QuerySet[Example]:
    """``task``'s examples, filtered; unordered (the list orders them by its key).

    ``round_number`` names a round of the task (NotFound if it has none: a round that
    does not exist is an error, not an empty list); ``split`` and ``status`` are
    ``Example.Split`` and ``Example.ValidationStatus`` values (the caller has checked
    them). Retracted examples are listed, with ``retracted`` set. Each row carries
    ``annotator_username`` and, for an imported example, the pseudonym its export
    carried (``exported_annotator``)."""
    if round_number is None:
        examples = Example.objects.filter(task=task)
    else:
        round_id = Round.objects.filter(task=task, number=round_number).values_list("pk", flat=True).first()
        if round_id is None:
            raise NotFound(f"Task {task.slug} has no round {round_number}.")
        # A round is in one task: filtering on the round alone lets the round's indexes
        # serve (a task column beside it would offer the planner the task's, too).
        examples = Example.objects.filter(round_id=round_id)
    if split is not None:
        examples = examples.filter(split=split)
    if status is not None:
        examples = examples.filter(validation_status=status)
    return (examples.select_related("round").only(*LISTED_FIELDS)
            .annotate(annotator_username=F("annotator__username"),
                      exported_annotator=KT(f"metadata__{ANNOTATOR_METADATA_KEY}")))
