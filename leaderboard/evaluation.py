"""Evaluating a model: scoring it on each round's test split, measuring the
leaderboard's other metrics (throughput, memory, robustness, fairness), their
uncertainty, packing the resamples for storage, and queueing evaluation jobs.

What is stored here the board reads (``board.py``); nothing here reads a board.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable

import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

import ml
from core import celery_names
from core.errors import Conflict
from jobs.engine import JobReporter, create_job, enqueue_by_name
from jobs.models import Job
from ml import metrics as ml_metrics
from ml import scoring
from ml.memory import inference_memory_mb
from ml.submissions import parameter_count
from registry.endpoint_budgets import EndpointBudgetRefused, budget_spent
from registry.endpoints import endpoint_of
from registry.endpoints import predict as endpoint_predict
from registry.models import ModelVersion
from registry.services import ref_for
from tasks.models import Round, Task

from .models import Evaluation
from .rows import example_rows, primary_metric, untampered, usable_examples

log = logging.getLogger(__name__)


SEED = 0


def dataset_seed(number: int) -> int:
    """The bootstrap seed of round ``number``'s dataset: the same for every model (so
    their resamples pair), another for each dataset (so the datasets' resamples are
    independent draws, as a bootstrap stratified by dataset needs)."""
    return SEED + number


RESAMPLES = 1000


CONFIDENCE = 0.95


REPLICATE_DTYPE = np.dtype("<f4")  # 4 bytes a resample: 4 KB per evaluation, read fast


def pack(values) -> bytes:
    """Bootstrap replicate values as stored on ``Evaluation.replicate_values``."""
    return np.asarray(values, dtype=REPLICATE_DTYPE).tobytes()


def unpack(blob) -> np.ndarray | None:
    """The stored replicate values (float64), or None when none were stored."""
    if not blob:
        return None
    return np.frombuffer(bytes(blob), dtype=REPLICATE_DTYPE).astype(float)


def _digest(example_ids) -> str:
    return hashlib.sha256(json.dumps(list(example_ids)).encode()).hexdigest()[:16]


# Metrics whose replicates are stored beside performance's (Evaluation.metric_replicate_values),
# drawn on the same resampled indices: the Dynascore's interval resamples them together.
RESAMPLED = ("ece", "robustness", "fairness", "throughput")


def uncertainty(task: Task, scores: dict, details: dict, example_ids=None, seed: int = SEED) -> dict:
    """Intervals and paired resamples of one evaluation (its ECE, robustness and
    fairness go into ``scores`` too), drawn with ``seed`` (``dataset_seed``).

    Every metric is resampled on the same bootstrap indices: replicate ``r`` of the
    ECE, robustness and fairness is computed on the very examples replicate ``r`` of
    performance drew (robustness and fairness on those of them in their perturbed
    sample), so the Dynascore's interval resamples all of them together. Throughput
    was timed several times (``measure``); each replicate takes one of those runs."""
    per_example = np.asarray(details["per_example"], dtype=float)
    if not per_example.size:
        return {"intervals": {}, "replicates": {}, "replicate_values": b"", "metric_replicate_values": b""}
    metric = primary_metric(task)
    n = per_example.size
    blocks = list(scoring.resample_indices(n, n_resamples=RESAMPLES, seed=seed))
    replicates = np.concatenate([per_example[block].mean(axis=1) for block in blocks])
    intervals = {metric: list(scoring.percentile_interval(replicates, CONFIDENCE))}
    others: dict[str, np.ndarray] = {}
    if "gold" in details:
        macro = scoring.bootstrap_metric(details["gold"], details["pred"], ml_metrics.macro_f1,
                                         n_resamples=RESAMPLES, seed=seed)
        intervals["macro_f1"] = [macro.low, macro.high]
        confidence = np.asarray(details["confidence"], dtype=float)
        correct = np.asarray([g == p for g, p in zip(details["gold"], details["pred"], strict=True)], dtype=float)
        scores["ece"] = scoring.expected_calibration_error(confidence, correct)
        others["ece"] = np.array([scoring.expected_calibration_error(confidence[row], correct[row])
                                  for block in blocks for row in block])
    for name in ("robustness", "fairness"):
        agreement, positions = details.get(f"{name}_agreement"), details.get(f"{name}_positions")
        if not agreement:
            continue
        scores[name] = float(np.mean(agreement))
        agree = np.zeros(n)
        inside = np.zeros(n)
        agree[positions], inside[positions] = agreement, 1.0
        sums = np.concatenate([agree[block].sum(axis=1) for block in blocks])
        counts = np.concatenate([inside[block].sum(axis=1) for block in blocks])
        # A resample that drew none of the perturbed examples says nothing: it keeps the point value.
        others[name] = np.where(counts > 0, sums / np.maximum(counts, 1), scores[name])
        # The metric counts only the examples the perturbation changed: how many (``<name>_n``),
        # and the interval of that count over the same resamples.
        scores[f"{name}_n"] = len(agreement)
        intervals[f"{name}_n"] = list(scoring.percentile_interval(counts, CONFIDENCE))
    runs = details.get("throughput_runs")
    if runs:
        others["throughput"] = np.random.default_rng(seed).choice(np.asarray(runs, dtype=float), size=RESAMPLES)
    for name, values in others.items():
        intervals[name] = list(scoring.percentile_interval(values, CONFIDENCE))
    names = [name for name in RESAMPLED if name in others]
    return {"intervals": {k: [round(v, 6) for v in pair] for k, pair in intervals.items()},
            "replicates": {"seed": seed, "n": len(replicates),
                           "examples": _digest(example_ids or range(n)), "metrics": names},
            "replicate_values": pack(replicates),
            "metric_replicate_values": pack(np.concatenate([others[name] for name in names])) if names else b""}


def metric_replicates(replicates: dict, blob) -> dict[str, np.ndarray]:
    """The stored replicates of the other metrics, by their Evaluation.metrics key."""
    names = (replicates or {}).get("metrics") or []
    values = unpack(blob)
    if not names or values is None or values.size % len(names):
        return {}
    return dict(zip(names, values.reshape(len(names), -1), strict=True))


PERTURBED_SAMPLE = 500  # examples perturbed per dataset: all of a smaller one, else a seeded sample


THROUGHPUT_SAMPLE = 256  # examples in each further timed pass


BATCH1_SAMPLE = 16  # examples timed one at a time


def _answer(task: Task, prediction: dict):
    return task.parsed_config.kind.answer_of(prediction)


def perturbed_sample(n: int) -> list[int]:
    """The positions a dataset's robustness and fairness are measured on: every
    example of a set of at most ``PERTURBED_SAMPLE``, else that many drawn without
    replacement with a fixed seed (the same for every model: the examples' order is)."""
    if n <= PERTURBED_SAMPLE:
        return list(range(n))
    return sorted(np.random.default_rng(SEED).choice(n, size=PERTURBED_SAMPLE, replace=False).tolist())


# The metrics a model behind an endpoint cannot have (its memory and size are the
# server's): stored as None, listed under ``remote`` so the board shows "remote".
REMOTE_METRICS = ("memory_mb", "parameters_mb")


def measure_model(task: Task, ref, rows: list[dict], details: dict, example_ids: list[int],
                  predict: Callable[[list[dict]], list[dict]] | None = None) -> dict:
    """Throughput (batched, timed ``EVALUATION_TIMED_PASSES`` times, and one at a time), the
    model's memory in inference (``model_memory_mb``), and the consistency of its
    answers under typos (robustness) and name and gender-word swaps (fairness) on the
    ``perturbed_sample``, each example perturbed with its own seeded generator
    (``ml.scoring``). QA perturbs the question only, classification every input text.
    Fills ``details`` with the timed runs and the agreement vectors with their
    positions; returns the metrics."""
    remote = ref is None  # behind an endpoint: every call costs, memory is the server's
    if predict is None:
        def predict(inputs, **kwargs):
            return ml.predict(ref, inputs, **kwargs)
    runs = [details["throughput"]] if details.get("throughput") else []
    sample = [row["inputs"] for row in rows[:THROUGHPUT_SAMPLE]]
    while sample and not remote and len(runs) < settings.EVALUATION_TIMED_PASSES:
        started = time.perf_counter()
        predict(sample)
        runs.append(len(sample) / max(time.perf_counter() - started, 1e-9))
    details["throughput_runs"] = runs
    found = {"throughput": float(np.median(runs)) if runs else None, "throughput_runs": [round(r, 3) for r in runs]}
    single = rows[:BATCH1_SAMPLE]
    if single:
        started = time.perf_counter()
        for row in single:
            predict([row["inputs"]]) if remote else predict([row["inputs"]], batch_size=1)
        found["throughput_batch1"] = len(single) / max(time.perf_counter() - started, 1e-9)
    if remote:
        found.update({name: None for name in REMOTE_METRICS}, remote=list(REMOTE_METRICS))
    else:
        found["memory_mb"] = model_memory_mb(ref, [row["inputs"] for row in rows])
        found["parameters_mb"] = parameters_mb(ref)
    kind = task.parsed_config.kind
    positions = perturbed_sample(len(rows))
    for name, perturb in (("robustness", scoring.perturb_typos), ("fairness", scoring.perturb_fairness)):
        changed_rows, kept, where = [], [], []
        for i in positions:
            row = rows[i]
            inputs, changed = dict(row["inputs"]), False
            for field, text in row["inputs"].items():
                if not kind.perturbs(field) or not isinstance(text, str):
                    continue
                result = perturb(text, scoring.example_rng(f"{name}-{SEED}", (example_ids[i], field)))
                inputs[field], changed = result.text, changed or result.changed
            if changed:
                changed_rows.append(inputs)
                kept.append(_answer(task, details["predictions"][i]))
                where.append(i)
        if changed_rows:
            perturbed = [_answer(task, p) for p in predict(changed_rows)]
            details[f"{name}_agreement"] = scoring.agreement(kept, perturbed)
            details[f"{name}_positions"] = where
    return found


def model_memory_mb(ref, inputs: list[dict]) -> float | None:
    """The model's memory in inference, MiB: the peak resident memory that loading it
    and a batch-32 forward pass add to a process that holds torch (``ml.memory``).
    Measured once per artifact, then cached."""
    sha256 = getattr(ref, "sha256", None)
    key = f"dynabench:inference-memory:{sha256}" if sha256 else None
    if key and (known := cache.get(key)) is not None:
        return known
    found = inference_memory_mb(getattr(ref, "path", None) or ref, inputs)
    if key and found is not None:
        cache.set(key, found, None)
    return found


def parameters_key(sha256: str) -> str:
    """The shared cache's key of an artifact's parameter count (the boards show it)."""
    return f"dynabench:parameters:{sha256}"


def parameters_mb(ref) -> float | None:
    """The model's float32 parameters and buffers, in MB (a size, not a measurement).
    The count goes to the shared cache too, so a web process need not read the artifact."""
    try:
        count = parameter_count(getattr(ref, "path", None) or ref)
    except Exception:
        return None
    if getattr(ref, "sha256", None):
        cache.set(parameters_key(ref.sha256), count, None)
    return round(count * 4 / 1e6, 1)


def score_rows(task: Task, model: ModelVersion, rows: list[dict], batch_size: int = 32,
               progress: Callable[[int], None] | None = None) -> dict:
    """Metrics of ``model`` on ml rows, plus the model error rate by the task's metric."""
    return score_rows_in_detail(task, model, rows, batch_size, progress)[0]


def score_rows_in_detail(task: Task, model: ModelVersion, rows: list[dict], batch_size: int = 32,
                         progress: Callable[[int], None] | None = None) -> tuple[dict, dict]:
    """``(metrics, details)``: ``details`` holds the task metric per example and, for
    classification, the gold and predicted labels and the predicted label's
    probability (what intervals and calibration are computed from)."""
    config = task.parsed_config
    predict = predictor(model)
    predictions = []
    if rows and endpoint_of(model) is None:
        predict([rows[0]["inputs"]])  # loaded before the clock starts
    started = time.perf_counter()
    for start in range(0, len(rows), batch_size):
        batch = rows[start:start + batch_size]
        predictions.extend(predict([r["inputs"] for r in batch]))
        if progress:
            progress(min(start + batch_size, len(rows)))
    elapsed = time.perf_counter() - started
    details: dict = {"predictions": predictions, "kept": list(range(len(rows)))}
    if rows:
        details["throughput"] = len(rows) / elapsed if elapsed > 0 else None
    unreadable = [i for i, p in enumerate(predictions) if p.get("unparseable")]
    counted = config.endpoint_models["unparseable_is_error"]
    if unreadable and not counted:  # left out of the scores, and counted apart
        dropped = set(unreadable)
        details["kept"] = [i for i in range(len(rows)) if i not in dropped]
        rows = [rows[i] for i in details["kept"]]
        predictions = details["predictions"] = [predictions[i] for i in details["kept"]]
    scored_predictions = [{**p, "probabilities": {**p["probabilities"], None: 0.0}}
                          if p.get("unparseable") and "probabilities" in p else p for p in predictions]
    scores, scored, wrong = config.kind.score(rows, scored_predictions) if rows else ({}, {"per_example": []}, [])
    details.update(scored)
    scores["num_examples"] = len(rows)
    scores["unparseable"] = len(unreadable)
    scores["model_error_rate"] = sum(wrong) / len(rows) if rows else None
    return scores, details


def predictor(model: ModelVersion) -> Callable[[list[dict]], list[dict]]:
    """How ``model`` answers ``ml`` rows: its artifact through ``ml.predict``, or its
    endpoint (``registry.endpoints``: counted, bounded, retried; outside any round, so
    against the endpoint's evaluation budget, which stops it between two batches once spent)."""
    endpoint = endpoint_of(model)
    if endpoint is not None:
        config = model.task.parsed_config
        return lambda inputs: endpoint_predict(endpoint, config, inputs, budget=max(60.0, endpoint.timeout_s * 3))
    ref = ref_for(model)
    return lambda inputs, **kwargs: ml.predict(ref, inputs, **kwargs)


class TimeLimitExceeded(Exception):
    """An evaluation ran past ``EVALUATION_TIME_LIMIT``."""


def _round_progress(reporter: JobReporter | None, index: int, size: int, total: int, deadline: float | None = None):
    """Progress of round ``index`` of ``total`` as examples are scored; past ``deadline``
    (a ``time.monotonic()`` value) the evaluation stops with a readable error."""
    def report(done):
        if deadline is not None and time.monotonic() > deadline:
            raise TimeLimitExceeded(f"The evaluation ran past its time limit of {settings.EVALUATION_TIME_LIMIT} s "
                                    f"(round {index + 1} of {total}, {done} of {size} examples scored).")
        if reporter is not None:
            reporter.progress(100 * (index + done / size) / total)
    return report


def evaluate_model(model: ModelVersion, rounds: Iterable[Round], *, split: str = "test",
                   reporter: JobReporter | None = None, job: Job | None = None,
                   measure: bool = True) -> list[Evaluation]:
    """Score ``model`` on each round's usable ``split`` examples (round 0, the static
    test set, included); one Evaluation row per round that has any. ``measure=False``
    scores performance (and calibration) only: no throughput, memory, robustness or
    fairness, which cost several times the scoring (the replay's models).

    All or nothing: the rows are written together once every round is scored, so an
    evaluation that stops part way (its time limit, an endpoint's spent budget or
    failure) leaves the stored evaluations as they were."""
    rounds = list(rounds)
    scored_rounds = []
    limit = getattr(settings, "EVALUATION_TIME_LIMIT", None)
    deadline = time.monotonic() + limit if limit else None
    for i, rnd in enumerate(rounds):
        examples = untampered(usable_examples(model.task, rounds=[rnd.number], split=split), reporter)
        rows = example_rows(model.task, examples)
        if reporter:
            reporter.progress(100 * i / max(len(rounds), 1), f"round {rnd.number}: {len(rows)} {split} examples")
        if not rows:
            continue
        scores, details = score_rows_in_detail(model.task, model, rows,
                                               progress=_round_progress(reporter, i, len(rows), len(rounds),
                                                                        deadline))
        if len(details["kept"]) != len(rows):  # answers an endpoint gave that could not be read, left out
            examples = [examples[i] for i in details["kept"]]
            rows = [rows[i] for i in details["kept"]]
        if not rows:
            continue
        ids = [e.pk for e in examples]
        if measure:
            remote = endpoint_of(model) is not None
            scores.update(measure_model(model.task, None if remote else ref_for(model), rows, details, ids,
                                        predict=predictor(model)))
        extra = uncertainty(model.task, scores, details, ids, seed=dataset_seed(rnd.number))
        scored_rounds.append((rnd, {"num_examples": len(rows), "metrics": scores,
                                    "model_error_rate": scores["model_error_rate"], "job": job,
                                    "example_ids": ids, "per_example": details["per_example"], **extra}))
    with transaction.atomic():
        return [Evaluation.objects.update_or_create(model_version=model, round=rnd, split=split, defaults=values)[0]
                for rnd, values in scored_rounds]


def evaluated_model_ids(model_ids: Iterable[int]) -> set[int]:
    """Of ``model_ids``, those for which an evaluation job over every round ran to the end."""
    return set(Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL, status=Job.Status.SUCCEEDED, params__rounds=None,
                                  params__model_version__in=list(model_ids))
               .values_list("params__model_version", flat=True))


