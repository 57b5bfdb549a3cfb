"""Predictions and explanations for the annotation flow.

Two ways to run them, chosen by the deployment:

* **Service mode** (a broker is configured): the ``annotation.predict`` task on
  the ``inference`` queue and ``annotation.explain`` on the ``explain`` queue. The
  worker pushes its answer onto a Redis list the web request waits on
  (``core.replies``), up to ``INFERENCE_TIMEOUT``.
* **Embedded mode** (no broker): in this process, on one model thread.
  Every prediction of the process runs on that thread, so torch keeps a single
  OpenMP team: a gunicorn gthread worker calling torch from its 16 request
  threads builds a team per thread, and on 2 cores they slow each other down
  (measured: model call p50 20.7 ms from 16 request threads against 14.4 ms from
  one thread).

Predictions are batched dynamically on that thread (``annotation.batching``):
requests arriving within ``INFERENCE_BATCH_WINDOW_MS``, or waiting while a pass
runs, share one forward pass of up to ``INFERENCE_MAX_BATCH`` examples. The
inference worker does the same: run it with the ``threads`` pool (``make
worker-inference``), each task thread submits to the process's model thread.
Explanations (100-300 ms each) run in their own lane, a second thread here and
the ``explain`` queue in service mode, so they never hold up the predictions
queued behind them.

Models warm up when the process starts (``warm_up_in_background``: the open
rounds' targets, loaded on the model thread without blocking start-up). A
prediction for a model that is not loaded yet waits up to
``INFERENCE_WARMUP_WAIT`` for it, then gets a 503 "warming up" (code
``warming_up``, with Retry-After) that the pages show as such, never a timeout.

Either way the web process sends model references (``tasks.registry.TargetModel``),
so nobody queries the database to answer. Whatever goes wrong becomes a domain
error the API answers with a clear status: no answer in time or the queue down
(``InferenceUnavailable``, 503 with Retry-After), no worker consuming the queue
at all (``NoWorker``, 503 at once: the workers' heartbeats, ``core.consumers``), the model failing
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
    return InferenceFailed(f"The model could not answer ({error_type}: {message}); nothing was stored.",
                           retry_after=30)


# --- the process's model thread: batched predictions, loads; and the explain lane ---------


class WarmingUp(Unavailable):
    """The model is still loading into memory; retry in a moment (nothing was stored)."""

    code = "warming_up"

    def __init__(self, message: str = "The model is warming up (loading into memory); nothing was stored. "
                                      "Try again in a few seconds.", retry_after: int = 2):
        super().__init__(message, retry_after)


class ModelWarmingUp(Exception):
    """Raised where the model runs (the worker) when it is still loading: the web
    process turns it into ``WarmingUp``."""


_lock = threading.Lock()
_batcher = None
_explain_executor: ThreadPoolExecutor | None = None
_explanations_waiting = 0  # submitted to this process's explanation lane, not yet finished
# ModelRef -> (Future of its load, (when it failed, the artifact's stamp then) or None),
# while it loads, and for a while after it failed.
_loading: dict = {}
FAILED_LOAD_KEPT = 30.0  # seconds a failed load answers for itself (unless the artifact changes)


def _artifact_stamp(ref):
    try:
        found = os.stat(os.path.join(ref.path, "metadata.json"))
    except OSError:
        return None
    return (found.st_ino, found.st_mtime_ns, found.st_size)


def _reset_after_fork() -> None:
    """A forked child has none of the parent's threads: nothing the parent queued will
    ever finish there, so the child starts its model thread and loads afresh."""
    global _lock, _batcher, _explain_executor, _explanations_waiting
    _lock = threading.Lock()
    _batcher, _explain_executor = None, None
    _explanations_waiting = 0
    _loading.clear()


os.register_at_fork(after_in_child=_reset_after_fork)


def _model_key(models: list[dict]) -> tuple:
    return tuple(tuple(sorted(m.items())) for m in models)


def _run_batch(key: tuple, rows: list[dict]) -> list[dict]:
    from .tasks import predict_refs

    return predict_refs([dict(items) for items in key], rows)


def model_thread():
    """The process's batcher (``annotation.batching.Batcher``): its thread runs every
    prediction and model load of the process."""
    global _batcher
    from .batching import Batcher

    with _lock:
        if _batcher is None:
            _batcher = Batcher(_run_batch, window=settings.INFERENCE_BATCH_WINDOW_MS / 1000,
                               max_rows=settings.INFERENCE_MAX_BATCH, name="dynabench-inference")
        return _batcher


def explain_executor() -> ThreadPoolExecutor:
    """The explanation lane of this process (created on first use; a forked child makes
    its own, ``_reset_after_fork``)."""
    global _explain_executor
    with _lock:
        if _explain_executor is None:
            _explain_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dynabench-explain")
        return _explain_executor


class ExplanationLane:
    """The explanation lane as ``_call`` submits to it: at most ``EXPLANATION_QUEUE_MAX``
    explanations waiting or running in this process. One more is refused at once (503,
    Retry-After) instead of waiting ``INFERENCE_TIMEOUT`` behind the others and failing
    then: near saturation the one explanation thread falls behind (bench/load.py)."""

    def submit(self, runner, *args) -> Future:
        global _explanations_waiting
        with _lock:
            if _explanations_waiting >= settings.EXPLANATION_QUEUE_MAX:
                raise InferenceUnavailable(
                    f"{_explanations_waiting} explanations are already waiting for the model; nothing was "
                    "stored. Try again in a few seconds.", retry_after=5)
            _explanations_waiting += 1
        try:
            future = explain_executor().submit(runner, *args)
        except BaseException:
            _explanation_done(None)
            raise
        future.add_done_callback(_explanation_done)  # finished, failed, or cancelled after a timeout
        return future


def explanations_waiting() -> int:
    """Explanations waiting or running in this process's lane (embedded mode)."""
    with _lock:
        return _explanations_waiting


