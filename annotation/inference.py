"""The client of the models: ``predict_with`` and ``explain_with``, embedded or through
the queue, and the mapping of whatever goes wrong to a domain error the API answers.

Two ways to run them, chosen by the deployment:

* **Service mode** (a broker is configured): the ``annotation.predict`` task on
  the ``inference`` queue and ``annotation.explain`` on the ``explain`` queue. The
  worker pushes its answer onto a Redis list the web request waits on
  (``core.replies``), up to ``INFERENCE_TIMEOUT``. At most ``EXPLANATION_QUEUE_MAX``
  explanations are in flight across all web processes (``core.slots``); one more
  is a 503 at once.
* **Embedded mode** (no broker): in this process, on its model thread and in its
  explanation lane (``annotation.runtime``, where the models run either way).

Either way the caller sends model references (``registry.services.TargetModel``), so
nobody queries the database to answer. What goes wrong becomes: no answer in time or
the queue down (``InferenceUnavailable``, 503 with Retry-After), no worker consuming
the queue at all (``NoWorker``, 503 at once: the workers' heartbeats,
``core.consumers``), the explanation lane full (``Busy``, 503 ``busy`` at once), the
model still loading (``WarmingUp``, 503 ``warming_up``), the artifact store unreachable
(503 with Retry-After), the model failing (``InferenceFailed``, 503 with the reason), input the model refuses
(``InvalidInput``, 400). Nothing here imports torch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager

from celery import current_app
from celery.exceptions import TimeoutError as CeleryTimeout
from django.conf import settings

from core import celery_names, consumers, replies, slots
from core.errors import InvalidInput, TooMany, Unavailable, queue_errors
from jobs.engine import celery_task
from registry import endpoints
from registry.models import Endpoint
from registry.services import TargetModel
from tasks.targets import open_round_with_models

from . import runtime
from .remote import predict_with_endpoints

log = logging.getLogger(__name__)


class InferenceUnavailable(Unavailable):
    """No model answer in time (no worker, overloaded), or the job queue is down."""


class Busy(InferenceUnavailable):
    """The bounded lane (explanations) is full: refused at once, before any wait."""

    code = "busy"


class NoWorker(Unavailable):
    """Service mode: no live worker consumes the queue a call would go to, so nothing
    could answer it; said at once instead of after ``INFERENCE_TIMEOUT``."""

    code = "no_worker"

    def __init__(self, queue: str):
        super().__init__(f"No worker is consuming the '{queue}' queue, so no model can answer; nothing was "
                         f"stored. An operator must start one (make worker-inference).", retry_after=30)
        self.queue = queue


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
    input (400), a model still loading is "warming up" (503); anything else is the
    model failing (503 with the reason)."""
    if error_type == "InputError":
        return InvalidInput.field("inputs", message)
    if error_type == "ModelWarmingUp":
        return WarmingUp()
    if error_type == "StoreUnavailable":  # the artifact store, not the model: retry when it is back
        return InferenceUnavailable(f"{message.removesuffix('.')}; nothing was stored.", retry_after=30)
    return InferenceFailed(f"The model could not answer ({error_type}: {message}); nothing was stored.",
                           retry_after=30)


class WarmingUp(Unavailable):
    """The model is still loading into memory; retry in a moment (nothing was stored)."""

    code = "warming_up"

    def __init__(self, message: str = "The model is warming up (loading into memory); nothing was stored. "
                                      "Try again in a few seconds.", retry_after: int = 2):
        super().__init__(message, retry_after)


def preload(models: list[TargetModel], timeout: float = 300.0) -> None:
    """Load models about to become targets, before they are (a promotion): here, on the
    model thread, waiting for it (embedded); in service mode a worker is asked to load
    them on its model thread, ahead of the predictions that will follow."""
    messages = [m.message() for m in models]
    if not embedded():
        try:
            celery_task(celery_names.LOAD_MODELS).apply_async(args=(messages,), queue=celery_names.INFERENCE_QUEUE,
                                                           ignore_result=True)
        except queue_errors() as exc:  # the promotion goes on; the first request loads it
            log.warning("could not ask a worker to preload %s: %s", [m.name for m in models], exc)
        return
    try:
        runtime.load_and_wait(messages, timeout)
    except FutureTimeout:
        raise InferenceUnavailable(f"The model did not load within {timeout:.0f} s; try again.") from None
    except Exception as exc:
        raise failure(type(exc).__name__, str(exc)) from exc


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


