"""The rounds' target models, as inference calls see them (``TargetModel``): which
ready models answer for a round, read in one query on the hot path of a new example.
They sit with the catalogue because they are read through ``Round``; the registry
below (``registry.services``) knows model versions, not rounds."""

from __future__ import annotations

from registry.models import ModelVersion
from registry.services import TargetModel

from .models import Round, Task


def answering(models: list[TargetModel], ensemble_mode: str) -> list[TargetModel]:
    """Of a round's ready target models (by id), those that answer: the first in single mode."""
    return models[:1] if ensemble_mode == Round.EnsembleMode.SINGLE else models


def round_target_models(rnd: Round) -> list[TargetModel]:
    """The models that answer for ``rnd``: its ready target models by id (one query)."""
    rows = (rnd.target_models.filter(status=ModelVersion.Status.READY, task_id=rnd.task_id).order_by("pk")
            .values_list("pk", "name", "artifact_path", "sha256", "endpoint__id"))
    return answering([TargetModel(*row) for row in rows], rnd.ensemble_mode)


def open_round_with_models(task: Task) -> tuple[Round | None, list[TargetModel]]:
    """The task's open round and the models that answer for it.

    One query when the round has a ready target model (the hot path of every new
    example); a second finds the round when it has none. ``(None, [])``: no round
    is open. The round comes back partly loaded (id, task, number, status,
    ensemble mode): enough to check contexts against, never to save.
    """
    rows = list(
        ModelVersion.objects.filter(
            status=ModelVersion.Status.READY, task=task, target_of_rounds__task=task,
            target_of_rounds__status=Round.Status.OPEN,
        ).order_by("pk").values_list(
            "pk", "name", "artifact_path", "sha256", "endpoint__id",
            "target_of_rounds__id", "target_of_rounds__number", "target_of_rounds__ensemble_mode",
        )
    )
    if not rows:
        return task.open_round(), []
    round_id, number, mode = rows[0][5:]
    rnd = Round(id=round_id, task=task, number=number, status=Round.Status.OPEN, ensemble_mode=mode)
    return rnd, answering([TargetModel(*row[:5]) for row in rows], mode)


def open_rounds_target_models() -> list[TargetModel]:
    """Every ready target model of an open round of an active task."""
    rows = (ModelVersion.objects.filter(status=ModelVersion.Status.READY, target_of_rounds__status=Round.Status.OPEN,
                                        task__is_active=True)
            .distinct().order_by("pk").values_list("pk", "name", "artifact_path", "sha256", "endpoint__id"))
    return [TargetModel(*row) for row in rows if row[4] is None]  # an endpoint has nothing to load
