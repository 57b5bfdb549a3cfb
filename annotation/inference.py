"""Predictions and explanations for the annotation flow.

Two ways to run them, chosen by the deployment:

* **Service mode** (a broker is configured): the ``annotation.predict`` /
  ``annotation.explain`` Celery tasks on the ``inference`` queue. The worker
  pushes its answer onto a Redis list the web request waits on
  (``core.replies``), up to ``INFERENCE_TIMEOUT``.
* **Embedded mode** (no broker): in this process, on one dedicated inference
  thread. Every forward pass of the process runs on that thread, so torch keeps a
  single OpenMP team: a gunicorn gthread worker calling torch from its 16 request
  threads builds a team per thread, and on 2 cores they slow each other down
  (measured: model call p50 20.7 ms from 16 request threads against 14.4 ms from
  one thread). The queue in front of the thread also serialises passes that
  could not run in parallel on the machine's cores anyway.

Either way the web process sends model references (``tasks.registry.TargetModel``),
so nobody queries the database to answer. Whatever goes wrong becomes a domain
error the API answers with a clear status: no answer in time or the queue down
(``InferenceUnavailable``, 503 with Retry-After), the model failing
(``InferenceFailed``, 503 with the reason), input the model refuses
(``InvalidInput``, 400). Nothing here imports torch: the model cache loads on
first use (after any fork).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from celery import current_app
from django.conf import settings

from core.errors import InvalidInput, Unavailable, queue_errors
from tasks.registry import TargetModel, open_round_with_models

log = logging.getLogger(__name__)


class InferenceUnavailable(Unavailable):
    """No model answer in time (no worker, overloaded), or the job queue is down."""


class InferenceFailed(Unavailable):
    """The model ran and failed (a broken artifact, say); the reason says which."""


def embedded() -> bool:
    """Embedded mode: Celery runs tasks in this process (``task_always_eager``, the
    switch settings and tests set)."""
    return bool(current_app.conf.task_always_eager)


def _timeout_message(what: str) -> str:
    return f"No {what} within {settings.INFERENCE_TIMEOUT:.0f} s; nothing was stored. Try again shortly."


def failure(error_type: str, message: str) -> Exception:
    """The domain error for a failed model call: the model's own input check is bad
    input (400); anything else is the model failing (503 with the reason)."""
    if error_type == "InputError":
        return InvalidInput.field("inputs", message)
    return InferenceFailed(f"The model could not answer ({error_type}: {message}); nothing was stored.",
                           retry_after=30)


# --- embedded mode: one inference thread per process ------------------------------------

_executor: ThreadPoolExecutor | None = None
_executor_pid: int | None = None
_executor_lock = threading.Lock()


def inference_executor() -> ThreadPoolExecutor:
    """The process's inference thread (created on first use; a forked child makes its own)."""
    global _executor, _executor_pid
    with _executor_lock:
        if _executor is None or _executor_pid != os.getpid():
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dynabench-inference")
            _executor_pid = os.getpid()
        return _executor


def _wait(future: Future, what: str):
    try:
        return future.result(timeout=settings.INFERENCE_TIMEOUT)
    except FutureTimeout as exc:
        future.cancel()  # drops it if it has not started; a running pass finishes unseen
        raise InferenceUnavailable(_timeout_message(what)) from exc
    except Exception as exc:  # the model's own error, raised on the inference thread
        log.exception("inference failed")
        raise failure(type(exc).__name__, str(exc)) from exc


# --- service mode: through the queue, the answer on a reply list ---------------------------


def _call(task, runner, *args, what: str = "model answer"):
    if embedded():
        return _wait(inference_executor().submit(runner, *args), what)
    if not settings.INFERENCE_REPLY_URL:
        return _call_through_result_backend(task, *args, what=what)
    from core import replies

    key = replies.new_key(task.name)
    sent = task.apply_async(args=args, kwargs={"reply_to": key}, queue="inference", ignore_result=True)
    payload = replies.wait(settings.INFERENCE_REPLY_URL, key, settings.INFERENCE_TIMEOUT)
    if payload is None:
        sent.revoke()
        raise InferenceUnavailable(_timeout_message(what))
    if not payload.get("ok"):
        raise failure(payload.get("type", "Error"), payload.get("error", ""))
    return payload["result"]


def _call_through_result_backend(task, *args, what: str):
    from celery.exceptions import TimeoutError as CeleryTimeout

    result = task.apply_async(args=args, queue="inference")
    try:
        return result.get(timeout=settings.INFERENCE_TIMEOUT, disable_sync_subtasks=False)
    except CeleryTimeout as exc:
        result.revoke()
        raise InferenceUnavailable(_timeout_message(what)) from exc
    except Exception as exc:  # the task raised in the worker
        raise failure(type(exc).__name__, str(exc)) from exc


def call(task, runner, *args, what: str = "model answer"):
    """Run ``runner(*args)`` on the inference thread, or ``task`` on the inference queue."""
    try:
        return _call(task, runner, *args, what=what)
    except queue_errors() as exc:
        log.warning("inference queue unavailable: %s: %s", type(exc).__name__, exc)
        raise InferenceUnavailable("The model queue is unreachable right now; nothing was stored. "
                                   "Try again shortly.") from exc


def predict_with(models: list[TargetModel], rows_inputs: list[dict]) -> list[dict]:
    """One model or an ensemble on ``rows_inputs`` (``ml`` field names). Each result
    carries ``members``: every model's own prediction, by version id."""
    from .tasks import predict, predict_refs

    return call(predict, predict_refs, [m.message() for m in models], rows_inputs)


def explain_with(model: TargetModel, inputs: dict, target=None, n_steps: int = 10) -> dict:
    from .tasks import explain, explain_ref

    return call(explain, explain_ref, model.message(), inputs, target, n_steps, what="explanation")


# --- model prefetch in embedded mode ----------------------------------------------------------

PREFETCH_EVERY = 60.0  # seconds between checks of one task's models, per process
_prefetched: dict[int, float] = {}


def prefetch_models(task) -> bool:
    """Embedded mode: start loading the open round's target models on the inference
    thread, without waiting for it. Called when a context is served: the annotator
    spends seconds writing, so the first example of a fresh process does not wait
    for the model to load (5-6 s on 2 cores). Checked at most once a minute per task
    and process; in service mode the workers load their models when they start.
    True when a load was queued."""
    if not embedded():
        return False
    now = time.monotonic()
    if now - _prefetched.get(task.pk, -PREFETCH_EVERY) < PREFETCH_EVERY:
        return False
    _prefetched[task.pk] = now
    import ml

    cache = ml.default_cache()
    missing = [ref for ref in (m.ref() for m in open_round_with_models(task)[1]) if ref not in cache]
    if not missing:
        return False

    def load():
        try:
            ml.warm_up(missing)
        except Exception:  # the request that needs the model reports the problem
            log.exception("prefetching target models failed")

    inference_executor().submit(load)
    return True