def _explanation_done(_future) -> None:
    global _explanations_waiting
    with _lock:
        _explanations_waiting = max(0, _explanations_waiting - 1)


def give_way() -> None:
    """Called by an explanation before each of its passes: wait while predictions are
    queued or running on this process's model thread, up to ``EXPLANATION_YIELD_MS``
    (so an explanation is delayed under load, never starved)."""
    batcher = _batcher
    if batcher is not None:
        batcher.wait_until_idle(settings.EXPLANATION_YIELD_MS / 1000)


def load_in_background(refs) -> list[Future]:
    """Queue the loading of each of ``refs`` (``ml.ModelRef``) not yet in this process's
    cache on the model thread, one job per model (a broken artifact delays no other);
    the Futures of the loads. A model that is already loading is not queued twice."""
    import ml

    cache = ml.default_cache()
    thread = model_thread()
    futures = []
    for ref in refs:
        if ref in cache:
            continue
        with _lock:
            future, failed = _loading.get(ref, (None, None))
            if failed is not None and (time.monotonic() - failed[0] > FAILED_LOAD_KEPT
                                       or _artifact_stamp(ref) != failed[1]):
                future = None  # a failure answers for itself a while (no reload per request), then it is retried
            if future is None:
                def load(ref=ref):
                    try:
                        ml.warm_up([ref])
                    except BaseException:
                        with _lock:
                            entry = _loading.get(ref)
                            if entry is not None:
                                _loading[ref] = (entry[0], (time.monotonic(), _artifact_stamp(ref)))
                        raise
                    with _lock:
                        _loading.pop(ref, None)
                future = thread.call(load)
                _loading[ref] = (future, None)
        futures.append(future)
    return futures


def ensure_loaded(models: list[dict]) -> None:
    """Wait up to INFERENCE_WARMUP_WAIT for the models to be loaded (queued for loading
    if they are not); ``ModelWarmingUp`` if they are still loading then. A load that
    failed raises its error (a broken artifact is the model failing, not warming up)."""
    from .tasks import _ref

    deadline = time.monotonic() + settings.INFERENCE_WARMUP_WAIT
    for future in load_in_background([_ref(m) for m in models]):
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            raise ModelWarmingUp("the model is still loading") from None


def predict_batched(models: list[dict], rows_inputs: list[dict]) -> list[dict]:
    """``predict_refs`` through the model thread, batched with concurrent requests
    (where the model runs: the embedded web process, or the inference worker)."""
    ensure_loaded(models)
    future = model_thread().submit(_model_key(models), rows_inputs)
    try:
        return future.result(timeout=settings.INFERENCE_TIMEOUT)
    except FutureTimeout:
        future.cancel()
        raise


