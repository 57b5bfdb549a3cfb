"""The reference line of an extractive QA task: the sliding-window baseline of the
SQuAD paper (``ml.baselines``), scored on each round's test set as the models are.

A classification task's reference line is the majority-class answer (``board``); a QA
task has no majority answer, so its line is this baseline, which needs no training:
a model that does not clear it has learnt less than counting the question's words
around each span. It is scored exactly as an evaluation scores a model: on the
round's usable test examples whose signature checks (``rows.untampered``), in their
order, SQuAD F1 (the board's metric) and exact match per example against the stored
answer, and bootstrapped with the round's seed (``evaluation.dataset_seed``), so its
resamples pair with the models'.

Its answers cost about 3 ms a question, so they are cached by the examples they were
computed on (a digest of their ids) and the algorithm's version, with no expiry: the
examples of a test set do not change, only which of them are usable. An evaluation
job computes them after scoring a QA model (``warm``), so pages read them from the
cache.
"""

from __future__ import annotations

import hashlib
import json

from django.core.cache import cache

from ml import baselines, scoring
from tasks.models import Task

from .evaluation import CONFIDENCE, RESAMPLES, dataset_seed
from .rows import example_rows, untampered, usable_examples

NAME = baselines.NAME
# How the task page and the promotion rules name the line.
DESCRIPTION = "the sliding-window baseline (no training: the question's words around each span; Rajpurkar et al. 2016)"
METHOD = {"method": "sliding window over the question's words (Rajpurkar et al. 2016, section 5)",
          "max_span_words": baselines.MAX_SPAN_WORDS, "version": baselines.VERSION}


LINE = "qa"  # the reference line's name among the kinds' (``TaskKind.reference_line``)


def applies(task: Task) -> bool:
    """Whether this line is the task's reference line (its kind's)."""
    return task.parsed_config.kind.reference_line == LINE


def _key(task: Task, number: int, ids: list[int]) -> str:
    digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:24]
    return (f"dynabench:qa-reference:v{baselines.VERSION}-{baselines.MAX_SPAN_WORDS}:{task.pk}:{number}:"
            f"{len(ids)}:{digest}")


def per_example(task: Task, number: int) -> dict | None:
    """The baseline on round ``number``'s test set: {"ids", "f1", "exact_match"} per
    example, in the evaluations' order; None when the round has no usable test example."""
    usable = usable_examples(task, split="test", rounds=[number])
    ids = list(usable.values_list("pk", flat=True))
    if not ids:
        return None
    found = cache.get(_key(task, number, ids))
    if found is not None:
        return found
    examples = untampered(usable.filter(pk__in=ids))  # the examples the key names, whatever changed since
    rows = example_rows(task, examples)
    scores = baselines.sliding_window_scores(rows)
    found = {"ids": [e.pk for e in examples], "f1": scores["f1"], "exact_match": scores["exact_match"]}
    cache.set(_key(task, number, ids), found, None)
    return found


def line(task: Task, numbers: list[int]) -> dict | None:
    """The QA reference line on each round's test set: {"name", "training_data",
    "datasets": {round number: {"performance" (F1), "exact_match", "n", "interval"}},
    "replicates": {round number: F1 resamples}}; None where no round has a test set."""
    datasets, replicates = {}, {}
    for number in numbers:
        found = per_example(task, number)
        if not found or not found["ids"]:
            continue
        f1 = found["f1"]
        values = scoring.bootstrap_replicates(f1, n_resamples=RESAMPLES, seed=dataset_seed(number))
        datasets[number] = {"performance": baselines.mean(f1), "exact_match": baselines.mean(found["exact_match"]),
                            "n": len(f1), "interval": scoring.percentile_interval(values, CONFIDENCE)}
        replicates[number] = values
    if not datasets:
        return None
    return {"name": NAME, "training_data": dict(METHOD), "datasets": datasets,
            "replicates": replicates}


def warm(task: Task, numbers) -> None:
    """Compute (and cache) the line on these rounds' test sets: an evaluation job does
    it after scoring a QA model, so no page computes it."""
    if applies(task):
        for number in numbers:
            per_example(task, number)
