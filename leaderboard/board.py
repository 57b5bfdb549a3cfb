"""A task's leaderboard: every evaluated model on every round's test set, with 95%
intervals, ranked by a Dynascore the visitor may re-weight.

Datasets are the rounds' test splits (round 0: the static test set). Intervals
are percentile bootstraps over examples, 1,000 resamples with seed 0
(``ml.scoring``), computed when a model is evaluated and stored on its
Evaluation with the resampled values of the task's metric. All models are
scored on the same examples and resampled with the same draws, so the
difference of two models' stored resamples is a *paired* bootstrap: the page
marks neighbours whose performance difference is not significant as tied.

Metrics on the board:
- performance: the task's metric (accuracy, or SQuAD F1 for QA), averaged over
  the datasets with equal weights; its interval is that of the average;
- calibration: the expected calibration error (classification only);
- throughput: examples/s of the batched pass (batch 32; one at a time is kept
  too, as ``throughput_batch1``); memory: the model's float32 parameters, MB;
- robustness and fairness: the share of answers unchanged under seeded typos,
  and under name and gender-word swaps (``ml.scoring``), on each dataset's first
  100 examples (fairness: those a swap changed).
Each metric is averaged over the datasets; its interval is the bootstrap one
for a single dataset, and for several the normal approximation of the mean's
(half-widths added in quadrature). Timings and sizes have no interval. A metric
joins the Dynascore only when every ranked model has it.

A majority-class baseline row (classification) predicts the most common label
of the task's training data for every example, with that label's share as its
confidence. It is a reference: shown with its performance and calibration, in
no rank and with no Dynascore (a constant answer has no throughput or memory to
weigh).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
from django.core.cache import cache

from ml import metrics as ml_metrics
from ml import scoring
from tasks.models import ModelVersion, Round, Task

from . import dynascore
from .models import Evaluation
from .services import evaluated_model_ids, primary_metric, usable_examples

SEED = 0
RESAMPLES = 1000
CONFIDENCE = 0.95
BASELINE = "majority-class baseline"
# Board metric -> the key its per-dataset value has in Evaluation.metrics.
STORED = {"calibration": "ece", "throughput": "throughput", "memory": "memory_mb",
          "robustness": "robustness", "fairness": "fairness"}


def _digest(example_ids) -> str:
    return hashlib.sha256(json.dumps(list(example_ids)).encode()).hexdigest()[:16]


def uncertainty(task: Task, scores: dict, details: dict, example_ids=None) -> dict:
    """Intervals and paired resamples of one evaluation (its ECE, robustness and
    fairness go into ``scores`` too)."""
    per_example = details["per_example"]
    if not per_example:
        return {"intervals": {}, "replicates": {}}
    metric = primary_metric(task)
    replicates = scoring.bootstrap_replicates(per_example, n_resamples=RESAMPLES, seed=SEED)
    intervals = {metric: list(scoring.percentile_interval(replicates, CONFIDENCE))}
    if "gold" in details:
        macro = scoring.bootstrap_metric(details["gold"], details["pred"], ml_metrics.macro_f1,
                                         n_resamples=RESAMPLES, seed=SEED)
        intervals["macro_f1"] = [macro.low, macro.high]
        correct = [g == p for g, p in zip(details["gold"], details["pred"], strict=True)]
        ece = scoring.bootstrap_metric(details["confidence"], correct, scoring.expected_calibration_error,
                                       n_resamples=RESAMPLES, seed=SEED)
        scores["ece"] = ece.value
        intervals["ece"] = [ece.low, ece.high]
    for name in ("robustness", "fairness"):
        agreement = details.get(f"{name}_agreement")
        if agreement:
            found = scoring.bootstrap_ci(agreement, n_resamples=RESAMPLES, seed=SEED)
            scores[name] = found.value
            intervals[name] = [found.low, found.high]
    return {"intervals": {k: [round(v, 6) for v in pair] for k, pair in intervals.items()},
            "replicates": {"seed": SEED, "examples": _digest(example_ids or range(len(per_example))),
                           "values": [round(float(v), 6) for v in replicates]}}


PERTURBED_SAMPLE = 100  # examples perturbed per dataset (the first ones, in example order)
BATCH1_SAMPLE = 16  # examples timed one at a time


def _answer(task: Task, prediction: dict):
    return prediction.get("answer") if task.parsed_config.task_type == "extractive_qa" else prediction.get("label")


def measure(task: Task, ref, rows: list[dict], details: dict, example_ids: list[int]) -> dict:
    """Throughput (batched, and one at a time), the model's memory, and the consistency
    of its answers under typos (robustness) and name and gender-word swaps (fairness),
    on the first ``PERTURBED_SAMPLE`` examples, each perturbed with its own seeded
    generator (``ml.scoring``). QA perturbs the question only, classification every
    input text. Fills ``details`` with the agreement vectors; returns the metrics."""
    import ml

    found = {"throughput": details.get("throughput")}
    sample = rows[:BATCH1_SAMPLE]
    if sample:
        started = time.perf_counter()
        for row in sample:
            ml.predict(ref, [row["inputs"]], batch_size=1)
        found["throughput_batch1"] = len(sample) / max(time.perf_counter() - started, 1e-9)
    found["memory_mb"] = model_memory_mb(ref)
    qa = task.parsed_config.task_type == "extractive_qa"
    originals = [_answer(task, p) for p in details["predictions"][:PERTURBED_SAMPLE]]
    for name, perturb in (("robustness", scoring.perturb_typos), ("fairness", scoring.perturb_fairness)):
        changed_rows, kept = [], []
        for i, row in enumerate(rows[:PERTURBED_SAMPLE]):
            inputs, changed = dict(row["inputs"]), False
            for field, text in row["inputs"].items():
                if (qa and field != "question") or not isinstance(text, str):
                    continue
                result = perturb(text, scoring.example_rng(f"{name}-{SEED}", (example_ids[i], field)))
                inputs[field], changed = result.text, changed or result.changed
            if changed:
                changed_rows.append(inputs)
                kept.append(originals[i])
        if changed_rows:
            perturbed = [_answer(task, p) for p in ml.predict(ref, changed_rows)]
            details[f"{name}_agreement"] = scoring.agreement(kept, perturbed)
    return found


def model_memory_mb(ref) -> float | None:
    """The model's parameters and buffers, in MB (its memory when loaded for inference)."""
    try:
        from ml.submissions import parameter_count

        path = getattr(ref, "path", None) or ref
        return round(parameter_count(path) * 4 / 1e6, 1)  # float32
    except Exception:
        return None


