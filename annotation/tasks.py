"""Celery tasks on the ``inference`` queue, and the database-free functions they run.

The web process sends model references (``{"id", "name", "path", "sha256"}``, see
``tasks.registry.TargetModel``), so a prediction costs the worker no database
query; the artifact is verified against the sha256 when the model cache loads it,
and weights load through safetensors only. Plain version ids are accepted too (for
scripts): they are looked up, and must be ready.

The web process waits on these results; a STARTED state would cost one more write
and message per call in the result backend and nobody reads it, so these two do
not report it (``track_started=False``).
"""

from __future__ import annotations

import logging

from celery import shared_task

log = logging.getLogger(__name__)


def _resolve(models: list) -> list[dict]:
    """Model messages from messages or bare version ids (looked up, must be ready)."""
    ids = [m for m in models if not isinstance(m, dict)]
    if not ids:
        return list(models)
    from tasks.models import ModelVersion
    from tasks.registry import target_model

    found = {m.pk: m for m in ModelVersion.objects.filter(pk__in=ids, status=ModelVersion.Status.READY)}
    missing = [pk for pk in ids if pk not in found]
    if missing:
        raise ValueError(f"unknown or retired model versions: {missing}")
    return [m if isinstance(m, dict) else target_model(found[m]).message() for m in models]


def _ref(message: dict):
    from tasks.registry import TargetModel

    return TargetModel.from_message(message).ref()


def predict_refs(models: list[dict], rows_inputs: list[dict]) -> list[dict]:
    """One model or an ensemble (mean of probabilities / best span), no database.

    Each result carries ``members``: each model's own prediction, keyed by model
    version id (a string, as JSON keys are).
    """
    import ml

    if not models:
        raise ValueError("no model to predict with")
    if len(models) == 1:
        key = str(models[0]["id"])
        results = ml.predict(_ref(models[0]), rows_inputs)
        for result in results:
            result["members"] = {key: dict(result)}
        return results
    results = ml.predict_ensemble([_ref(m) for m in models], rows_inputs)
    for result in results:
        result["members"] = {str(m["id"]): member for m, member in zip(models, result["members"], strict=True)}
    return results


def explain_ref(model: dict, inputs: dict, target=None, n_steps: int = 10) -> dict:
    """An explanation that gives way to this process's predictions between its passes."""
    from django.conf import settings

    import ml

    from .inference import give_way

    return ml.explain(_ref(model), inputs, target=target, n_steps=n_steps,
                      internal_batch_size=settings.EXPLANATION_PASS_STEPS, before_pass=give_way)


def _answer(reply_to: str | None, compute):
    """Run ``compute``; with ``reply_to``, push the outcome (result or error) to the
    waiting caller's Redis list (core.replies) as well."""
    if not reply_to:
        return compute()
    from django.conf import settings

    from core import replies

    try:
        result = compute()
    except Exception as exc:
        log.exception("inference call failed")
        replies.push(settings.INFERENCE_REPLY_URL, reply_to,
                     {"ok": False, "type": type(exc).__name__, "error": str(exc)[:2000]})
        raise
    replies.push(settings.INFERENCE_REPLY_URL, reply_to, {"ok": True, "result": result})
    return result


@shared_task(name="annotation.predict", track_started=False)
def predict(models: list, rows_inputs: list[dict], reply_to: str | None = None) -> list[dict]:
    """Predict with one model or an ensemble: ``models`` are references or version ids.
    Through the process's model thread, batched with the predictions other pool
    threads are waiting on (``annotation.inference.predict_batched``)."""
    from .inference import predict_batched

    return _answer(reply_to, lambda: predict_batched(_resolve(models), rows_inputs))


@shared_task(name="annotation.explain", track_started=False)
def explain(model, inputs: dict, target=None, n_steps: int = 10, reply_to: str | None = None) -> dict:
    """On the worker's one explanation thread (the pool's threads would otherwise run
    several at once, each with a full set of torch threads)."""
    from .inference import explain_executor

    def compute():
        [message] = _resolve([model])
        return explain_executor().submit(explain_ref, message, inputs, target, n_steps).result()

    return _answer(reply_to, compute)


@shared_task(name="annotation.load_models", track_started=False)
def load_models(models: list) -> int:
    """Load models into this worker's cache on its model thread (a promotion asks for
    it before the model becomes a target); how many were loaded now."""
    from django.conf import settings

    from .inference import load_in_background

    futures = load_in_background([_ref(m) for m in _resolve(models)])
    for future in futures:
        future.result(timeout=settings.INFERENCE_TIMEOUT * 10)
    return len(futures)


@shared_task(name="annotation.prune_idempotency_keys")
def prune_idempotency_keys() -> int:
    """Forget Idempotency-Keys older than IDEMPOTENCY_KEY_TTL (on the beat schedule)."""
    from .idempotency import prune

    return prune()


@shared_task(name="annotation.refit_reliability")
def refit_reliability(task_id: int) -> int:
    """Refit one task's validator reliability model (queued after enough new votes)."""
    from tasks.models import Task

    from .services import reliability

    task = Task.objects.filter(pk=task_id).first()
    if task is None:
        return 0
    return reliability.refit(task).votes


@shared_task(name="annotation.refit_due_reliability")
def refit_due_reliability() -> int:
    """Refit every adaptive task with votes newer than its last fit (on the beat schedule)."""
    from .services import reliability

    due = reliability.tasks_due_for_refit()
    for task in due:
        reliability.refit(task)
    return len(due)
