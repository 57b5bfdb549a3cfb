"""Predictions and explanations for the annotation flow.

Two ways to run them, chosen by the deployment:

* **Service mode** (a broker is configured): the ``annotation.predict`` /
  ``annotation.explain`` Celery tasks on the ``inference`` queue; the web process
  waits for the answer up to ``INFERENCE_TIMEOUT``.
* **Embedded mode** (no broker): in this process, on one dedicated inference
  thread. Every forward pass of the process runs on that thread, so torch keeps a
  single OpenMP team: a gunicorn gthread worker calling torch from its 16 request
  threads builds a team per thread, and on 2 cores they slow each other down
  (measured: model call p50 20.7 ms from 16 request threads against 14.4 ms from
  one thread). The queue in front of the thread also serialises passes that
  could not run in parallel on the machine's cores anyway.

Either way the web process sends model *references* (version id, artifact path,
sha256) fetched with the round's target models in one query, so neither the
inference thread nor the worker queries the database on the hot path, and the
artifact is still verified against its sha256 when it is loaded. Nothing here
imports torch: the model cache loads on first use (after any fork).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass
from functools import lru_cache

from django.conf import settings

from tasks.models import Round


class InferenceUnavailable(Exception):
    """No model answer in time (no worker, overloaded), or no model to ask."""


@dataclass(frozen=True)
class TargetModel:
    """What an inference call needs to know about a registered model version."""

    id: int
    name: str
    path: str  # as stored: a relative one is under each process's DYNABENCH_MODELS_DIR
    sha256: str

    def message(self) -> dict:
        """The JSON-safe form sent to the worker."""
        return asdict(self)


def target_model(model_version) -> TargetModel:
    return TargetModel(model_version.pk, model_version.name, model_version.artifact_path,
                       model_version.sha256)


def round_target_models(rnd: Round) -> list[TargetModel]:
    """The models that answer for ``rnd``: its ready target models by id, only the
    first in single mode. One query."""
    rows = list(rnd.target_models.filter(status="ready").order_by("pk")
                .values_list("pk", "name", "artifact_path", "sha256"))
    if not rows:
        raise InferenceUnavailable(f"{rnd} has no target model yet.")
    return _answering([TargetModel(*row) for row in rows], rnd.ensemble_mode)


def _answering(models: list[TargetModel], ensemble_mode: str) -> list[TargetModel]:
    """Of a round's ready target models (by id), those that answer: the first in single mode."""
    return models[:1] if ensemble_mode == Round.EnsembleMode.SINGLE else models


@lru_cache(maxsize=4)
def _open_round_models_sql(vendor: str) -> str:
    from django.db import connection

    from leaderboard.models import ModelVersion

    q = connection.ops.quote_name
    through = Round.target_models.through._meta
    mv = ModelVersion._meta
    r = Round._meta
    col = lambda meta, name: q(meta.get_field(name).column)  # noqa: E731
    return (
        f"SELECT m.{col(mv, 'id')}, m.{col(mv, 'name')}, m.{col(mv, 'artifact_path')}, m.{col(mv, 'sha256')}, "
        f"r.{col(r, 'id')}, r.{col(r, 'number')}, r.{col(r, 'ensemble_mode')} "
        f"FROM {q(r.db_table)} r "
        f"JOIN {q(through.db_table)} rt ON rt.{col(through, 'round')} = r.{col(r, 'id')} "
        f"JOIN {q(mv.db_table)} m ON m.{col(mv, 'id')} = rt.{col(through, 'modelversion')} "
        f"WHERE r.{col(r, 'task')} = %s AND r.{col(r, 'status')} = %s AND m.{col(mv, 'status')} = %s "
        f"ORDER BY m.{col(mv, 'id')}"
    )


def open_round_with_models(task) -> tuple[Round | None, list[TargetModel]]:
    """The task's open round and the models that answer for it, in one query when the
    round has a ready target model (the hot path of every new example, so the SQL is
    built once: see dynabench.rawrows); a second query finds the round when it has
    none. ``(None, [])``: no round is open.

    The round comes back partly loaded (id, task, number, status, ensemble mode):
    enough to check contexts against and to count examples on, never to save.
    """
    from dynabench import rawrows

    return open_round_from_rows(task, rawrows.fetch(*open_round_models_statement(task)))


def open_round_models_statement(task) -> tuple[str, list]:
    """``(sql, params)`` of :func:`open_round_with_models`'s query, to batch with others."""
    from django.db import connection

    return _open_round_models_sql(connection.vendor), [task.pk, Round.Status.OPEN.value, "ready"]