def dataset_name(rnd: Round) -> str:
    return "static" if rnd.number == 0 else f"round {rnd.number}"


@dataclass
class Board:
    task: Task
    weights: dict
    datasets: list[str]
    rows: list[dict]


def _metric(value, interval=None) -> dict:
    low, high = (interval or (None, None))
    return {"value": value, "ci_low": low, "ci_high": high}


def _parameters(model: ModelVersion) -> int | None:
    key = f"dynabench:parameters:{model.sha256}"
    count = cache.get(key)
    if count is None:
        from ml.submissions import parameter_count

        try:
            count = parameter_count(model.artifact_dir)
        except Exception:
            count = -1
        cache.set(key, count, None)
    return count if count >= 0 else None


def _baseline(task: Task, rounds: list[Round]) -> dict | None:
    config = task.parsed_config
    if config.task_type == "extractive_qa":
        return None
    train = Counter(t.get("label") for t in usable_examples(task, split="train").values_list("target", flat=True))
    if not train:
        return None
    label = max(config.label_names, key=lambda name: (train.get(name, 0), -config.label_names.index(name)))
    share = train[label] / sum(train.values())
    datasets, replicates, digests = {}, {}, []
    for rnd in rounds:
        # The evaluations' order (usable_examples'), so the resamples pair with the models'.
        found = list(usable_examples(task, split="test", rounds=[rnd.number]).values_list("pk", "target"))
        golds = [target.get("label") for _, target in found]
        if not golds:
            continue
        per_example = [float(g == label) for g in golds]
        values = scoring.bootstrap_replicates(per_example, n_resamples=RESAMPLES, seed=SEED)
        ece = abs(share - float(np.mean(per_example)))
        datasets[dataset_name(rnd)] = {"performance": float(np.mean(per_example)), "n": len(golds),
                                       "interval": scoring.percentile_interval(values, CONFIDENCE), "ece": ece}
        replicates[dataset_name(rnd)] = values
        digests.append(_digest(pk for pk, _ in found))
    return {"label": label, "datasets": datasets, "replicates": replicates, "digests": tuple(digests)}


