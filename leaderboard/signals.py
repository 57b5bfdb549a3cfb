"""Cached leaderboards (``board.board_json``) are dropped when what they show changes:
an evaluation, a model (its visibility, status or name) or an evaluation job.
Queryset ``update()`` sends no signal: code that changes these rows that way calls
``board.forget`` itself (an evaluation job's success does, on commit)."""

from __future__ import annotations

from django.db import transaction

from jobs.models import Job
from registry.models import ModelVersion

from . import board


def _forget_on_commit(task_id) -> None:
    if task_id is not None:
        board.forget(task_id)  # now, and again once committed (a reader in between cached the old state)
        transaction.on_commit(lambda: board.forget(task_id))


def evaluation_changed(sender, instance, **kwargs) -> None:
    task_id = ModelVersion.objects.filter(pk=instance.model_version_id).values_list("task_id", flat=True).first()
    _forget_on_commit(task_id)


def model_changed(sender, instance, **kwargs) -> None:
    _forget_on_commit(instance.task_id)


def job_changed(sender, instance, **kwargs) -> None:
    if instance.kind == Job.Kind.EVALUATE_MODEL:
        _forget_on_commit(instance.task_id)