def preload(models: list[TargetModel], timeout: float = 300.0) -> None:
    """Load models about to become targets, before they are (a promotion): here, on the
    model thread, waiting for it (embedded); in service mode a worker is asked to load
    them on its model thread, ahead of the predictions that will follow."""
    from .tasks import _ref, load_models

    messages = [m.message() for m in models]
    if not embedded():
        try:
            load_models.apply_async(args=(messages,), queue="inference", ignore_result=True)
        except queue_errors() as exc:  # the promotion goes on; the first request loads it
            log.warning("could not ask a worker to preload %s: %s", [m.name for m in models], exc)
        return
    try:
        for future in load_in_background([_ref(m) for m in messages]):
            future.result(timeout=timeout)
    except FutureTimeout:
        raise InferenceUnavailable(f"The model did not load within {timeout:.0f} s; try again.") from None
    except Exception as exc:
        raise failure(type(exc).__name__, str(exc)) from exc


def warm_up_in_background() -> list[Future]:
    """Load the open rounds' target models on the model thread, without waiting (at
    the start of a web process in embedded mode, and of an inference worker)."""
    from tasks.registry import open_rounds_target_models

    try:
        refs = [m.ref() for m in open_rounds_target_models()]
    except Exception:  # no database yet (before migrate): the first request loads them
        log.warning("no target models to warm up: the database is not ready")
        return []
    return load_in_background(refs)


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
    from core import consumers

    url = settings.INFERENCE_REPLY_URL
    if url and not consumers.has_live_consumer(url, queue):
        raise NoWorker(queue)


def _call(task, runner, *args, what: str = "model answer", executor=None, queue: str = "inference"):
    if embedded():
        if executor is None:
            return _embedded(runner, *args)
        return _wait(executor.submit(runner, *args), what)
    require_consumer(queue)
    if not settings.INFERENCE_REPLY_URL:
        return _call_through_result_backend(task, *args, what=what, queue=queue)
    from core import replies

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
    from celery.exceptions import TimeoutError as CeleryTimeout

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
    except ModelWarmingUp:
        raise WarmingUp() from None
    except FutureTimeout as exc:
        raise InferenceUnavailable(_timeout_message("model answer")) from exc
    except Exception as exc:  # the model's own error, raised on the model thread
        log.exception("inference failed")
        raise failure(type(exc).__name__, str(exc)) from exc


def call(task, runner, *args, what: str = "model answer", executor=None, queue: str = "inference"):
    """Run ``runner(*args)`` here (embedded: on ``executor``, or in this thread for a
    runner that goes through the model thread itself), or ``task`` on ``queue``."""
    try:
        return _call(task, runner, *args, what=what, executor=executor, queue=queue)
    except queue_errors() as exc:
        log.warning("inference queue unavailable: %s: %s", type(exc).__name__, exc)
        raise InferenceUnavailable("The model queue is unreachable right now; nothing was stored. "
                                   "Try again shortly.") from exc


def predict_with(models: list[TargetModel], rows_inputs: list[dict]) -> list[dict]:
    """One model or an ensemble on ``rows_inputs`` (``ml`` field names). Each result
    carries ``members``: every model's own prediction, by version id."""
    from .tasks import predict

    return call(predict, predict_batched, [m.message() for m in models], rows_inputs)


def explain_with(model: TargetModel, inputs: dict, target=None, n_steps: int = 10) -> dict:
    """An explanation, in its own lane: the explain thread, or the ``explain`` queue."""
    from .tasks import explain, explain_ref

    return call(explain, explain_ref, model.message(), inputs, target, n_steps, what="explanation",
                executor=ExplanationLane(), queue="explain")


# --- model prefetch in embedded mode ----------------------------------------------------------

PREFETCH_EVERY = 60.0  # seconds between checks of one task's models, per process
_prefetched: dict[int, float] = {}


def prefetch_models(task) -> bool:
    """Embedded mode: start loading the open round's target models on the model
    thread, without waiting for it (a promoted model, or one the start missed).
    Called when a context is served: the annotator spends seconds writing, so the
    first example does not wait for the model to load (5-6 s on 2 cores). Checked at most once a minute per task
    and process; in service mode the workers load their models when they start.
    True when a load was queued."""
    if not embedded():
        return False
    now = time.monotonic()
    if now - _prefetched.get(task.pk, -PREFETCH_EVERY) < PREFETCH_EVERY:
        return False
    _prefetched[task.pk] = now
    return bool(load_in_background([m.ref() for m in open_round_with_models(task)[1]]))