def require_consumer(queue: str) -> None:
    """Raise ``NoWorker`` when no live worker consumes ``queue`` (``core.consumers``).
    Without a Redis to read the workers' heartbeats from, nothing is checked."""
    url = settings.INFERENCE_REPLY_URL
    if url and not consumers.has_live_consumer(url, queue):
        raise NoWorker(queue)


def _call(task, runner, *args, what: str = "model answer", executor=None, queue: str = celery_names.INFERENCE_QUEUE):
    if embedded():
        if executor is None:
            return _embedded(runner, *args)
        try:
            future = executor.submit(runner, *args)
        except runtime.LaneFull as exc:
            raise Busy(exc.message, retry_after=exc.retry_after) from None
        return _wait(future, what)
    require_consumer(queue)
    if not settings.INFERENCE_REPLY_URL:
        return _call_through_result_backend(task, *args, what=what, queue=queue)
    if executor is None:
        return _call_through_reply_list(task, *args, what=what, queue=queue)
    # A bounded lane (explanations, ``executor`` in embedded mode): here the bound holds
    # across every web process, and a slot is held while the call waits on the queue.
    try:
        with slots.slot(settings.INFERENCE_REPLY_URL, queue, settings.EXPLANATION_QUEUE_MAX,
                        ttl=settings.INFERENCE_TIMEOUT + replies.SOCKET_MARGIN):
            return _call_through_reply_list(task, *args, what=what, queue=queue)
    except slots.Full as full:
        raise Busy(f"{full.held} {what}s are already waiting for a model; nothing was stored. "
                                   "Try again in a few seconds.", retry_after=5) from None


def _call_through_reply_list(task, *args, what: str, queue: str):
    key = replies.new_key(task.name)
    sent = task.apply_async(args=args, kwargs={"reply_to": key}, queue=queue, ignore_result=True)
    payload = replies.wait(settings.INFERENCE_REPLY_URL, key, settings.INFERENCE_TIMEOUT)
    if payload is None:
        sent.revoke()
        raise InferenceUnavailable(_timeout_message(what))
    if not payload.get("ok"):
        raise failure(payload.get("type", "Error"), payload.get("error", ""))
    return payload["result"]


def _call_through_result_backend(task, *args, what: str, queue: str):
    result = task.apply_async(args=args, queue=queue)
    try:
        return result.get(timeout=settings.INFERENCE_TIMEOUT, disable_sync_subtasks=False)
    except CeleryTimeout as exc:
        result.revoke()
        raise InferenceUnavailable(_timeout_message(what)) from exc
    except Exception as exc:  # the task raised in the worker
        raise failure(type(exc).__name__, str(exc)) from exc


def _embedded(runner, *args):
    """``runner(*args)`` in this request's thread: it waits on the model thread itself."""
    try:
        return runner(*args)
    except runtime.ModelWarmingUp:
        raise WarmingUp() from None
    except FutureTimeout as exc:
        raise InferenceUnavailable(_timeout_message("model answer")) from exc
    except Exception as exc:  # the model's own error, raised on the model thread
        log.exception("inference failed")
        raise failure(type(exc).__name__, str(exc)) from exc


def call(task, runner, *args, what: str = "model answer", executor=None, queue: str = celery_names.INFERENCE_QUEUE):
    """Run ``runner(*args)`` here (embedded: on ``executor``, or in this thread for a
    runner that goes through the model thread itself), or ``task`` on ``queue``."""
    try:
        return _call(task, runner, *args, what=what, executor=executor, queue=queue)
    except queue_errors() as exc:
        log.warning("inference queue unavailable: %s: %s", type(exc).__name__, exc)
        raise InferenceUnavailable("The model queue is unreachable right now; nothing was stored. "
                                   "Try again shortly.") from exc


