"""Each task's participant groups of ours on Prolific, the counterpart of its MTurk
qualifications (``crowd.qualifications``):

- *blocked*: participants blocked on the task (a quality threshold, a failed
  onboarding); every study of the task lists the group as its blocklist;
- *onboarded*: participants who passed the task's onboarding; a study that requires it
  lists the group as its allowlist, and an onboarding-only study as its blocklist.

Prolific updates a published study's eligibility as a group changes. A group lives in a
workspace, so they exist only with ``PROLIFIC_WORKSPACE_ID`` set; without it our pages
are the only door (the ``TaskBlock`` row, the onboarding record), as they are anyway.
Each group is made on Prolific once and remembered in a ``Qualification`` row (purpose
``prolific-blocked`` or ``prolific-onboarded``; Prolific has no sandbox). A create whose
answer was lost leaves an empty group behind, and the next call makes another: empty
groups keep no one out and let no one in.
"""

from __future__ import annotations

from django.conf import settings
from django.db import IntegrityError, transaction

from . import prolific
from .models import Batch, Qualification

BLOCKED = "prolific-blocked"
ONBOARDED = "prolific-onboarded"
NAMES = {BLOCKED: ("Dynabench: not admitted ({slug})", "Not admitted to the Dynabench task {slug}."),
         ONBOARDED: ("Dynabench: onboarding passed ({slug})", "Passed the onboarding of the Dynabench task {slug}.")}


def enabled() -> bool:
    return bool(settings.PROLIFIC_WORKSPACE_ID)


def group_id(purpose: str, task) -> str:
    """The task's group for ``purpose``, made on Prolific the first time."""
    known = Qualification.objects.filter(purpose=purpose, sandbox=False, task=task).first()
    if known is not None:
        return known.qualification_type_id
    name, description = (text.format(slug=task.slug) for text in NAMES[purpose])
    made = prolific.create_participant_group(name, workspace_id=settings.PROLIFIC_WORKSPACE_ID,
                                             description=description)
    try:
        with transaction.atomic():
            row, _ = Qualification.objects.get_or_create(purpose=purpose, sandbox=False, task=task,
                                                         defaults={"qualification_type_id": made["id"]})
    except IntegrityError:  # recorded meanwhile by another process (its group is the one used)
        row = Qualification.objects.get(purpose=purpose, sandbox=False, task=task)
    return row.qualification_type_id


def study_filters(batch) -> dict:
    """``create_study``'s group arguments for the batch: the every-task blocklist group (if
    set), and the task's groups (with a workspace): its blocked participants, and its
    onboarded ones (the allowlist of a study that requires the onboarding, the blocklist
    of an onboarding-only study)."""
    blocked, allowed = [settings.PROLIFIC_BLOCKLIST_GROUP_ID], []
    if enabled():
        blocked.append(group_id(BLOCKED, batch.task))
        if batch.require_onboarding:
            allowed.append(group_id(ONBOARDED, batch.task))
        elif batch.mode == Batch.Mode.ONBOARDING:  # for those who have not passed it
            blocked.append(group_id(ONBOARDED, batch.task))
    return {"block_group_ids": [group for group in blocked if group], "allow_group_ids": allowed}


def add(purpose: str, task, participant_id: str) -> None:
    if enabled():
        prolific.block_participant(group_id(purpose, task), participant_id)


def remove(purpose: str, task, participant_id: str) -> None:
    if enabled():
        prolific.unblock_participant(group_id(purpose, task), participant_id)
