"""The qualification types we own on MTurk: the block qualification (every task, or
one task) and each task's *onboarded* qualification, each made on MTurk once per site
(sandbox, live) and remembered in a ``Qualification`` row."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from tasks.models import Task

from . import mturk
from .models import Qualification

BLOCK_QUALIFICATION = "block"
BLOCK_QUALIFICATION_NAME = "Dynabench: not admitted"
ONBOARDED_QUALIFICATION = "onboarded"
ONBOARDED_QUALIFICATION_NAME = "Dynabench: onboarding passed"


def block_qualification_id(sandbox: bool, task: Task | None = None) -> str:
    """Our block qualification on this endpoint, for every task or for ``task`` only,
    created on MTurk the first time."""
    if task is None:
        return _qualification_id(BLOCK_QUALIFICATION, sandbox, None, BLOCK_QUALIFICATION_NAME,
                                 "Workers with this qualification are not admitted to Dynabench HITs.")
    return _qualification_id(BLOCK_QUALIFICATION, sandbox, task, f"{BLOCK_QUALIFICATION_NAME} ({task.slug})",
                             f"Workers with this qualification are not admitted to the Dynabench task {task.slug}.")


def onboarded_qualification_id(sandbox: bool, task: Task) -> str:
    """The qualification workers get once they pass ``task``'s onboarding (a batch may
    require it), created on MTurk the first time."""
    return _qualification_id(ONBOARDED_QUALIFICATION, sandbox, task, f"{ONBOARDED_QUALIFICATION_NAME} ({task.slug})",
                             f"Workers with this qualification passed the onboarding of the Dynabench task "
                             f"{task.slug}.")


def _qualification_id(purpose: str, sandbox: bool, task: Task | None, name: str, description: str) -> str:
    known = Qualification.objects.filter(purpose=purpose, sandbox=sandbox, task=task).first()
    if known is not None:
        return known.qualification_type_id
    found = mturk.find_qualification_type(name, sandbox=sandbox)
    if found is None:
        try:
            found = mturk.create_qualification_type(name, description, sandbox=sandbox)
        except mturk.MTurkError as exc:
            if exc.kind not in ("request", "duplicate"):  # MTurk: QualificationTypeAlreadyExists
                raise
            # made meanwhile by another process
            found = mturk.find_qualification_type(name, sandbox=sandbox)
            if found is None:
                raise
    try:
        with transaction.atomic():
            qualification, _ = Qualification.objects.get_or_create(
                purpose=purpose, sandbox=sandbox, task=task, defaults={"qualification_type_id": found})
    except IntegrityError:  # recorded meanwhile by another process
        qualification = Qualification.objects.get(purpose=purpose, sandbox=sandbox, task=task)
    return qualification.qualification_type_id