def has_finished_evaluation(model: ModelVersion) -> bool:
    return model.pk in evaluated_model_ids([model.pk])


def start_evaluation(model: ModelVersion, *, rounds: Iterable[int] | None = None, split: str = "test",
                     target_if_none: bool = False, promote_if_better: bool = False, measure: bool = True,
                     user=None) -> Job:
    """Queue the evaluation of ``model`` on every round's test split (round 0 included).
    ``target_if_none``, ``promote_if_better``, ``measure``: see ``start_training``."""
    if model.status != ModelVersion.Status.READY:
        raise Conflict(f"{model} is {model.status}; only ready models are evaluated.")
    endpoint = endpoint_of(model)
    reason = budget_spent(endpoint, None) if endpoint is not None else None
    if reason:  # refused here rather than failing the job on its first call
        raise EndpointBudgetRefused(f"{model} is not evaluated. {reason}")
    params = {"model_version": model.pk, "rounds": list(rounds) if rounds is not None else None, "split": split}
    if not measure:
        params["measure"] = False
    if target_if_none:
        params["target_if_none"] = True
    if promote_if_better:
        params["promote_if_better"] = True
    with transaction.atomic():
        job = create_job(Job.Kind.EVALUATE_MODEL, params=params, task=model.task, user=user)
        enqueue_by_name(job, celery_names.EVALUATE_MODEL, queue=celery_names.TRAINING_QUEUE)
    return job
