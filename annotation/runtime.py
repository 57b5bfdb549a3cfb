"""Where the models run: this process's model thread, its batcher, model loading and
warm-up, the explanation lane, and the reset after a fork. The one module here that
calls ``ml``.

Who asks for a prediction is ``annotation.inference`` (the client: embedded or
through the queue, and the mapping of errors); in service mode the inference
worker's Celery tasks (``annotation.tasks``) call this module, in embedded mode the
web process does, through the client.

- **One model thread per process.** Every prediction and every model load runs on
  it, so torch keeps a single OpenMP team: torch called from many request threads
  builds a team per thread, and on few cores they slow each other down.
- **Dynamic batching** (``annotation.batching``): requests arriving within
  ``INFERENCE_BATCH_WINDOW_MS``, or waiting while a pass runs, share one forward pass
  of up to ``INFERENCE_MAX_BATCH`` examples. An inference worker runs the ``threads``
  pool: each task thread submits to the process's one model thread.
- **Explanations** run in a lane of their own, one thread, at most
  ``EXPLANATION_QUEUE_MAX`` waiting; before each pass they give way to queued
  predictions (up to ``EXPLANATION_YIELD_MS``).
- **Loading.** ``load_in_background`` queues each model's load once on the model
  thread; a prediction waits up to ``INFERENCE_WARMUP_WAIT`` for its models, then
  raises ``ModelWarmingUp``. A failed load answers for itself for
  ``FAILED_LOAD_KEPT`` seconds (unless the artifact changes), then is retried.
- **Forks.** A forked child has none of the parent's threads: ``_reset_after_fork``
  gives it a fresh model thread and lane. Nothing here imports torch before a model
  is loaded, so a parent that never predicted can fork safely.

Models are described by messages (``registry.services.TargetModel.message()``:
``{"id", "name", "path", "sha256"}``), so answering costs no database query; bare
version ids (from scripts) are looked up (``resolve``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from django.conf import settings

import ml
from core.errors import Unavailable
from registry.models import ModelVersion
from registry.services import TargetModel, target_model
from tasks.targets import open_rounds_target_models

from .batching import Batcher

log = logging.getLogger(__name__)

FAILED_LOAD_KEPT = 30.0  # seconds a failed load answers for itself (unless the artifact changes)


class ModelWarmingUp(Exception):
    """Raised where the model runs when it is still loading: the client turns it into
    ``inference.WarmingUp`` (503, retry in a moment)."""


class LaneFull(Unavailable):
    """The explanation lane already holds ``EXPLANATION_QUEUE_MAX`` explanations."""


# --- models as messages ------------------------------------------------------------------


def ref(message: dict) -> ml.ModelRef:
    return TargetModel.from_message(message).ref()


def resolve(models: list) -> list[dict]:
    """Model messages from messages or bare version ids (looked up, must be ready)."""
    ids = [m for m in models if not isinstance(m, dict)]
    if not ids:
        return list(models)

    found = {m.pk: m for m in ModelVersion.objects.filter(pk__in=ids, status=ModelVersion.Status.READY)}
    missing = [pk for pk in ids if pk not in found]
    if missing:
        raise ValueError(f"unknown or retired model versions: {missing}")
    return [m if isinstance(m, dict) else target_model(found[m]).message() for m in models]


def predict_refs(models: list[dict], rows_inputs: list[dict]) -> list[dict]:
    """One model or an ensemble (mean of probabilities / best span), in this thread.

    Each result carries ``members``: each model's own prediction, keyed by model
    version id (a string, as JSON keys are)."""
    if not models:
        raise ValueError("no model to predict with")
    if len(models) == 1:
        key = str(models[0]["id"])
        results = ml.predict(ref(models[0]), rows_inputs)
        for result in results:
            result["members"] = {key: dict(result)}
        return results
    results = ml.predict_ensemble([ref(m) for m in models], rows_inputs)
    for result in results:
        result["members"] = {str(m["id"]): member for m, member in zip(models, result["members"], strict=True)}
    return results


# --- the process's state: the model thread, the explanation lane, loads in flight ----------

_lock = threading.Lock()
_batcher = None
_explain_executor: ThreadPoolExecutor | None = None
_explanations_waiting = 0  # submitted to this process's explanation lane, not yet finished
# ModelRef -> (Future of its load, (when it failed, the artifact's stamp then) or None),
# while it loads, and for a while after it failed.
_loading: dict = {}


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
    return predict_refs([dict(items) for items in key], rows)


def model_thread():
    """The process's batcher (``annotation.batching.Batcher``): its thread runs every
    prediction and model load of the process."""
    global _batcher

    with _lock:
        if _batcher is None:
            _batcher = Batcher(_run_batch, window=settings.INFERENCE_BATCH_WINDOW_MS / 1000,
                               max_rows=settings.INFERENCE_MAX_BATCH, name="dynabench-inference")
        return _batcher


def predict_batched(models: list[dict], rows_inputs: list[dict]) -> list[dict]:
    """``predict_refs`` through the model thread, batched with concurrent requests;
    ``ModelWarmingUp`` while the models load, ``FutureTimeout`` after
    ``INFERENCE_TIMEOUT``."""
    ensure_loaded(models)
    future = model_thread().submit(_model_key(models), rows_inputs)
    try:
        return future.result(timeout=settings.INFERENCE_TIMEOUT)
    except FutureTimeout:
        future.cancel()
        raise


# --- loading ---------------------------------------------------------------------------------


def _artifact_stamp(model_ref):
    try:
        found = os.stat(os.path.join(model_ref.path, "metadata.json"))
    except OSError:
        return None
    return (found.st_ino, found.st_mtime_ns, found.st_size)


def load_in_background(models: list[TargetModel]) -> list[Future]:
    """Queue the loading of each of ``models`` not yet in this process's cache on the
    model thread, one job per model (a broken artifact delays no other); the Futures
    of the loads. A model that is already loading is not queued twice. The load
    fetches the artifact from object storage first if it is not on this machine."""
    cache = ml.default_cache()
    thread = model_thread()
    futures = []
    for model in models:
        if model.endpoint_id is not None:
            continue  # served elsewhere (registry.endpoints): nothing to load here
        model_ref = model.ref()
        if model_ref in cache:
            continue
        with _lock:
            future, failed = _loading.get(model_ref, (None, None))
            if failed is not None and (time.monotonic() - failed[0] > FAILED_LOAD_KEPT
                                       or _artifact_stamp(model_ref) != failed[1]):
                future = None  # a failure answers for itself a while (no reload per request), then it is retried
            if future is None:
                def load(model=model, model_ref=model_ref):
                    try:
                        ml.warm_up([model.fetch()])
                    except BaseException:
                        with _lock:
                            entry = _loading.get(model_ref)
                            if entry is not None:
                                _loading[model_ref] = (entry[0], (time.monotonic(), _artifact_stamp(model_ref)))
                        raise
                    with _lock:
                        _loading.pop(model_ref, None)
                future = thread.call(load)
                _loading[model_ref] = (future, None)
        futures.append(future)
    return futures


def ensure_loaded(models: list[dict]) -> None:
    """Wait up to INFERENCE_WARMUP_WAIT for the models to be loaded (queued for loading
    if they are not); ``ModelWarmingUp`` if they are still loading then. A load that
    failed raises its error (a broken artifact is the model failing, not warming up)."""
    deadline = time.monotonic() + settings.INFERENCE_WARMUP_WAIT
    for future in load_in_background([TargetModel.from_message(m) for m in models]):
        try:
            future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            raise ModelWarmingUp("the model is still loading") from None


def load_and_wait(models: list[dict], timeout: float) -> int:
    """Load ``models`` on the model thread and wait for them (a promotion preloads the
    next targets); how many were not loaded before. The load's own error is raised;
    ``FutureTimeout`` after ``timeout`` seconds."""
    futures = load_in_background([TargetModel.from_message(m) for m in models])
    for future in futures:
        future.result(timeout=timeout)
    return len(futures)


def warm_up_in_background() -> list[Future]:
    """Load the open rounds' target models on the model thread, without waiting (at
    the start of a web process in embedded mode, and of a worker's pool process)."""
    try:
        models = open_rounds_target_models()
    except Exception:  # no database yet (before migrate): the first request loads them
        log.warning("no target models to warm up: the database is not ready")
        return []
    return load_in_background(models)


