"""What a batch's HIT type tells and asks of workers on MTurk: its title and
description (led by the task's content warning, if any), and the qualifications a
worker must hold to see and accept its HITs."""

from __future__ import annotations

from tasks.models import Task

from . import mturk
from .models import Batch
from .qualifications import block_qualification_id, onboarded_qualification_id


def qualifications(batch: Batch) -> list[dict]:
    found = []
    if batch.locales:
        found.append({"QualificationTypeId": mturk.LOCALE_QUALIFICATION, "Comparator": "In",
                      "LocaleValues": [{"Country": code} for code in batch.locales],
                      "ActionsGuarded": "DiscoverPreviewAndAccept"})
    if batch.min_approval_rate is not None:
        found.append({"QualificationTypeId": mturk.APPROVAL_RATE_QUALIFICATION, "Comparator": "GreaterThanOrEqualTo",
                      "IntegerValues": [batch.min_approval_rate], "ActionsGuarded": "DiscoverPreviewAndAccept"})
    if batch.min_approved_count is not None:
        found.append({"QualificationTypeId": mturk.APPROVED_COUNT_QUALIFICATION,
                      "Comparator": "GreaterThanOrEqualTo", "IntegerValues": [batch.min_approved_count],
                      "ActionsGuarded": "DiscoverPreviewAndAccept"})
    # Our blocks: the platform-wide one (superusers) and the task's own (its quality
    # thresholds, failed onboarding).
    for type_id in (block_qualification_id(batch.sandbox),
                    block_qualification_id(batch.sandbox, task=batch.task)):
        found.append({"QualificationTypeId": type_id, "Comparator": "DoesNotExist",
                      "ActionsGuarded": "DiscoverPreviewAndAccept"})
    # The onboarding: required of the work, and an onboarding-only batch is for those without it.
    if batch.require_onboarding or batch.mode == Batch.Mode.ONBOARDING:
        found.append({"QualificationTypeId": onboarded_qualification_id(batch.sandbox, batch.task),
                      "Comparator": "Exists" if batch.require_onboarding else "DoesNotExist",
                      "ActionsGuarded": "DiscoverPreviewAndAccept"})
    # Offensive content (a task with a content warning, such as hate speech): MTurk's
    # Adult Content qualification, which only workers who opted in to such work hold.
    if batch.task.content_warning:
        found.append({"QualificationTypeId": mturk.ADULT_CONTENT_QUALIFICATION, "Comparator": "EqualTo",
                      "IntegerValues": [1], "ActionsGuarded": "DiscoverPreviewAndAccept"})
    return found


def with_warning(task: Task, text: str, limit: int) -> str:
    """``text`` led by the task's content warning (if any), within ``limit`` characters:
    a worker reads it in the HIT's title and description before they open it."""
    if not task.content_warning or text.startswith("Content warning"):
        return text[:limit]
    if limit <= 128:  # a title: the warning's short form
        lead = "Content warning: offensive content. "
    else:
        lead = f"Content warning: {task.content_warning} "
    return (lead + text)[:limit]


def default_title(req) -> str:
    """The title of a batch asked for by ``req`` (a ``publishing.BatchRequest``) that names none."""
    if req.mode == Batch.Mode.ONBOARDING:
        return f"A short qualification quiz ({req.task.name})"[:128]
    if req.mode == Batch.Mode.CREATE:
        return f"Write {req.examples_per_assignment} examples that fool an AI model ({req.task.name})"[:128]
    return f"Check {req.examples_per_assignment} examples written by others ({req.task.name})"[:128]


def default_description(req) -> str:
    """The description of a batch asked for by ``req`` that gives none."""
    if req.mode == Batch.Mode.ONBOARDING:
        return (f"Read the instructions of the task '{req.task.name}' and answer a few examples with known answers; "
                f"those who pass are admitted to its paid work. Reward ${req.reward:.2f}.")
    if req.mode == Batch.Mode.CREATE:
        text = (f"Write short examples for the task '{req.task.name}' that an AI model gets wrong. "
                f"Reward ${req.reward:.2f}")
        if req.bonus_per_example > 0:
            text += f", plus a ${req.bonus_per_example:.2f} bonus for each example that fools the model and that " \
                    "other workers confirm is labelled correctly"
        return text + "."
    return f"Read examples for the task '{req.task.name}' and say whether each is labelled correctly. " \
           f"Reward ${req.reward:.2f}."
