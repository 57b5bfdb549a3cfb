"""Predictions and explanations for the annotation flow, through the
``inference`` queue (in-process in embedded mode).

The web process never imports torch here: it only sends model version ids
and texts, and the worker (or, embedded, this process on first use) loads
the verified artifacts into its bounded model cache.
"""

from __future__ import annotations

from django.conf import settings

from tasks.models import Round


class InferenceUnavailable(Exception):
    """The inference queue did not answer in time (no worker, or overloaded)."""


def _call(task, *args):
    from celery.exceptions import TimeoutError as CeleryTimeout

    result = task.apply_async(args=args, queue="inference")
    try:
        return result.get(timeout=settings.INFERENCE_TIMEOUT, disable_sync_subtasks=False)
    except CeleryTimeout as exc:
        result.revoke()
        raise InferenceUnavailable(
            f"No model answer within {settings.INFERENCE_TIMEOUT:.0f} s; try again shortly."
        ) from exc


def round_target_models(rnd: Round) -> list[tuple[int, str]]:
    """``(id, name)`` of the models that answer for ``rnd``: its ready target models
    by id, only the first in single mode."""
    models = list(rnd.target_models.filter(status="ready").order_by("pk").values_list("pk", "name"))
    if not models:
        raise InferenceUnavailable(f"{rnd} has no target model yet.")
    if rnd.ensemble_mode == Round.EnsembleMode.SINGLE:
        models = models[:1]
    return models


def predict_with(model_ids: list[int], rows_inputs: list[dict]) -> list[dict]:
    """One model or an ensemble (by model version ids) on ``rows_inputs``."""
    from .tasks import predict

    return _call(predict, list(model_ids), rows_inputs)


def predict_for_round(rnd: Round, rows_inputs: list[dict]) -> list[dict]:
    """The round's target model (or ensemble) on ``rows_inputs`` (model field names)."""
    return predict_with([pk for pk, _name in round_target_models(rnd)], rows_inputs)


def explain_with(model_version_id: int, inputs: dict, target=None, n_steps: int = 10) -> dict:
    from .tasks import explain

    return _call(explain, model_version_id, inputs, target, n_steps)
