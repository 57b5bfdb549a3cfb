"""Making a model a round's target: promotion (the next round opens with it), the
checks before it, and the automatic promotions after an evaluation (the demo's
first targets, a real-data model that beats the seed one)."""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Max

import ml
from annotation.inference import preload
from core.errors import Conflict, DomainError, InvalidInput
from tasks import services as task_services
from tasks.jobs import JobReporter
from tasks.models import STATIC_ROUND, Job, ModelVersion, Round, Task
from tasks.registry import target_model

from . import board
from .evaluation import evaluate_model, has_finished_evaluation
from .models import Evaluation
from .rows import primary_metric

log = logging.getLogger(__name__)


MAX_ENSEMBLE = 5


def current_targets(task: Task) -> list[ModelVersion]:
    """The open round's target models (the latest opened round's if none is open)."""
    rnd = task.open_round() or task.rounds.exclude(opened_at=None).order_by("-number").first()
    if rnd is None:
        return []
    return list(rnd.target_models.order_by("pk"))


def ensemble_members(task: Task, model: ModelVersion, size: int) -> list[ModelVersion]:
    """``model`` and the targets of the latest rounds before it, ``size`` in all."""
    members = [model]
    if size > 1:
        rounds = (Round.objects.filter(task=task).exclude(number=STATIC_ROUND).exclude(opened_at=None)
                  .order_by("-number").prefetch_related("target_models"))
        for rnd in rounds:
            for target in sorted(rnd.target_models.all(), key=lambda m: m.pk):
                if target not in members and target.status == ModelVersion.Status.READY:
                    members.append(target)
            if len(members) >= size:
                break
    if len(members) < size:
        raise Conflict(f"An ensemble of {size} needs {size - 1} earlier target model(s); "
                       f"task {task.slug} has {len(members) - 1}.")
    return members[:size]


def check_promotable(task: Task, models: list[ModelVersion]) -> None:
    for member in models:
        if member.task_id != task.pk:
            raise InvalidInput.field("model", f"{member} belongs to another task.")
        if member.status != ModelVersion.Status.READY:
            raise Conflict(f"{member} is {member.status}; only ready models are promoted.")
        if not has_finished_evaluation(member):
            running = Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL, status__in=Job.ACTIVE,
                                         params__model_version=member.pk).first()
            hint = f" (job #{running.pk} is {running.status})" if running else "; evaluate it first"
            raise Conflict(f"{member} has no finished evaluation{hint}. Promotion needs its scores on every round.")
        try:
            ml.verify_artifact(member.artifact_dir, member.sha256)
        except ml.ArtifactError as exc:
            raise Conflict(f"{member}'s artifact does not check: {exc}") from None


def check_above_baseline(task: Task, model: ModelVersion) -> None:
    """Conflict when ``model`` scores below the majority-class answer on the static test
    set: a target worse than a constant answer makes every example "fool" it."""
    [score] = board.target_scores(task, [model])
    if score["grown_to"]:
        raise Conflict(
            f"{model} was scored on {score['num_examples']} static test examples; the set has {score['grown_to']} "
            "now, so its score cannot be set beside the majority-class answer there. Evaluate it again first.")
    if score["value"] is not None and score["baseline"] is not None and score["value"] < score["baseline"]:
        raise Conflict(
            f"{model} scores {score['value']:.1%} {score['metric']} on the static test set, below the "
            f"{score['baseline']:.1%} of always answering the most common label: as a target, nearly any example "
            "would fool it. Train a better model, or promote it anyway with the override "
            "(allow_below_baseline).")


def promote(task: Task, model: ModelVersion, *, ensemble_size: int = 1, allow_below_baseline: bool = False,
            user=None) -> Round:
    """Open the next round with ``model`` (or it and the last rounds' targets, an
    ensemble of ``ensemble_size``) as its target; the open round closes.

    The next round is the newest draft round after the open one, if a researcher
    prepared it (contexts uploaded, say), else a new round r+1. A model below the
    majority-class answer on the static test set is refused unless
    ``allow_below_baseline`` (``check_above_baseline``).
    """
    if not isinstance(ensemble_size, int) or isinstance(ensemble_size, bool) or not 1 <= ensemble_size <= MAX_ENSEMBLE:
        raise InvalidInput.field("ensemble_size", f"Must be a whole number from 1 to {MAX_ENSEMBLE}.")
    members = ensemble_members(task, model, ensemble_size)
    check_promotable(task, members)
    if not allow_below_baseline:
        check_above_baseline(task, model)
    preload([target_model(m) for m in members])  # loaded before it becomes the target: no cold start
    mode = Round.EnsembleMode.SINGLE if len(members) == 1 else Round.EnsembleMode.MEAN
    with transaction.atomic():
        Task.objects.select_for_update().filter(pk=task.pk).exists()
        last_opened = task.rounds.exclude(opened_at=None).aggregate(n=Max("number"))["n"] or STATIC_ROUND
        rnd = task.rounds.filter(status=Round.Status.DRAFT, number__gt=last_opened).order_by("number").first()
        description = f"Target: {', '.join(m.name for m in members)} (promoted" + (
            f" by {user.get_username()})" if user is not None else ")")
        if rnd is None:
            rnd = task_services.create_round(task, target_models=members, ensemble_mode=mode,
                                             description=description)
        else:
            task_services.set_round_targets(rnd, members, ensemble_mode=mode)
            if not rnd.description:
                Round.objects.filter(pk=rnd.pk).update(description=description)
        return task_services.open_round(rnd)


