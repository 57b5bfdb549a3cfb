# Long on purpose: one computation: stored evaluations to ranked rows, intervals, ties, and its cache.
"""A task's leaderboard: every evaluated model on every round's test set, with 95%
intervals, ranked by a Dynascore the visitor may re-weight.

Datasets are the rounds' test splits (round 0: the static test set). Intervals
are percentile bootstraps over examples, 1,000 resamples (``ml.scoring``),
computed when a model is evaluated and stored on its Evaluation with the
resampled values of the task's metric. Round ``r``'s dataset is resampled with
seed ``r`` (``dataset_seed``): every model gets the same draws on a dataset, and
each dataset its own.

Averages over datasets use the dataset weights (1 each unless the visitor sets
them, ``?dataset_weights=0:1,1:2``). The performance average's resamples are the
same weighted average of each dataset's resamples: a bootstrap stratified by
dataset, so the interval describes the number shown.

Ties: all models are scored on the same examples and resampled with the same
draws, so replicate ``r`` is the same resample for every model. The board ranks by
the Dynascore, so ``tied_with_next`` tests the Dynascore: the difference of two
neighbours' per-replicate Dynascores (``dynascore.rank``, the AMRS recomputed in
each replicate) is a *paired* bootstrap of the ranked quantity, and neighbours
whose 95% interval holds 0 are marked tied. ``performance_tied_with_next`` is the
same test on the (weighted) performance averages alone, a column of its own. Two
models pair only when every dataset's examples (a digest of their ids, in order)
and seed match; otherwise either tie is unknown. These are percentile intervals of
a difference, not tests corrected for the many neighbour pairs on a board: they
say "these two are not told apart by this test set", not more.

Metrics on the board (measured when a model is evaluated, ``leaderboard.evaluation``;
this module only reads what was stored):
- performance: the task's metric (accuracy, or SQuAD F1 for QA);
- calibration: the expected calibration error (classification only);
- throughput: examples/s at batch 32, the median of ``EVALUATION_TIMED_PASSES`` timed
  passes (the scoring pass, then passes over up to ``THROUGHPUT_SAMPLE`` examples);
  one at a time is kept too, as ``throughput_batch1``;
- memory: measured, MiB: the peak resident memory that loading the model and a
  batch-32 forward pass add to a process that holds torch and transformers' shared
  model code (``ml.memory``; the same runtime overhead for every model). The
  float32 parameter size is kept apart (``parameters_mb``, and the parameter count
  column);
- robustness and fairness: the share of answers unchanged under seeded typos,
  and under name and gender-word swaps (``ml.scoring``), on each dataset's whole
  test set, or a seeded sample of ``PERTURBED_SAMPLE`` examples of a larger one
  (fairness: those a swap changed).
Performance, calibration, robustness and fairness are resampled on the same
bootstrap draws (``uncertainty``), and throughput by drawing one of its timed
runs per replicate: the Dynascore's interval resamples all of them together.
Each metric is averaged over the datasets with the dataset weights, and so are
its replicates (a bootstrap stratified by dataset); an evaluation stored before
the other metrics were resampled falls back to the normal approximation of the
weighted mean (weighted half-widths added in quadrature), and its other metrics
stay at their values in the Dynascore's replicates. Memory is one measurement,
without an interval. A metric joins the Dynascore only when every ranked model
has it.

A reference row shows the line a model has to clear. Classification: the
majority-class baseline, which predicts the most common label of the task's
training data for every example, with that label's share as its confidence
(shown with its performance and calibration). Extractive QA: the sliding-window
baseline of the SQuAD paper (``leaderboard.reference``, ``ml.baselines``), scored
with the task's F1 on the same examples and resampled with the same draws as the
models (its exact match is in the row's ``training_data``). Either is in no rank
and has no Dynascore (it has no throughput or memory to weigh).
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import uuid
from collections import Counter
from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.db.models import Q

from core.errors import InvalidInput
from ml import scoring
from ml.submissions import parameter_count
from registry.models import ModelVersion, resolve_artifact_path
from tasks.models import STATIC_ROUND, Round, Task
from tasks.roles import is_researcher

from . import dynascore, reference
from .evaluation import (
    CONFIDENCE,
    RESAMPLES,
    SEED,
    dataset_seed,
    evaluated_model_ids,
    metric_replicates,
    parameters_key,
    unpack,
)
from .models import Evaluation
from .rows import primary_metric, usable_examples

BASELINE = "majority-class baseline"
# How the task page and the promotion rules name each kind of reference line.
REFERENCE_DESCRIPTION = {"majority": "always answering the most common label", reference.LINE: reference.DESCRIPTION}
# Board metric -> the key its per-dataset value has in Evaluation.metrics.
STORED = {"calibration": "ece", "throughput": "throughput", "memory": "memory_mb",
          "robustness": "robustness", "fairness": "fairness"}


def dataset_name(rnd: Round | int) -> str:
    number = getattr(rnd, "number", rnd)
    return "static" if number == 0 else f"round {number}"


def dataset_number(name: str) -> int:
    """The round number of a dataset name (``dataset_name``'s inverse)."""
    return 0 if name == "static" else int(name.removeprefix("round "))


@dataclass
class Board:
    task: Task
    weights: dict
    datasets: list[str]
    rows: list[dict]
    dataset_weights: dict = dataclasses.field(default_factory=dict)  # {dataset name: weight}


def _metric(value, interval=None) -> dict:
    low, high = (interval or (None, None))
    return {"value": value, "ci_low": low, "ci_high": high}


def _parameters_of(models: list[ModelVersion]) -> dict[int, int | None]:
    """Parameter counts by model id, cached per artifact (one cache round trip; an
    evaluation puts them there). A count not cached is read from the artifact where this
    machine has it, never downloaded for a page: an artifact in object storage that is
    not here shows no count until its evaluation stores one."""
    keys = {m.pk: parameters_key(m.sha256) for m in models}
    found = cache.get_many(list(keys.values()))
    counts = {}
    for model in models:
        count = found.get(keys[model.pk])
        local = resolve_artifact_path(model.artifact_path)
        if count is None and model.sha256 and local.is_dir():  # an endpoint model has no artifact
            try:
                count = parameter_count(local)
            except Exception:
                count = -1
            cache.set(keys[model.pk], count, None)
        counts[model.pk] = count if count is not None and count >= 0 else None
    return counts


def _qa_baseline(task: Task, numbers: list[int]) -> dict | None:
    """``reference.line`` keyed by dataset name, as ``_baseline`` answers."""
    found = reference.line(task, numbers)
    if found is None:
        return None
    datasets = {dataset_name(n): d for n, d in found["datasets"].items()}
    exact = {name: d["exact_match"] for name, d in datasets.items()}
    return {"label": None, "name": found["name"], "kind": reference.LINE,
            "training_data": {**found["training_data"], "exact_match": exact}, "datasets": datasets,
            "replicates": {dataset_name(n): v for n, v in found["replicates"].items()}}


def _baseline(task: Task, numbers: list[int]) -> dict | None:
    """The reference line on each of the rounds' test sets: the majority-class answer,
    or for QA the sliding-window baseline (``_qa_baseline``)."""
    config = task.parsed_config
    if reference.applies(task):
        return _qa_baseline(task, numbers)
    train = Counter(t.get("label") for t in usable_examples(task, split="train").values_list("target", flat=True))
    if not train:
        return None
    label = max(config.label_names, key=lambda name: (train.get(name, 0), -config.label_names.index(name)))
    share = train[label] / sum(train.values())
    datasets, replicates = {}, {}
    for number in numbers:
        # The evaluations' order (usable_examples'), so the resamples pair with the models'.
        golds = [target.get("label") for target in
                 usable_examples(task, split="test", rounds=[number]).values_list("target", flat=True)]
        if not golds:
            continue
        per_example = [float(g == label) for g in golds]
        values = scoring.bootstrap_replicates(per_example, n_resamples=RESAMPLES, seed=dataset_seed(number))
        ece = abs(share - float(np.mean(per_example)))
        datasets[dataset_name(number)] = {"performance": float(np.mean(per_example)), "n": len(golds),
                                          "interval": scoring.percentile_interval(values, CONFIDENCE), "ece": ece}
        replicates[dataset_name(number)] = values
    return {"label": label, "name": BASELINE, "kind": "majority", "training_data": {"majority_label": label},
            "datasets": datasets, "replicates": replicates}


def _static_baseline(task: Task) -> dict | None:
    """The reference line on the static test set (the majority-class answer, or for QA
    the sliding-window baseline), cached like the boards (the public task page asks for
    it on every view; it reads every training label, or every test question)."""
    seconds = settings.LEADERBOARD_CACHE_SECONDS
    key = f"dynabench:static-reference:{task.pk}:{_version(task)}" if seconds else None
    if key and (found := cache.get(key)) is not None:
        return found or None  # {} stands for "none" in the cache
    found = _baseline(task, [STATIC_ROUND]) or {}
    baseline = found.get("datasets", {}).get(dataset_name(STATIC_ROUND))
    if baseline:
        baseline = {"performance": baseline["performance"], "n": baseline["n"], "kind": found["kind"],
                    "name": found["name"], "exact_match": baseline.get("exact_match")}
    if key:
        cache.set(key, baseline or {}, seconds)
    return baseline


def target_scores(task: Task, models) -> list[dict]:
    """Each of ``models`` on the static test set (round 0), beside the reference line
    there (``baseline``: the majority-class answer, or for QA the sliding-window
    baseline; ``reference`` names it, ``reference_kind`` is "majority" or "qa",
    ``reference_exact_match`` is the QA baseline's exact match): what a task page says
    about how good its target is. A model not scored there yet has ``value`` None. A
    score from when the static test set was smaller (an import since) is not set beside
    the baseline on today's set: ``grown_to`` says how many examples the set has now,
    and ``baseline`` is None."""
    if not models:
        return []
    metric = primary_metric(task)
    found = {e.model_version_id: e for e in Evaluation.objects.filter(
        model_version__in=models, round__task=task, round__number=STATIC_ROUND, split="test")}
    baseline = _static_baseline(task)
    out = []
    for model in models:
        evaluation = found.get(model.pk)
        value = evaluation.metrics.get(metric) if evaluation else None
        interval = evaluation.intervals.get(metric) if evaluation else None
        grown = bool(evaluation and baseline and baseline.get("n") not in (None, evaluation.num_examples))
        line = baseline["performance"] if baseline and not grown else None
        kind = baseline["kind"] if baseline else task.parsed_config.kind.reference_line
        out.append({"model": model, "metric": metric, "value": value, "interval": interval,
                    "num_examples": evaluation.num_examples if evaluation else 0,
                    "grown_to": baseline["n"] if grown else None, "baseline": line,
                    "reference_kind": kind, "reference": REFERENCE_DESCRIPTION[kind],
                    "reference_exact_match": baseline.get("exact_match") if baseline and not grown else None,
                    "above_baseline": (bool(interval and line is not None and interval[0] > line)
                                       if value is not None else None)})
    return out


def parse_dataset_weight(key: str, raw: str) -> tuple[int, float]:
    """One part of ``parse_dataset_weights``: a round number and a weight from 0 to 5. The
    messages name no field: the API's error body puts them under ``dataset_weights``."""
    key, raw = key.strip(), raw.strip()
    if not re.fullmatch(r"[0-9]{1,6}", key):
        raise ValueError(f"{key!r} is not a round number (0 for the static test set).")
    if not dynascore.NUMBER.fullmatch(raw) or not 0 <= float(raw) <= 5:
        raise ValueError(f"the weight of round {int(key)} must be a number from 0 to 5, got {raw!r}.")
    return int(key), round(float(raw), 1)  # as parse_weights: one decimal


def parse_dataset_weights(text: str | None) -> dict[int, float]:
    """``"0:1,1:2.5"`` -> ``{0: 1.0, 1: 2.5}``: a weight from 0 to 5 per round number
    (0 is the static test set); datasets not named weigh 1. Spaces around parts are
    ignored, as in ``dynascore.parse_weights``. ValueError says what is wrong."""
    if text is None or not text.strip():
        return {}
    found: dict[int, float] = {}
    for position, part in enumerate(text.split(","), start=1):
        key, sep, raw = (piece.strip() for piece in part.partition(":"))
        if not sep or not re.fullmatch(r"[0-9]{1,6}", key):
            raise ValueError(f"part {position} ({part.strip()!r}) is not ROUND:WEIGHT, a round "
                             "number (0 for the static test set) and a weight from 0 to 5.")
        number, weight = parse_dataset_weight(key, raw)
        if number in found:
            raise ValueError(f"round {number} is weighted twice.")
        found[number] = weight
    return found


def _weight_vector(numbers: list[int], dataset_weights: dict[int, float] | None) -> np.ndarray:
    chosen = dataset_weights or {}
    unknown = sorted(set(chosen) - set(numbers))
    if unknown:
        have = ", ".join(str(n) for n in numbers) or "none"
        raise InvalidInput.field("dataset_weights", f"The task has no test set for round {unknown[0]} "
                                                    f"(rounds with one: {have}).")
    vector = np.array([float(chosen.get(n, 1.0)) for n in numbers])
    if numbers and vector.sum() <= 0:
        raise InvalidInput.field("dataset_weights",
                                 "The dataset weights add up to 0: give at least one dataset a weight above 0.")
    return vector


def _weighted(values, weights: np.ndarray) -> float:
    return float(np.dot(weights, np.asarray(values, dtype=float)) / weights.sum())


def _stored_rows(task: Task, user):
    """The models ``user`` may see that finished an evaluation, and their test
    evaluations as ``{model id: {round number: (metrics, intervals, digest, values, n,
    other metrics' replicates)}}``."""

    models = list(visible_models(task, user).filter(status=ModelVersion.Status.READY)
                  .select_related("created_by").order_by("created_at", "pk"))
    done = evaluated_model_ids([m.pk for m in models])
    models = [m for m in models if m.pk in done]
    by_model: dict[int, dict[int, tuple]] = {}
    found = (Evaluation.objects.filter(model_version__in=[m.pk for m in models], split="test")
             .values_list("model_version_id", "round__number", "metrics", "intervals", "replicates",
                          "replicate_values", "num_examples", "metric_replicate_values"))
    for model_id, number, metrics, intervals, replicates, blob, n, other_blob in found:
        # What pairs two models' resamples: the same examples, in the same order, the same draws.
        digest = (replicates.get("examples"), replicates.get("seed")) if isinstance(replicates, dict) else None
        by_model.setdefault(model_id, {})[number] = (metrics, intervals, digest, unpack(blob), n,
                                                     metric_replicates(replicates, other_blob))
    return models, by_model


def board(task: Task, weights: dict | None = None, user=None, dataset_weights: dict | None = None) -> Board:
    """The ranked rows of ``task``'s leaderboard as ``user`` may see it: public models,
    their own private ones, all for the task's researchers (see the module docstring).
    ``dataset_weights``: ``{round number: weight}`` (``parse_dataset_weights``); a round
    the task has no test set for, or all weights 0, is an InvalidInput (400)."""
    weights = dynascore.DEFAULT_WEIGHTS if weights is None else weights
    metric = primary_metric(task)
    models, by_model = _stored_rows(task, user)
    numbers = sorted({number for found in by_model.values() for number in found})
    names = [dataset_name(n) for n in numbers]
    dw = _weight_vector(numbers, dataset_weights)
    shown_weights = dict(zip(names, (float(w) for w in dw), strict=True))
    if not names:  # no test set anywhere yet: nothing to rank (nor a baseline to score)
        return Board(task, weights, [], [], {})

    rows, replicate_values, digests = [], {}, {}
    for model in models:
        found = by_model.get(model.pk, {})
        if set(found) != set(numbers):
            continue  # not scored on every dataset yet
        stored = [found[n] for n in numbers]
        datasets = {name: {**_metric(metrics.get(metric), intervals.get(metric)), "num_examples": n}
                    for name, (metrics, intervals, _, _, n, _) in zip(names, stored, strict=True)}
        values = [entry[3] for entry in stored]
        paired = all(v is not None for v in values) and len({len(v) for v in values}) == 1
        if paired:
            replicate_values[model.pk] = {"performance": dw @ np.vstack(values) / dw.sum()}
            digests[model.pk] = tuple(entry[2] for entry in stored)
        performance = [datasets[name]["value"] for name in names]
        if any(v is None for v in performance):
            continue  # an evaluation without the task's metric: nothing to rank it by
        row_metrics = {"performance": _weighted(performance, dw)}
        scores = {}
        for metric_name, key in STORED.items():
            per_dataset = [entry[0].get(key) for entry in stored]
            if any(v is None for v in per_dataset):
                continue
            row_metrics[metric_name] = _weighted(per_dataset, dw)
            resampled = [entry[5].get(key) for entry in stored]
            if paired and all(r is not None and len(r) == len(values[0]) for r in resampled):
                # Resampled with performance, on the same draws: a bootstrap stratified by dataset.
                replicate_values[model.pk][metric_name] = dw @ np.vstack(resampled) / dw.sum()
                interval = scoring.percentile_interval(replicate_values[model.pk][metric_name], CONFIDENCE)
            else:
                interval = _combined(row_metrics[metric_name], dw, [entry[1].get(key) for entry in stored])
            scores[metric_name] = _metric(row_metrics[metric_name], interval)
        # What a model behind an endpoint cannot have (its memory): shown as "remote", and
        # left out of every model's Dynascore by the rule below, never counted as zero.
        remote = sorted(name for name, key in STORED.items()
                        if any(key in entry[0].get("remote", ()) for entry in stored))
        rows.append({"model": model.pk, "name": model.name, "created": model.created_at, "metrics": row_metrics,
                     "datasets": datasets, "info": model, "scores": scores, "remote": remote})

    baseline_row = None
    baseline = _baseline(task, numbers)
    if baseline and set(baseline["datasets"]) == set(names):
        datasets = {name: {**_metric(d["performance"], d["interval"]), "num_examples": d["n"]}
                    for name, d in baseline["datasets"].items()}
        values = dw @ np.vstack([baseline["replicates"][n] for n in names]) / dw.sum()
        performance = _weighted([baseline["datasets"][n]["performance"] for n in names], dw)
        scores = {"performance": _metric(performance, scoring.percentile_interval(values, CONFIDENCE))}
        if all("ece" in baseline["datasets"][n] for n in names):
            scores["calibration"] = _metric(_weighted([baseline["datasets"][n]["ece"] for n in names], dw))
        baseline_row = {
            "model": baseline["name"], "name": baseline["name"], "created": None, "info": None, "datasets": datasets,
            "label": baseline["label"], "training_data": baseline["training_data"], "rank": None, "dynascore": None,
            "tied_with_next": None, "performance_tied_with_next": None, "scores": scores}
    if not rows:
        return Board(task, weights, names, [baseline_row] if baseline_row else [], shown_weights)
    for metric_name in STORED:  # a metric joins the Dynascore when every model has it
        if any(metric_name not in row["metrics"] for row in rows):
            for row in rows:
                # Still shown (``scores``) where a model has it; weighed in nobody's Dynascore.
                row["metrics"].pop(metric_name, None)

    def is_tie(a, b):
        if a not in replicate_values or b not in replicate_values:
            return None
        if digests[a] != digests[b]:
            return None  # scored on different examples (or in another order): not paired
        low, high = scoring.percentile_interval(replicate_values[a]["performance"]
                                                - replicate_values[b]["performance"], CONFIDENCE)
        return low <= 0 <= high

    # The Dynascore's replicates: each metric resampled where it was (older evaluations
    # stored performance's only; their other metrics stay at their values).
    complete = len(replicate_values) == len(rows)
    fixed = ({row["model"]: {name: replicate_values[row["model"]].get(name, value)
                             for name, value in row["metrics"].items()} for row in rows}
             if complete else None)
    ranked = dynascore.rank(rows, weights, is_tie=is_tie, replicate_values=fixed, n_resamples=RESAMPLES, seed=SEED,
                            comparable=lambda a, b: digests[a] == digests[b])
    keys = [row["model"] for row in ranked if row["model"] in replicate_values]
    intervals = dict(zip(keys, scoring.percentile_intervals(
        np.vstack([replicate_values[k]["performance"] for k in keys]), CONFIDENCE), strict=True)) if keys else {}
    for row in ranked:
        row["scores"] = {"performance": _metric(row["metrics"]["performance"], intervals.get(row["model"])),
                         **row["scores"]}
    if baseline_row:
        ranked.append(baseline_row)
    return Board(task, weights, names, ranked, shown_weights)


def _combined(mean: float, weights: np.ndarray, intervals: list):
    """The interval of a weighted mean of independent datasets' estimates, from
    theirs (normal approximation: weighted half-widths add in quadrature); None for
    timings and sizes, which have no bootstrap interval."""
    if any(i is None for i in intervals):
        return None
    used = [(w, i) for w, i in zip(weights, intervals, strict=True) if w > 0]
    if len(used) == 1:
        return tuple(used[0][1])
    half = float(np.sqrt(sum((w * (high - low) / 2) ** 2 for w, (low, high) in used))) / float(weights.sum())
    return (mean - half, mean + half)


# --- rendering: the JSON rows, CSV and the page's sorting ---------------------------------


def row_json(row: dict, datasets: list[str], parameters: dict) -> dict:
    model = row["info"]
    return {
        "model": {"id": model.pk if model else None, "name": row["name"],
                  "owner": (model.created_by.get_username() if model and model.created_by else None),
                  "parameters": parameters[model.pk] if model else None,
                  "training_data": (model.training_data if model else row.get("training_data", {})),
                  "created_at": model.created_at.isoformat() if model else None,
                  "baseline": model is None, "public": model.is_public if model else True},
        "rank": row["rank"],
        "dynascore": row["dynascore"],
        "dynascore_ci_low": row.get("dynascore_ci_low"),
        "dynascore_ci_high": row.get("dynascore_ci_high"),
        "tied_with_next": row["tied_with_next"],
        "performance_tied_with_next": row["performance_tied_with_next"],
        "metrics": row["scores"],
        "remote_metrics": row.get("remote", []),
        "datasets": {name: row["datasets"][name] for name in datasets},
    }


def as_json(result: Board) -> dict:
    parameters = _parameters_of([row["info"] for row in result.rows if row["info"] is not None])
    return {"task": result.task.slug, "weights": result.weights, "datasets": result.datasets,
            "dataset_weights": result.dataset_weights,
            "rows": [row_json(row, result.datasets, parameters) for row in result.rows]}


def csv_rows(document: dict) -> list[list]:
    """A header and one line per row of ``as_json``'s document, in rank order."""
    header = ["rank", "model", "owner", "parameters", "dynascore", "dynascore_ci_low", "dynascore_ci_high",
              "tied_with_next", "performance_tied_with_next"]
    metrics = [name for name in ("performance", *STORED) if any(name in row["metrics"] for row in document["rows"])]
    for name in metrics:
        header += [name, f"{name}_ci_low", f"{name}_ci_high"]
    for name in document["datasets"]:
        header += [f"{name}", f"{name}_ci_low", f"{name}_ci_high", f"{name}_examples"]
    lines = [header]
    for row in document["rows"]:
        line = [row["rank"], row["model"]["name"], row["model"]["owner"] or "", row["model"]["parameters"] or "",
                row["dynascore"], row["dynascore_ci_low"], row["dynascore_ci_high"], row["tied_with_next"],
                row["performance_tied_with_next"]]
        for name in metrics:
            value = row["metrics"].get(name) or {}
            line += [value.get("value"), value.get("ci_low"), value.get("ci_high")]
        for name in document["datasets"]:
            value = row["datasets"][name]
            line += [value["value"], value["ci_low"], value["ci_high"], value["num_examples"]]
        lines.append(["" if v is None else v for v in line])
    return lines


# --- caching: the board is computed once per task state, weights and audience ------------


def _version_key(task_id: int) -> str:
    return f"dynabench:board-version:{task_id}"


def forget(task_id: int) -> None:
    """Drop every cached board of the task (its evaluations, models or jobs changed)."""
    cache.delete(_version_key(task_id))


def _audience(task: Task, user) -> str:
    """Who the board is computed for: everyone sees the same public board, except the
    task's researchers (every model) and users with private models of their own."""
    if user is None or not user.is_authenticated:
        return "public"
    if is_researcher(user, task):
        return "researchers"
    if ModelVersion.objects.filter(task=task, created_by=user, is_public=False).exists():
        return f"user-{user.pk}"
    return "public"


def _version(task: Task) -> str:
    """The task's board version: a new one after every ``forget``."""
    version = cache.get(_version_key(task.pk))
    if version is None:
        version = uuid.uuid4().hex
        cache.add(_version_key(task.pk), version, None)
        version = cache.get(_version_key(task.pk), version)
    return version


def board_json(task: Task, weights: dict | None = None, user=None, dataset_weights: dict | None = None) -> dict:
    """``as_json(board(...))``, cached for ``LEADERBOARD_CACHE_SECONDS`` per task state,
    weights and audience. A finished evaluation, a model's change and an evaluation's
    change drop the task's entries at once (``forget``); the time limit bounds what
    nothing signals (the baseline's training labels, an owner's new username)."""
    seconds = settings.LEADERBOARD_CACHE_SECONDS
    if not seconds:
        return as_json(board(task, weights, user, dataset_weights))
    chosen = weights if weights is not None else dynascore.DEFAULT_WEIGHTS
    parts = [task.pk, task.created_at.timestamp(), _version(task), _audience(task, user),
             sorted((name, float(w)) for name, w in chosen.items()),
             sorted((int(n), float(w)) for n, w in (dataset_weights or {}).items())]  # repr: exact floats
    key = "dynabench:board:" + hashlib.sha256(repr(parts).encode()).hexdigest()
    document = cache.get(key)
    if document is None:
        document = as_json(board(task, weights, user, dataset_weights))
        cache.set(key, document, seconds)
    return document


SORTABLE = ("rank", "name", "dynascore", "performance", *STORED, "parameters", "created")


def sort_rows(rows: list[dict], column: str, descending: bool, datasets: list[str]) -> list[dict]:
    """The JSON rows sorted by ``column`` (a SORTABLE name or a dataset); missing values last."""
    def value(row):
        if column == "rank":
            return row["rank"]
        if column == "name":
            return row["model"]["name"].lower()
        if column in ("dynascore",):
            return row["dynascore"]
        if column == "performance" or column in STORED:
            return (row["metrics"].get(column) or {}).get("value")
        if column == "parameters":
            return row["model"]["parameters"]
        if column == "created":
            return row["model"]["created_at"]
        return row["datasets"][column]["value"]

    present = [r for r in rows if value(r) is not None]
    missing = [r for r in rows if value(r) is None]
    def rank(r):
        return r["rank"] if r["rank"] is not None else 10**9

    present.sort(key=lambda r: (value(r), -rank(r) if descending else rank(r)), reverse=descending)
    return present + missing


def visible_models(task: Task, user):
    """The task's models ``user`` may see on the board: public ones, their own, and
    every one for the task's researchers."""
    models = ModelVersion.objects.filter(task=task)
    if is_researcher(user, task):
        return models
    if user is not None and user.is_authenticated:
        return models.filter(Q(is_public=True) | Q(created_by=user))
    return models.filter(is_public=True)
