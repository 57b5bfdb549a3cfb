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

from annotation import counters
from core.errors import Conflict, InvalidInput
from jobs.models import Job
from leaderboard import training
from registry.models import ModelVersion
from tasks.models import Task

from .evaluation import evaluated_model_ids
from .models import Evaluation
from .promotion import current_targets
from .rows import primary_metric


def default_model_name(task: Task, selection: str) -> str:
    """``r<next round>-<selection>``, with ``-2``, ``-3``... when taken. Two researchers
    pressing Train at once get the same name; the second is then refused as a second
    training job of the task, not as a name clash."""
    last = task.rounds.order_by("-number").values_list("number", flat=True).first() or 0
    return training.unique_model_name(task, f"r{last + 1}-{selection}")


class NoNewExamples(Conflict):
    """"Train next" would learn from nothing the target had not learned from (409
    ``no_new_examples``); ``allow_no_new_examples`` trains all the same."""

    code = "no_new_examples"


RECIPE_KEYS = ("epochs", "batch_size", "lr", "seed", "max_steps", "max_minutes")


def seed_recipe(task: Task) -> tuple[dict, ModelVersion | None]:
    """The training recipe a "train next" job follows unless the researcher changes it:
    that of the task's seed model, the first model trained here that was a round's
    target (its epochs, batch size, learning rate, seed and step cap, as its training
    recorded them, and its time budget if it had one), and that model. ({}, None) when there is none (the library's
    defaults then)."""
    models = (ModelVersion.objects.filter(task=task, submitted=False).exclude(target_of_rounds=None)
              .order_by("created_at", "pk").distinct())
    for model in models:
        found = (model.metrics or {}).get("hyperparameters") or {}
        recipe = {key: found[key] for key in RECIPE_KEYS if found.get(key) is not None}
        if recipe:
            return recipe, model
    return {}, None


def new_examples(task: Task, *, rounds=None, selection: str = "verified") -> dict:
    """How many usable examples a "train next" job would learn from that today's target
    did not: the chosen collection rounds' usable (verified, unflagged, unretracted)
    train and dev examples (``fooling``: those that fooled the model), less those the
    target learned from (its training record's count; 0 for a round-0 model).
    Returns {"available", "learned", "new", "target"}."""
    totals = counters.task_totals(task, numbers=training.collection_rounds(task, rounds))
    prefix = "usable_fooled" if selection == "fooling" else "usable"
    available = totals[f"{prefix}_train"] + totals[f"{prefix}_dev"]
    targets = current_targets(task)
    learned = 0
    for target in targets:
        counted = ((target.training_data or {}).get("counts") or {}).get("rounds") or {}
        learned = max(learned, int(counted.get("train", 0)) + int(counted.get("dev", 0)))
    return {"available": available, "learned": learned, "new": max(available - learned, 0),
            "target": targets[0].name if targets else None}


def train_next(task: Task, *, from_parent: bool = False, name: str | None = None, selection: str = "verified",
               allow_no_new_examples: bool = False, user=None, **options) -> Job:
    """"Train the next model" as the admin, the task page and the API start it: a
    default name, ``from_parent`` = start from the current target's weights, and the
    seed model's recipe (``seed_recipe``) for every option the caller leaves out.
    Refused (``NoNewExamples``) when the chosen rounds hold no usable example the
    target did not learn from, unless ``allow_no_new_examples``."""
    if selection not in training.SELECTIONS:
        raise InvalidInput.field("selection", f"Must be one of {sorted(training.SELECTIONS)}.")
    parent = None
    if from_parent:
        targets = current_targets(task)
        if not targets:
            raise InvalidInput.field("from_parent", f"Task {task.slug} has no target model to start from.")
        parent = targets[0]
    fresh = new_examples(task, rounds=options.get("rounds"), selection=selection)
    if not fresh["new"] and not allow_no_new_examples:
        learned = (f"; today's target {fresh['target']} learned from {fresh['learned']} of them"
                   if fresh["target"] else "")
        raise NoNewExamples(
            f"Task {task.slug} has no new usable examples to learn from: the chosen rounds hold "
            f"{fresh['available']} usable ({training.SELECTIONS[selection]}){learned}. A new model would learn "
            "what the target learned, and nothing was queued. Let the open round's examples be written and "
            "verified first, or train anyway (allow_no_new_examples).")
    recipe, seed = seed_recipe(task)
    given = {key: value for key, value in options.items() if key in RECIPE_KEYS and value is not None}
    options = {**options, **{key: value for key, value in recipe.items() if key not in given}}
    return training.start_training(task, name=name or default_model_name(task, selection), selection=selection,
                                   parent=parent, user=user,
                                   recipe={"from": seed.name if seed else None, "changed": sorted(given)},
                                   **options)


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
    done = evaluated_model_ids(ids)
    evaluated = {m.pk: m.pk in done for m in models}
    return Comparison(metric, sorted(numbers), models, scores, evaluated)