def make_target(task: Task, model: ModelVersion, *, user=None) -> tuple[Round, bool]:
    """Make ``model`` the target of the task's next round; returns (the round, promoted).

    The open round, if it has no target model yet: nobody could write an example
    in it (every one would have been refused with 503), so giving it its first
    target changes no round's history. Otherwise ``promote``: the next round
    opens with ``model`` and the open one closes, so each round keeps the one
    target its examples were written against. Either way the model must be
    promotable (ready, its evaluation finished, its artifact intact).
    """
    check_promotable(task, [model])
    preload([target_model(model)])
    with transaction.atomic():
        Task.objects.select_for_update().filter(pk=task.pk).exists()
        rnd = task.open_round()
        if rnd is not None and not rnd.target_models.exists():
            rnd.target_models.add(model)
            if not rnd.description:
                Round.objects.filter(pk=rnd.pk).update(description=f"Target: {model.name}")
            return rnd, False
    return promote(task, model, user=user), True


def compare_with_target(model: ModelVersion, reporter: JobReporter, job: Job) -> dict:
    """Whether ``model`` should replace the open round's target: it scores higher on
    round 0's test set, and not below always answering the most common label there
    (promotion would refuse that). The target is scored again first, on that set as it is now (an
    import may have grown it since its own evaluation), so both numbers count the same
    examples. Returns {"promote": bool, "reason": str}, and logs the reason."""
    task = model.task
    rnd = task.open_round()
    targets = list(rnd.target_models.all()) if rnd is not None else []
    static = task.rounds.filter(number=STATIC_ROUND).first()
    metric = primary_metric(task)

    def decided(promote: bool, reason: str) -> dict:
        reporter.progress(100, reason)
        return {"promote": promote, "reason": reason}

    if rnd is None:
        return decided(False, "no open round: nothing to promote into")
    if model in targets:
        return decided(False, f"{model.name} is the target already")
    mine = Evaluation.objects.filter(model_version=model, round=static, split="test").first() if static else None
    if mine is None or mine.metrics.get(metric) is None:
        return decided(False, f"{model.name} has no {metric} on round 0's test split: the target stays")
    if not targets:
        return decided(True, f"round {rnd.number} has no target yet: {model.name} becomes it")
    reporter.progress(100, f"scoring the target ({', '.join(t.name for t in targets)}) on round 0's "
                           f"{mine.num_examples} test examples too")
    theirs = [evaluation.metrics.get(metric) for target in targets
              for evaluation in evaluate_model(target, [static], job=job)]
    theirs = [value for value in theirs if value is not None]
    if not theirs:
        return decided(True, f"the target has no {metric} on round 0: {model.name} becomes the target")
    score, best = mine.metrics[metric], max(theirs)
    board.forget(task.pk)  # the majority line on the test set as it is now (an import may have grown it)
    majority = board.target_scores(task, [model])[0]["baseline"]
    summary = (f"{model.name} {score:.1%} against the target's {best:.1%} {metric} on round 0's "
               f"{mine.num_examples} test examples"
               + (f" (always answering the most common label: {majority:.1%})" if majority is not None else ""))
    if majority is not None and score < majority:  # promotion would refuse it (check_above_baseline)
        return decided(False, f"{summary}: below the majority line, the target stays")
    if score > best:
        return decided(True, f"{summary}: {model.name} becomes the target")
    return decided(False, f"{summary}: the target stays")


def challenger(task: Task) -> dict:
    """For the public task page: a model on its way to replace the target if it scores
    higher (its job, queued or running), and the last such decision. Either may be None.
    One query: the page's budget is small."""
    from django.db.models import Q

    rows = list(Job.objects.filter(task=task).filter(
        Q(status__in=Job.ACTIVE) & (Q(params__promote_if_better=True) | Q(params__has_key="then_train"))
        | Q(kind=Job.Kind.EVALUATE_MODEL, status=Job.Status.SUCCEEDED, result__has_key="promotion"))
        .order_by("-pk")[:20])
    pending = [job for job in rows if job.status in Job.ACTIVE]
    decided = next((job for job in rows if job.status == Job.Status.SUCCEEDED), None)
    return {"job": pending[-1] if pending else None, "last": decided.result["promotion"]["reason"] if decided else None}


def make_target_or_log(model: ModelVersion) -> None:
    """``make_target``, a refusal logged (the evaluation it follows has succeeded)."""
    try:
        rnd, promoted = make_target(model.task, model)
    except DomainError as exc:
        log.warning("%s could not become a target of %s: %s", model, model.task.slug, exc.message)
        return
    log.info("%s is the target of %s round %s%s", model, model.task.slug, rnd.number,
             " (promoted: the round before closed)" if promoted else "")


def target_if_none(model: ModelVersion) -> bool:
    """Make ``model`` the target of its task's open round if that round has none yet
    (nobody can write in it before). True if it did. A refusal is logged, not raised:
    the evaluation it follows has succeeded all the same."""
    rnd = model.task.open_round()
    if rnd is None or rnd.target_models.exists():
        return False
    try:
        make_target(model.task, model)
    except DomainError as exc:
        log.warning("%s could not become the target of %s round %s: %s", model, model.task.slug, rnd.number,
                    exc.message)
        return False
    return True
