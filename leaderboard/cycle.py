"""Closing the round loop: compare a candidate with the current target, promote it.

A round's cycle, from the admin, the API or ``manage.py replay``:

    upload contexts -> open -> collect and validate -> train next (a Job)
    -> evaluate the candidate on every round's test split (a Job) -> promote

Promoting opens round r+1 (the prepared draft round if there is one) with the
candidate, or an ensemble of it and the previous rounds' targets, as its target,
and closes round r. A model whose evaluation has not finished is never promoted.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Max

from annotation.inference import preload
from core.errors import Conflict, InvalidInput
from tasks import services as task_services
from tasks.models import STATIC_ROUND, Job, ModelVersion, Round, Task
from tasks.registry import target_model

from . import services
from .models import Evaluation
from .services import has_finished_evaluation, primary_metric

MAX_ENSEMBLE = 5


def current_targets(task: Task) -> list[ModelVersion]:
    """The open round's target models (the latest opened round's if none is open)."""
    rnd = task.open_round() or task.rounds.exclude(opened_at=None).order_by("-number").first()
    if rnd is None:
        return []
    return list(rnd.target_models.order_by("pk"))


def default_model_name(task: Task, selection: str) -> str:
    """``r<next round>-<selection>``, with ``-2``, ``-3``... when taken. Two researchers
    pressing Train at once get the same name; the second is then refused as a second
    training job of the task, not as a name clash."""
    last = task.rounds.order_by("-number").values_list("number", flat=True).first() or 0
    return services.unique_model_name(task, f"r{last + 1}-{selection}")


def train_next(task: Task, *, from_parent: bool = False, name: str | None = None, selection: str = "verified",
               user=None, **options) -> Job:
    """"Train the next model" as the admin, the task page and the API start it: a
    default name, and ``from_parent`` = start from the current target's weights."""
    if selection not in services.SELECTIONS:
        raise InvalidInput.field("selection", f"Must be one of {sorted(services.SELECTIONS)}.")
    parent = None
    if from_parent:
        targets = current_targets(task)
        if not targets:
            raise InvalidInput.field("from_parent", f"Task {task.slug} has no target model to start from.")
        parent = targets[0]
    return services.start_training(task, name=name or default_model_name(task, selection), selection=selection,
                                   parent=parent, user=user, **options)


def candidates(task: Task, limit: int | None = None) -> list[ModelVersion]:
    """Ready models that were never a round's target, newest first."""
    rows = ModelVersion.objects.filter(task=task, status=ModelVersion.Status.READY,
                                       target_of_rounds=None).order_by("-created_at", "-pk")
    return list(rows[:limit] if limit else rows)


@dataclass
class Comparison:
    metric: str
    rounds: list[int]
    models: list[ModelVersion]
    # scores[model_id][round_number] = {"value", "num_examples"} or missing
    scores: dict[int, dict[int, dict]]
    evaluated: dict[int, bool]

    def rows(self):
        """Per round: its number and each model's value (or None), in ``models`` order."""
        for number in self.rounds:
            yield number, [self.scores.get(m.pk, {}).get(number) for m in self.models]


def compare(task: Task, models: list[ModelVersion]) -> Comparison:
    """The models' evaluations side by side, per round (round 0: the static test set)."""
    metric = primary_metric(task)
    ids = [m.pk for m in models]
    scores: dict[int, dict[int, dict]] = {}
    numbers = set()
    for evaluation in Evaluation.objects.filter(model_version_id__in=ids, split="test").select_related("round"):
        value = evaluation.metrics.get(metric)
        scores.setdefault(evaluation.model_version_id, {})[evaluation.round.number] = {
            "value": value, "num_examples": evaluation.num_examples,
            "model_error_rate": evaluation.model_error_rate}
        numbers.add(evaluation.round.number)
    done = services.evaluated_model_ids(ids)
    evaluated = {m.pk: m.pk in done for m in models}
    return Comparison(metric, sorted(numbers), models, scores, evaluated)


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
    import ml

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
    from .board import target_scores

    [score] = target_scores(task, [model])
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
