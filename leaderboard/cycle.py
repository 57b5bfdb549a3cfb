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

from core.errors import InvalidInput
from leaderboard import training
from tasks.models import Job, ModelVersion, Task

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


def train_next(task: Task, *, from_parent: bool = False, name: str | None = None, selection: str = "verified",
               user=None, **options) -> Job:
    """"Train the next model" as the admin, the task page and the API start it: a
    default name, and ``from_parent`` = start from the current target's weights."""
    if selection not in training.SELECTIONS:
        raise InvalidInput.field("selection", f"Must be one of {sorted(training.SELECTIONS)}.")
    parent = None
    if from_parent:
        targets = current_targets(task)
        if not targets:
            raise InvalidInput.field("from_parent", f"Task {task.slug} has no target model to start from.")
        parent = targets[0]
    return training.start_training(task, name=name or default_model_name(task, selection), selection=selection,
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
    done = evaluated_model_ids(ids)
    evaluated = {m.pk: m.pk in done for m in models}
    return Comparison(metric, sorted(numbers), models, scores, evaluated)