# --- the explanation lane --------------------------------------------------------------------


def explain_executor() -> ThreadPoolExecutor:
    """The explanation lane's one thread (created on first use; a forked child makes
    its own)."""
    global _explain_executor
    with _lock:
        if _explain_executor is None:
            _explain_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dynabench-explain")
        return _explain_executor


class ExplanationLane:
    """The explanation lane, bounded: at most ``EXPLANATION_QUEUE_MAX`` explanations
    waiting or running in this process. One more is refused at once (``LaneFull``, a
    503 with Retry-After) instead of waiting ``INFERENCE_TIMEOUT`` behind the others
    and failing then: near saturation the one explanation thread falls behind."""

    def submit(self, runner, *args) -> Future:
        global _explanations_waiting
        with _lock:
            if _explanations_waiting >= settings.EXPLANATION_QUEUE_MAX:
                raise LaneFull(
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
    """Explanations waiting or running in this process's lane."""
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


def explain_ref(model: dict, inputs: dict, target=None, n_steps: int = 10) -> dict:
    """An explanation in this thread, giving way to the process's predictions between
    its passes (``give_way``, looked up at each call so that it can be observed)."""
    return ml.explain(ref(model), inputs, target=target, n_steps=n_steps,
                      internal_batch_size=settings.EXPLANATION_PASS_STEPS, before_pass=lambda: give_way())