def predict_with(models: list[TargetModel], rows_inputs: list[dict], *, task=None,
                 round_id: int | None = None) -> list[dict]:
    """One model or an ensemble on ``rows_inputs`` (``ml`` field names). Each result
    carries ``members``: every model's own prediction, by version id. Models behind
    endpoints (``TargetModel.endpoint_id``) are asked by ``annotation.remote`` (which
    needs ``task``, and counts their cost against ``round_id``)."""
    if any(m.endpoint_id is not None for m in models):
        return predict_with_endpoints(models, rows_inputs, task=task, round_id=round_id, local=_predict_local)
    return _predict_local(models, rows_inputs)


def _predict_local(models: list[TargetModel], rows_inputs: list[dict]) -> list[dict]:
    return call(celery_task(celery_names.PREDICT), runtime.predict_batched, [m.message() for m in models], rows_inputs)


@contextmanager
def account_explanation_slot(account) -> Iterator[None]:
    """The account's one explanation slot, held for the block, across every web
    process (``core.slots.exclusive``): while one explanation of the account waits or
    runs, a second is a 429 at once, so one account cannot fill the lane or, for a
    model behind an endpoint, run many paid occlusions at once. ``account`` None: no slot."""
    if account is None:
        yield
        return
    try:
        with slots.exclusive(settings.INFERENCE_REPLY_URL, f"explain-account:{account}",
                             ttl=settings.INFERENCE_TIMEOUT + replies.SOCKET_MARGIN):
            yield
    except slots.Held:
        raise TooMany("You already have an explanation waiting or running; nothing was stored. Ask again when it "
                      "has answered.", retry_after=5) from None
    except queue_errors() as exc:
        log.warning("explanation slots unavailable: %s: %s", type(exc).__name__, exc)
        raise InferenceUnavailable("The model queue is unreachable right now; nothing was stored. "
                                   "Try again shortly.") from exc


def explain_with(model: TargetModel, inputs: dict, target=None, n_steps: int = 10, *, account=None) -> dict:
    """An explanation, in its own lane: the explain thread, or the ``explain`` queue.
    With ``account`` (a user's id), in that account's one explanation slot
    (``account_explanation_slot``)."""
    with account_explanation_slot(account):
        return _explain(model, inputs, target, n_steps)


def explain_endpoint_with(endpoint: Endpoint, config, inputs: dict, target=None, *, round_id: int | None,
                          account=None) -> dict:
    """A black-box explanation of a model behind an endpoint (leave one word out,
    ``registry.endpoints.explain``: its calls bounded by the task config and counted
    against ``round_id``'s budget), asked from this process, in the same per-account
    slot as a local model's explanation."""
    with account_explanation_slot(account):
        return endpoints.explain(endpoint, config, inputs, target, round_id=round_id)


def _explain(model: TargetModel, inputs: dict, target, n_steps: int) -> dict:
    return call(celery_task(celery_names.EXPLAIN), runtime.explain_ref, model.message(), inputs, target, n_steps,
                what="explanation", executor=runtime.ExplanationLane(), queue=celery_names.EXPLAIN_QUEUE)


# --- model prefetch in embedded mode ----------------------------------------------------------

PREFETCH_EVERY = 60.0  # seconds between checks of one task's models, per process
_prefetched: dict[int, float] = {}


def prefetch_models(task) -> bool:
    """Embedded mode: start loading the open round's target models on the model
    thread, without waiting for it (a promoted model, or one the start missed).
    Called when a context is served: the annotator spends seconds writing, so the
    first example does not wait for the model to load. Checked at most once a minute per task
    and process; in service mode the workers load their models when they start.
    True when a load was queued."""
    if not embedded():
        return False
    now = time.monotonic()
    if now - _prefetched.get(task.pk, -PREFETCH_EVERY) < PREFETCH_EVERY:
        return False
    _prefetched[task.pk] = now
    return bool(runtime.load_in_background(open_round_with_models(task)[1]))