def board(task: Task, weights: dict | None = None, user=None) -> Board:
    """The ranked rows of ``task``'s leaderboard as ``user`` may see it: public models,
    their own private ones, all for the task's researchers (see the module docstring)."""
    from .submissions import visible_models

    weights = dynascore.DEFAULT_WEIGHTS if weights is None else weights
    metric = primary_metric(task)
    models = list(visible_models(task, user).filter(status=ModelVersion.Status.READY)
                  .select_related("created_by").order_by("created_at", "pk"))
    done = evaluated_model_ids([m.pk for m in models])
    models = [m for m in models if m.pk in done]
    evaluations = (Evaluation.objects.filter(model_version__in=[m.pk for m in models], split="test")
                   .select_related("round").only("model_version_id", "round__number", "round__task_id",
                                                 "metrics", "intervals", "replicates", "num_examples"))
    by_model: dict[int, dict[str, Evaluation]] = {}
    rounds: dict[int, Round] = {}
    for evaluation in evaluations:
        by_model.setdefault(evaluation.model_version_id, {})[dataset_name(evaluation.round)] = evaluation
        rounds[evaluation.round.number] = evaluation.round
    ordered_rounds = [rounds[n] for n in sorted(rounds)]
    names = [dataset_name(r) for r in ordered_rounds]
    if not names:  # no test set anywhere yet: nothing to rank (nor a baseline to score)
        return Board(task, weights, [], [])

    rows, replicate_values, digests = [], {}, {}
    for model in models:
        found = by_model.get(model.pk, {})
        if set(found) != set(names):
            continue  # not scored on every dataset yet
        datasets = {}
        for name in names:
            evaluation = found[name]
            datasets[name] = {**_metric(evaluation.metrics.get(metric), evaluation.intervals.get(metric)),
                              "num_examples": evaluation.num_examples}
        key = model.pk
        values = [found[name].replicates.get("values") for name in names]
        if all(values):
            replicate_values[key] = np.mean(np.array(values, dtype=float), axis=0)
            digests[key] = tuple(found[name].replicates.get("examples") for name in names)
        row_metrics = {"performance": {name: datasets[name]["value"] for name in names}}
        intervals = {}
        for metric_name, stored in STORED.items():
            values = [found[name].metrics.get(stored) for name in names]
            if all(v is not None for v in values):
                row_metrics[metric_name] = dict(zip(names, values, strict=True))
                intervals[metric_name] = [found[name].intervals.get(stored) for name in names]
        rows.append({"model": key, "name": model.name, "created": model.created_at, "metrics": row_metrics,
                     "datasets": datasets, "info": model, "intervals": intervals})

    baseline_row = None
    baseline = _baseline(task, ordered_rounds) if names else None
    if baseline and set(baseline["datasets"]) == set(names):
        datasets = {name: {**_metric(d["performance"], d["interval"]), "num_examples": d["n"]}
                    for name, d in baseline["datasets"].items()}
        values = np.mean(np.array([baseline["replicates"][n] for n in names]), axis=0)
        performance = float(np.mean([baseline["datasets"][n]["performance"] for n in names]))
        baseline_row = {
            "model": BASELINE, "name": BASELINE, "created": None, "info": None, "datasets": datasets,
            "label": baseline["label"], "rank": None, "dynascore": None, "tied_with_next": None,
            "scores": {"performance": _metric(performance, scoring.percentile_interval(values, CONFIDENCE)),
                       "calibration": _metric(float(np.mean([baseline["datasets"][n]["ece"] for n in names])))}}
    if not rows:
        return Board(task, weights, names, [baseline_row] if baseline_row else [])
    for metric_name in STORED:  # a metric joins the Dynascore when every model has it
        if any(metric_name not in row["metrics"] for row in rows):
            for row in rows:
                row["metrics"].pop(metric_name, None)

    def is_tie(a, b):
        if a not in replicate_values or b not in replicate_values:
            return None
        if digests[a] != digests[b]:
            return None  # scored on different examples (or in another order): not paired
        difference = replicate_values[a] - replicate_values[b]
        low, high = scoring.percentile_interval(difference, CONFIDENCE)
        return low <= 0 <= high

    replicates = {key: {"performance": list(values)} for key, values in replicate_values.items()}
    complete = len(replicates) == len(rows)
    ranked = dynascore.rank(rows, weights, is_tie=is_tie,
                            replicate_values=_with_fixed(rows, replicates) if complete else None,
                            n_resamples=RESAMPLES, seed=SEED)
    for row in ranked:
        values = replicate_values.get(row["model"])
        performance = float(np.mean(list(row["metrics"]["performance"].values())))
        interval = scoring.percentile_interval(values, CONFIDENCE) if values is not None else None
        row["scores"] = {"performance": _metric(performance, interval)}
        for metric_name in STORED:
            if metric_name in row["metrics"]:
                per_dataset = list(row["metrics"][metric_name].values())
                row["scores"][metric_name] = _metric(float(np.mean(per_dataset)),
                                                     _combined(per_dataset, row["intervals"].get(metric_name)))
    if baseline_row:
        ranked.append(baseline_row)
    return Board(task, weights, names, ranked)


