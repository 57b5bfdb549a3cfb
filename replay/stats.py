"""Intervals and paired tests for the replay's accuracies. Pure numpy, no Django.

Every number is a percentile bootstrap over the test set's examples:
``RESAMPLES`` resamples, seeded by the test set's name, so every model scored on
one test set is resampled on the same indices (that is what makes a difference
between two models *paired*). Where a set's examples come in clusters (the
functional suites' cases are written from templates, several cases each), the
bootstrap resamples clusters, each with all its cases (``clusters``: one cluster
id per example), so cases that share a template are not counted as independent
evidence; the accuracy is then the resampled clusters' cases' mean. With several seeds, a model's per-example score
is the mean over the seeds' models first: the interval then covers the test
set's sampling, and the spread over seeds is reported beside it (``by_seed``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ml.metrics import wilson_interval

RESAMPLES = 1000
CONFIDENCE = 0.95


def set_seed(name: str) -> int:
    """The resampling seed of a test set: its name's hash, the same on every run."""
    return int.from_bytes(hashlib.sha256(f"replay-bootstrap:{name}".encode()).digest()[:4], "big")


def _indices(n: int, name: str, resamples: int) -> np.ndarray:
    return np.random.default_rng(set_seed(name)).integers(0, n, size=(resamples, n))


def _per_example(scores) -> np.ndarray:
    """A (seeds x examples) array, or one row, as the mean per example over seeds."""
    values = np.asarray(scores, dtype=float)
    if values.ndim == 1:
        return values
    return values.mean(axis=0)


def _cluster_sums(values: np.ndarray, clusters: Sequence | None) -> tuple[np.ndarray, np.ndarray]:
    """(per-unit sums, per-unit sizes): one unit per example, or per cluster (in first-seen order)."""
    if clusters is None:
        return values, np.ones_like(values)
    if len(clusters) != values.shape[0]:
        raise ValueError(f"{len(clusters)} cluster ids for {values.shape[0]} examples")
    ids: dict = {}
    index = np.array([ids.setdefault(c, len(ids)) for c in clusters], dtype=int)
    return (np.bincount(index, weights=values, minlength=len(ids)),
            np.bincount(index, minlength=len(ids)).astype(float))


def _replicates(values: np.ndarray, clusters: Sequence | None, name: str, resamples: int) -> np.ndarray:
    """The bootstrap means of ``values``: by example, or by cluster (a cluster bootstrap:
    clusters drawn with replacement, each with all its examples; the mean over their examples)."""
    sums, sizes = _cluster_sums(values, clusters)
    picks = _indices(sums.shape[0], name, resamples)
    return sums[picks].sum(axis=1) / sizes[picks].sum(axis=1)


def _bounds(replicates: np.ndarray) -> tuple[float, float]:
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


def accuracy(scores, name: str, resamples: int = RESAMPLES, clusters: Sequence | None = None) -> dict:
    """{accuracy, ci_low, ci_high, num_examples, by_seed}: ``scores`` is 1/0 per example,
    or one such list per seed (all over the same examples, in the same order). With
    ``clusters`` (a cluster id per example) the interval is a cluster bootstrap's and
    ``num_clusters`` says how many clusters there were."""
    values = np.asarray(scores, dtype=float)
    rows = values if values.ndim == 2 else values[None, :]
    mean = _per_example(rows)
    n = mean.shape[0]
    extra = {} if clusters is None else {"num_clusters": len(set(clusters))}
    if n == 0:
        return {"accuracy": None, "ci_low": None, "ci_high": None, "num_examples": 0, "by_seed": [], **extra}
    low, high = _bounds(_replicates(mean, clusters, name, resamples))
    return {"accuracy": float(mean.mean()), "ci_low": low, "ci_high": high, "num_examples": int(n),
            "by_seed": [float(r.mean()) for r in rows], **extra}


def paired_difference(better, worse, name: str, resamples: int = RESAMPLES,
                      clusters: Sequence | None = None) -> dict:
    """Is ``better`` more accurate than ``worse`` on the same examples? {difference (in
    accuracy), ci_low, ci_high, p_value}: the difference's 95% paired bootstrap interval
    and a two-sided bootstrap p-value for "no difference" (twice the share of resamples
    on the far side of zero, with one added to each count so it is never 0). With
    ``clusters``, both models are resampled by the same clusters (``num_clusters``)."""
    a, b = _per_example(better), _per_example(worse)
    if a.shape != b.shape:
        raise ValueError(f"{name}: the two models were scored on different examples ({a.shape} vs {b.shape})")
    n = a.shape[0]
    extra = {} if clusters is None else {"num_clusters": len(set(clusters))}
    if n == 0:
        return {"difference": None, "ci_low": None, "ci_high": None, "p_value": None, "num_examples": 0,
                **extra}
    diff = a - b
    replicates = _replicates(diff, clusters, name, resamples)
    low, high = _bounds(replicates)
    below = (int((replicates <= 0).sum()) + 1) / (resamples + 1)
    above = (int((replicates >= 0).sum()) + 1) / (resamples + 1)
    return {"difference": float(diff.mean()), "ci_low": low, "ci_high": high,
            "p_value": min(1.0, 2 * min(below, above)), "num_examples": int(n), **extra}


def wilson(successes: int, total: int) -> tuple[float | None, float | None]:
    """The 95% Wilson score interval of a proportion (a model error rate at collection):
    ``ml.metrics.wilson_interval``, the one the data releases' cards use too."""
    return wilson_interval(successes, total)


def mean(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None
