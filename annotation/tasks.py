"""The annotation app's Celery tasks: thin wrappers over ``annotation.runtime`` (the
worker's model thread and explanation lane) for predictions, explanations and
loads, and small housekeeping tasks.

The web process sends model references (``{"id", "name", "path", "sha256"}``, see
``registry.services.TargetModel``), so a prediction costs the worker no database
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
from django.conf import settings

from core import celery_names, replies
from tasks.models import Task

from . import counters, exports, reliability, runtime
from .idempotency import prune

log = logging.getLogger(__name__)


def _answer(reply_to: str | None, compute):
    """Run ``compute``; with ``reply_to``, push the outcome (result or error) to the
    waiting caller's Redis list (core.replies) as well."""
    if not reply_to:
        return compute()
    try:
        result = compute()
    except Exception as exc:
        log.exception("inference call failed")
        replies.push(settings.INFERENCE_REPLY_URL, reply_to,
                     {"ok": False, "type": type(exc).__name__, "error": str(exc)[:2000]})
        raise
    replies.push(settings.INFERENCE_REPLY_URL, reply_to, {"ok": True, "result": result})
    return result


@shared_task(name=celery_names.PREDICT, track_started=False)
def predict(models: list, rows_inputs: list[dict], reply_to: str | None = None) -> list[dict]:
    """Predict with one model or an ensemble: ``models`` are references or version ids.
    Through the process's model thread, batched with the predictions other pool
    threads are waiting on (``runtime.predict_batched``)."""
    return _answer(reply_to, lambda: runtime.predict_batched(runtime.resolve(models), rows_inputs))


@shared_task(name=celery_names.EXPLAIN, track_started=False)
def explain(model, inputs: dict, target=None, n_steps: int = 10, reply_to: str | None = None) -> dict:
    """On the worker's one explanation thread (the pool's threads would otherwise run
    several at once, each with a full set of torch threads)."""
    def compute():
        [message] = runtime.resolve([model])
        return runtime.explain_executor().submit(runtime.explain_ref, message, inputs, target, n_steps).result()

    return _answer(reply_to, compute)


@shared_task(name=celery_names.LOAD_MODELS, track_started=False)
def load_models(models: list) -> int:
    """Load models into this worker's cache on its model thread (a promotion asks for
    it before the model becomes a target); how many were loaded now."""
    return runtime.load_and_wait(runtime.resolve(models), timeout=settings.INFERENCE_TIMEOUT * 10)


@shared_task(name=celery_names.PRUNE_IDEMPOTENCY_KEYS)
def prune_idempotency_keys() -> int:
    """Forget Idempotency-Keys older than IDEMPOTENCY_KEY_TTL (on the beat schedule)."""
    return prune()


@shared_task(name=celery_names.REFIT_RELIABILITY)
def refit_reliability(task_id: int) -> int:
    """Refit one task's validator reliability model (queued after enough new votes)."""
    task = Task.objects.filter(pk=task_id).first()
    if task is None:
        return 0
    return reliability.refit(task).votes


@shared_task(name=celery_names.REFIT_DUE_RELIABILITY)
def refit_due_reliability() -> int:
    """Refit every task with votes newer than its last fit (on the beat schedule)."""
    due = reliability.tasks_due_for_refit()
    for task in due:
        reliability.refit(task)
    return len(due)


@shared_task(name=celery_names.RECONCILE_COUNTS)
def reconcile_counts() -> int:
    """Recount every round's counters from the rows and repair drift (on the beat
    schedule); how many counters were repaired."""
    return len(counters.reconcile())


@shared_task(name=celery_names.EXPORT_EXAMPLES, acks_late=True, reject_on_worker_lost=True)
def export_examples(job_id: int) -> int:
    """Write a selection of a task's examples to a file (a Job: ``services.exports``)."""
    exports.run_export_job(job_id)
    return job_id
