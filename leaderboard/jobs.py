"""The bodies of the training and evaluation jobs, and waiting for them.

A training job selects its rows, trains, registers the model and queues its
evaluation; an evaluation job scores the model and may then promote it. They sit
above training, evaluation and promotion, which they compose; the Celery tasks
(``leaderboard.tasks``) are thin wrappers over them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import transaction

from core.errors import Conflict, NotFound
from jobs.engine import JobReporter, cancel_job, run_job, wait_for_job
from jobs.models import Job
from registry.models import ModelVersion
from tasks.models import STATIC_ROUND, Task

from . import board, reference
from .evaluation import evaluate_model, start_evaluation
from .promotion import compare_with_target, make_target_or_log, target_if_none
from .static_data import StaticDataError, import_for_training
from .training import (
    MODES,
    select_training_rows,
    start_follow_up_training,
    start_static_training,
    train_and_register,
)

log = logging.getLogger(__name__)


def run_training_job(job_id: int) -> Job:
    def work(job: Job, reporter: JobReporter) -> dict:
        task, params = job.task, job.params
        if params.get("import"):
            import_for_training(task, params["import"], reporter)
        rows, summary = select_training_rows(
            task, rounds=params.get("rounds"), selection=params.get("selection", "verified"),
            dev_fraction=params.get("dev_fraction", 0.1), seed=params.get("options", {}).get("seed", 0),
            include_static=params.get("include_static", True), static_limit=params.get("static_limit"),
            rehearse=params.get("rehearse"), reporter=reporter)
        reporter.progress(1, "training on " + ", ".join(f"{len(v)} {k}" for k, v in rows.items())
                          + f" ({MODES[params.get('mode', 'full')]})")
        parent = ModelVersion.objects.filter(pk=params["parent"]).first() if params.get("parent") else None
        if params.get("parent") and parent is None:
            raise NotFound(f"The parent model #{params['parent']} no longer exists.")
        rounds = task.rounds.filter(number__in=[STATIC_ROUND, *summary["rounds"]] if params.get(
            "include_static", True) else summary["rounds"])
        result = {}

        def registered(model):
            result.update(model_version=model.pk, name=model.name, dev=model.metrics.get("dev_accuracy",
                                                                                       model.metrics.get("dev_f1")))
            if params.get("evaluate"):
                # In the same transaction: a registered model always has its evaluation job.
                result["evaluation_job"] = start_evaluation(
                    model, user=job.created_by, target_if_none=params.get("target_if_none", False),
                    promote_if_better=params.get("promote_if_better", False),
                    measure=params.get("measure", True)).pk
            reporter.complete(result)  # in the registration's transaction: a cancel wins or loses whole

        train_and_register(
            task, rows, name=params["name"], rounds=rounds, user=job.created_by, parent=parent,
            training_data=summary, progress=reporter.progress, on_registered=registered,
            freeze_encoder=params.get("mode") == "head", **params.get("options", {}),
        )
        if params.get("then_train"):  # this job has completed: the task may have its next training job
            start_follow_up_training(task, params["then_train"], user=job.created_by)
        return result

    return run_job(job_id, work)


class JobDidNotSucceed(Exception):
    """A waited-for job failed, was cancelled, timed out or was interrupted."""


def wait_for_success(job: Job, what: str, say: Callable[[str], None], timeout: float | None = None) -> Job:
    """Wait for ``job``, echoing its log lines to ``say``; Ctrl-C cancels it."""
    try:
        job = wait_for_job(job, on_log=lambda line: say(f"  {what}: {line}"), timeout=timeout)
    except KeyboardInterrupt:
        job.refresh_from_db()
        if job.status in Job.ACTIVE:
            cancel_job(job)
            raise JobDidNotSucceed(f"Interrupted: {what} job #{job.pk} cancelled.") from None
        raise
    except (TimeoutError, RuntimeError) as exc:
        raise JobDidNotSucceed(f"{what} job #{job.pk}: {exc}") from None
    if job.status != Job.Status.SUCCEEDED:
        reason = job.error.strip().splitlines()[0] if job.error.strip() else job.status
        raise JobDidNotSucceed(f"The {what} job #{job.pk} {job.status}: {reason}")
    return job


def wait_for_trained_model(job: Job, say: Callable[[str], None], timeout: float | None = None) -> ModelVersion:
    """Wait for a training job, then for the evaluation it queued with the model."""
    job = wait_for_success(job, "train", say, timeout)
    model = ModelVersion.objects.get(pk=job.result["model_version"])
    evaluation = Job.objects.filter(pk=job.result.get("evaluation_job")).first()
    if evaluation is None:  # trained with evaluate=False
        evaluation = start_evaluation(model, user=job.created_by)
    say(f"evaluation job #{evaluation.pk}")
    wait_for_success(evaluation, "evaluate", say, timeout)
    return model


def run_evaluation_job(job_id: int) -> Job:
    def work(job: Job, reporter: JobReporter) -> dict:
        model = ModelVersion.objects.select_related("task").get(pk=job.params["model_version"])
        rounds = model.task.rounds.order_by("number")
        if job.params.get("rounds"):
            rounds = rounds.filter(number__in=job.params["rounds"])
        split = job.params.get("split", "test")
        evaluations = evaluate_model(model, rounds, split=split, reporter=reporter, job=job,
                                     measure=job.params.get("measure", True))
        if not evaluations:
            numbers = ", ".join(str(r.number) for r in rounds) or "none"
            raise Conflict(
                f"No usable {split} examples in round(s) {numbers} of task {model.task.slug}: nothing to score "
                f"{model} on. Import a test set into round 0 (manage.py import_dataset --round 0 --split test, "
                "or bootstrap_demo for the shipped seed set), or let a round's examples be verified first.")
        result = {"evaluations": {f"round {e.round.number}": e.metrics for e in evaluations}}
        if reference.applies(model.task):  # the QA reference line on the same test sets, for the pages to read
            reporter.progress(100, "scoring the sliding-window baseline on the same test sets")
            reference.warm(model.task, [e.round.number for e in evaluations])
        if job.params.get("promote_if_better"):
            result["promotion"] = compare_with_target(model, reporter, job)
        with transaction.atomic():
            reporter.complete(result)  # an update(): no signal, so the board is dropped here
            transaction.on_commit(lambda: board.forget(model.task_id))
        if result.get("promotion", {}).get("promote"):
            make_target_or_log(model)  # after complete(): promotion needs this evaluation finished
        elif job.params.get("target_if_none"):
            target_if_none(model)
        return result

    return run_job(job_id, work)


def train_static_model(task: Task, *, name: str, say: Callable[[str], None], mode: str = "full",
                       static_limit: int | None = None, user=None, job_timeout: float | None = None,
                       **options) -> ModelVersion:
    """Train a model on round 0 as a job, wait for it and for its evaluation, echoing
    their logs to ``say``. Raises ``StaticDataError`` if either does not succeed."""
    job = start_static_training(task, name=name, mode=mode, static_limit=static_limit, user=user,
                                         evaluate=True, **options)
    job.refresh_from_db()
    where = f"sent to a worker on queue {job.queue!r}" if job.celery_task_id else "run by this process"
    say(f"training job #{job.pk} ({where})")
    try:
        return wait_for_trained_model(job, say, job_timeout)
    except JobDidNotSucceed as exc:
        raise StaticDataError(str(exc)) from None