def open_round_from_rows(task, rows) -> tuple[Round | None, list[TargetModel]]:
    if not rows:
        return task.open_round(), []
    round_id, number, mode = rows[0][4:]
    rnd = Round(id=round_id, task=task, number=number, status=Round.Status.OPEN, ensemble_mode=mode)
    return rnd, _answering([TargetModel(*row[:4]) for row in rows], mode)


# --- embedded mode: one inference thread per process ---------------------------------

_executor: ThreadPoolExecutor | None = None
_executor_pid: int | None = None
_executor_lock = threading.Lock()


def _embedded() -> bool:
    """Embedded mode: Celery runs tasks in this process (CELERY_TASK_ALWAYS_EAGER, the
    switch the tests flip too)."""
    from dynabench.celery import app

    return bool(app.conf.task_always_eager)


def _inference_executor() -> ThreadPoolExecutor:
    """The process's inference thread (created on first use; a forked child makes its own)."""
    import os

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
        raise InferenceUnavailable(
            f"No {what} within {settings.INFERENCE_TIMEOUT:.0f} s; try again shortly."
        ) from exc


class InferenceFailed(Exception):
    """The worker ran the call and it failed (the worker logged the traceback)."""


def _call(task, runner, *args):
    if _embedded():
        return _wait(_inference_executor().submit(runner, *args), "model answer")
    if settings.INFERENCE_REPLY_URL:
        return _call_with_reply(task, *args)
    from celery.exceptions import TimeoutError as CeleryTimeout

    result = task.apply_async(args=args, queue="inference")
    try:
        return result.get(timeout=settings.INFERENCE_TIMEOUT, disable_sync_subtasks=False)
    except CeleryTimeout as exc:
        result.revoke()
        raise InferenceUnavailable(
            f"No model answer within {settings.INFERENCE_TIMEOUT:.0f} s; try again shortly."
        ) from exc


def _call_with_reply(task, *args):
    """Through the Celery queue; the answer comes back on a Redis list (dynabench.replies)."""
    from dynabench import replies

    url = settings.INFERENCE_REPLY_URL
    key = replies.new_key(task.name)
    sent = task.apply_async(args=args, kwargs={"reply_to": key}, queue="inference", ignore_result=True)
    payload = replies.wait(url, key, settings.INFERENCE_TIMEOUT)
    if payload is None:
        sent.revoke()
        raise InferenceUnavailable(
            f"No model answer within {settings.INFERENCE_TIMEOUT:.0f} s; try again shortly."
        )
    if not payload.get("ok"):
        raise InferenceFailed(f"{payload.get('type', 'Error')}: {payload.get('error', '')}")
    return payload["result"]


PREFETCH_EVERY = 60.0  # seconds between checks of one task's models, per process
_prefetched: dict[int, float] = {}


def prefetch_models(task) -> bool:
    """Embedded mode: start loading the open round's target models on the inference
    thread, without waiting for it. Called when a context is served: the annotator
    spends seconds writing, so the first example of a fresh process no longer waits
    for the model to load (5-6 s on 2 cores). Checked at most once a minute per task
    and process; in service mode the workers load their models when they start.
    True when a load was queued."""
    import logging
    import time

    if not _embedded():
        return False
    now = time.monotonic()
    if now - _prefetched.get(task.pk, -PREFETCH_EVERY) < PREFETCH_EVERY:
        return False
    _prefetched[task.pk] = now
    from .tasks import _ref

    refs = [_ref(m.message()) for m in open_round_with_models(task)[1]]
    import ml

    cache = ml.default_cache()
    missing = [ref for ref in refs if ref not in cache]
    if not missing:
        return False

    def load():
        try:
            ml.warm_up(missing)
        except Exception:  # the request that needs the model reports the problem
            logging.getLogger(__name__).exception("prefetching target models failed")

    _inference_executor().submit(load)
    return True


def predict_with(models: list[TargetModel], rows_inputs: list[dict]) -> list[dict]:
    """One model or an ensemble on ``rows_inputs`` (``ml`` field names).

    Each result carries ``members``: every model's own prediction, by version id.
    """
    from .tasks import predict, predict_refs

    messages = [m.message() for m in models]
    return _call(predict, predict_refs, messages, rows_inputs)


def predict_for_round(rnd: Round, rows_inputs: list[dict]) -> list[dict]:
    """The round's target model (or ensemble) on ``rows_inputs`` (model field names)."""
    return predict_with(round_target_models(rnd), rows_inputs)


def explain_with(model: TargetModel, inputs: dict, target=None, n_steps: int = 10) -> dict:
    from .tasks import explain, explain_ref

    return _call(explain, explain_ref, model.message(), inputs, target, n_steps)