def _combined(values: list[float], intervals: list | None):
    """The interval of an equal-weight mean of independent datasets' estimates, from
    theirs (normal approximation: half-widths add in quadrature); None for timings
    and sizes, which have no bootstrap interval."""
    if not intervals or any(i is None for i in intervals):
        return None
    if len(intervals) == 1:
        return tuple(intervals[0])
    half = float(np.sqrt(sum(((high - low) / 2) ** 2 for low, high in intervals))) / len(intervals)
    mean = float(np.mean(values))
    return (mean - half, mean + half)


def _with_fixed(rows, replicates):
    """Replicate values per model: performance resampled, the other metrics fixed."""
    out = {}
    for row in rows:
        values = dict(replicates[row["model"]])
        for name, value in row["metrics"].items():
            if name != "performance":
                values[name] = value
        out[row["model"]] = values
    return out


# --- rendering: the JSON rows, CSV and the page's sorting ---------------------------------


def row_json(row: dict, datasets: list[str]) -> dict:
    model = row["info"]
    return {
        "model": {"id": model.pk if model else None, "name": row["name"],
                  "owner": (model.created_by.get_username() if model and model.created_by else None),
                  "parameters": _parameters(model) if model else None,
                  "training_data": (model.training_data if model else {"majority_label": row.get("label")}),
                  "created_at": model.created_at.isoformat() if model else None,
                  "baseline": model is None, "public": model.is_public if model else True},
        "rank": row["rank"],
        "dynascore": row["dynascore"],
        "dynascore_ci_low": row.get("dynascore_ci_low"),
        "dynascore_ci_high": row.get("dynascore_ci_high"),
        "tied_with_next": row["tied_with_next"],
        "metrics": row["scores"],
        "datasets": {name: row["datasets"][name] for name in datasets},
    }


def as_json(result: Board) -> dict:
    return {"task": result.task.slug, "weights": result.weights, "datasets": result.datasets,
            "rows": [row_json(row, result.datasets) for row in result.rows]}


def csv_rows(result: Board) -> list[list]:
    """A header and one line per row, in rank order (numbers as the JSON has them)."""
    header = ["rank", "model", "owner", "parameters", "dynascore", "dynascore_ci_low", "dynascore_ci_high",
              "tied_with_next"]
    metrics = [name for name in ("performance", *STORED) if any(name in row["scores"] for row in result.rows)]
    for name in metrics:
        header += [name, f"{name}_ci_low", f"{name}_ci_high"]
    for name in result.datasets:
        header += [f"{name}", f"{name}_ci_low", f"{name}_ci_high", f"{name}_examples"]
    lines = [header]
    for row in (row_json(r, result.datasets) for r in result.rows):
        line = [row["rank"], row["model"]["name"], row["model"]["owner"] or "", row["model"]["parameters"] or "",
                row["dynascore"], row["dynascore_ci_low"], row["dynascore_ci_high"], row["tied_with_next"]]
        for name in metrics:
            value = row["metrics"].get(name) or {}
            line += [value.get("value"), value.get("ci_low"), value.get("ci_high")]
        for name in result.datasets:
            value = row["datasets"][name]
            line += [value["value"], value["ci_low"], value["ci_high"], value["num_examples"]]
        lines.append(["" if v is None else v for v in line])
    return lines


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
