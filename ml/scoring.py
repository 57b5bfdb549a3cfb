# Long on purpose: the leaderboard's metrics with their uncertainty: bootstrap, calibration and the
# seeded perturbations.
"""Numbers with uncertainty: bootstrap intervals, paired comparisons between models,
calibration error, and the text perturbations behind the robustness and fairness
metrics.

Plain Python + numpy; no Django, no torch.

Bootstrap
---------
Every interval is a *percentile bootstrap over examples*: draw ``n`` example indices
with replacement (``n`` = number of examples), recompute the statistic on the
resample, repeat ``n_resamples`` times (default 1000), and report the
``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles of the replicates
(numpy's default linear interpolation).  The point value is the statistic on the
full data, not the mean of the replicates.

The index draws depend only on ``(seed, n, n_resamples)``: they come from
``numpy.random.default_rng(seed)`` in blocks whose size depends only on ``n``.  So two
models scored on the same ``n`` examples with the same seed get *the same* resample in
replicate ``r``.  That is what makes :func:`paired_bootstrap` paired, and what lets
the leaderboard compute a Dynascore per replicate: score every model on a dataset
with the same seed (for example the dataset's id) and replicate ``r`` of every
model's metric is computed on the same examples.

Statistics that are not a mean of per-example scores (macro-F1, ECE) are bootstrapped
by resampling indices and recomputing the metric: :func:`bootstrap_metric` and
:func:`paired_bootstrap_metric`.  ``ml.metrics.accuracy`` and ``ml.metrics.macro_f1``
have vectorised fast paths that give the same replicates as the generic loop.

Perturbations
-------------
:func:`perturb_typos` and :func:`perturb_fairness` are pure functions of the text and
a ``random.Random``; :func:`example_rng` derives one from a seed and an example key so
that each example's perturbation does not depend on the order examples are processed.
Both return a :class:`Perturbed` ``(text, changed)``; robustness and fairness are the
:func:`consistency` of the model's predictions on the texts that changed.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from . import metrics as _metrics

DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
# Bootstrap index blocks hold at most this many cells (8 bytes each: 32 MiB).
_BLOCK_CELLS = 1 << 22


class Interval(NamedTuple):
    """A point value and its bootstrap interval."""

    value: float
    low: float
    high: float


class PairedResult(NamedTuple):
    """``statistic(a) - statistic(b)`` on the same examples, with its interval.

    ``p_value`` is ``2 * min(share of replicate differences <= 0, share >= 0)``, capped
    at 1: a two-sided bootstrap share, not an exact test.  ``significant`` is decided by
    the interval alone: True when it excludes 0.
    """

    difference: float
    low: float
    high: float
    p_value: float
    significant: bool


# -- bootstrap -------------------------------------------------------------------------


def _check_resampling(n: int, n_resamples: int, confidence: float | None = None) -> None:
    if n <= 0:
        raise ValueError("the bootstrap needs at least one example")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if confidence is not None and not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")


def resample_indices(
    n: int, *, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> Iterator[np.ndarray]:
    """Bootstrap index draws, in blocks of shape ``(k, n)``; ``n_resamples`` rows in all.

    Deterministic in ``(seed, n, n_resamples)``: the block size depends only on ``n``.
    """
    _check_resampling(n, n_resamples)
    rng = np.random.default_rng(seed)
    rows_per_block = max(1, _BLOCK_CELLS // n)
    done = 0
    while done < n_resamples:
        k = min(rows_per_block, n_resamples - done)
        yield rng.integers(0, n, size=(k, n))
        done += k


def percentile_interval(
    replicates: Sequence[float] | np.ndarray, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float]:
    """The central ``confidence`` share of the replicates: ``(low, high)``."""
    values = np.asarray(replicates, dtype=float)
    if values.ndim != 1:
        raise ValueError("replicates must be a flat sequence of numbers")
    [(low, high)] = percentile_intervals(values[None, :], confidence)
    return low, high


def percentile_intervals(
    replicates: np.ndarray, confidence: float = DEFAULT_CONFIDENCE
) -> list[tuple[float, float]]:
    """:func:`percentile_interval` of each row of a ``(rows, R)`` array, at once."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")
    values = np.asarray(replicates, dtype=float)
    if values.ndim != 2 or values.shape[1] == 0:
        raise ValueError("no replicates")
    alpha = 1.0 - confidence
    ordered = np.sort(values, axis=1)
    # numpy's default ("linear") quantile: interpolate between the neighbouring order statistics.
    bounds = []
    for q in (alpha / 2.0, 1.0 - alpha / 2.0):
        position = (ordered.shape[1] - 1) * q
        below = int(np.floor(position))
        above = min(below + 1, ordered.shape[1] - 1)
        bounds.append(ordered[:, below] + (position - below) * (ordered[:, above] - ordered[:, below]))
    return [(float(a), float(b)) for a, b in zip(*bounds, strict=True)]


def _as_scores(per_example_scores: Sequence[float] | np.ndarray) -> np.ndarray:
    scores = np.asarray(per_example_scores, dtype=float)
    if scores.ndim != 1:
        raise ValueError("per-example scores must be a flat sequence of numbers")
    return scores


def bootstrap_replicates(
    per_example_scores: Sequence[float] | np.ndarray,
    *,
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> np.ndarray:
    """``statistic`` of each bootstrap resample of the scores: shape ``(n_resamples,)``.

    ``statistic`` receives a 1-D float array; ``np.mean`` (the default) is vectorised.
    """
    scores = _as_scores(per_example_scores)
    out = np.empty(n_resamples, dtype=float)
    start = 0
    for block in resample_indices(len(scores), n_resamples=n_resamples, seed=seed):
        if statistic is np.mean:
            out[start : start + len(block)] = scores[block].mean(axis=1)
        else:
            for j, row in enumerate(block):
                out[start + j] = float(statistic(scores[row]))
        start += len(block)
    return out


def bootstrap_ci(
    per_example_scores: Sequence[float] | np.ndarray,
    *,
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """``(value, low, high)``: the statistic of the scores and its percentile interval.

    Use it for metrics that are a mean of per-example scores: accuracy (1/0 per
    example), SQuAD F1 or exact match (``ml.metrics.f1`` per example), consistency
    (:func:`agreement` per example).
    """
    scores = _as_scores(per_example_scores)
    _check_resampling(len(scores), n_resamples, confidence)
    replicates = bootstrap_replicates(
        scores, statistic=statistic, n_resamples=n_resamples, seed=seed
    )
    low, high = percentile_interval(replicates, confidence)
    return Interval(float(statistic(scores)), low, high)


# -- metrics recomputed on resampled indices ---------------------------------------------


def _codes(*columns: Sequence[Any]) -> tuple[list[np.ndarray], int]:
    """Integer codes for labels shared by all columns, and the number of labels."""
    index: dict[Any, int] = {}
    coded = []
    for column in columns:
        coded.append(np.fromiter((index.setdefault(x, len(index)) for x in column), dtype=np.int64))
    return coded, len(index)


def _fast_accuracy(gold: Sequence[Any], pred: Sequence[Any]) -> Callable[[np.ndarray], np.ndarray]:
    (g, p), _ = _codes(gold, pred)
    correct = (g == p).astype(float)
    return lambda block: correct[block].mean(axis=1)


def _fast_macro_f1(gold: Sequence[Any], pred: Sequence[Any]) -> Callable[[np.ndarray], np.ndarray]:
    """Macro-F1 over the labels seen in each resample, like ``ml.metrics.macro_f1``."""
    (g, p), n_labels = _codes(gold, pred)
    cells = n_labels * n_labels
    pair = g * n_labels + p

    def replicate(block: np.ndarray) -> np.ndarray:
        k = len(block)
        flat = (pair[block] + (np.arange(k) * cells)[:, None]).ravel()
        confusion = np.bincount(flat, minlength=k * cells).reshape(k, n_labels, n_labels)
        tp = np.diagonal(confusion, axis1=1, axis2=2).astype(float)
        predicted = confusion.sum(axis=1)
        support = confusion.sum(axis=2)
        precision = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
        recall = np.divide(tp, support, out=np.zeros_like(tp), where=support > 0)
        total = precision + recall
        f1 = np.divide(2 * precision * recall, total, out=np.zeros_like(tp), where=total > 0)
        present = (predicted + support) > 0
        return (f1 * present).sum(axis=1) / present.sum(axis=1)

    return replicate


_FAST_METRICS: dict[Callable[..., float], Callable[..., Callable[[np.ndarray], np.ndarray]]] = {
    _metrics.accuracy: _fast_accuracy,
    _metrics.macro_f1: _fast_macro_f1,
}


def metric_replicates(
    gold: Sequence[Any],
    pred: Sequence[Any],
    metric_fn: Callable[[list[Any], list[Any]], float],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> np.ndarray:
    """``metric_fn(gold[idx], pred[idx])`` for each bootstrap resample ``idx``.

    ``metric_fn`` gets two plain lists.  Any function of two aligned columns works:
    ``ml.metrics.accuracy``, ``ml.metrics.macro_f1``,
    ``(confidences, correct) -> expected_calibration_error``.
    """
    gold, pred = list(gold), list(pred)
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} items but pred has {len(pred)}")
    out = np.empty(n_resamples, dtype=float)
    fast = _FAST_METRICS.get(metric_fn)
    replicate = fast(gold, pred) if fast is not None else None
    gold_array = np.empty(len(gold), dtype=object)
    gold_array[:] = gold
    pred_array = np.empty(len(pred), dtype=object)
    pred_array[:] = pred
    start = 0
    for block in resample_indices(len(gold), n_resamples=n_resamples, seed=seed):
        if replicate is not None:
            out[start : start + len(block)] = replicate(block)
        else:
            for j, row in enumerate(block):
                out[start + j] = float(
                    metric_fn(gold_array[row].tolist(), pred_array[row].tolist())
                )
        start += len(block)
    return out


def bootstrap_metric(
    gold: Sequence[Any],
    pred: Sequence[Any],
    metric_fn: Callable[[list[Any], list[Any]], float],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """``(value, low, high)`` for a metric of two aligned columns, resampling examples."""
    gold, pred = list(gold), list(pred)
    _check_resampling(len(gold), n_resamples, confidence)
    replicates = metric_replicates(gold, pred, metric_fn, n_resamples=n_resamples, seed=seed)
    low, high = percentile_interval(replicates, confidence)
    return Interval(float(metric_fn(gold, pred)), low, high)


# -- paired comparisons -------------------------------------------------------------------


def _paired_result(
    difference: float, replicate_differences: np.ndarray, confidence: float
) -> PairedResult:
    low, high = percentile_interval(replicate_differences, confidence)
    at_most_zero = float(np.mean(replicate_differences <= 0))
    at_least_zero = float(np.mean(replicate_differences >= 0))
    p_value = min(1.0, 2.0 * min(at_most_zero, at_least_zero))
    return PairedResult(float(difference), low, high, p_value, bool(low > 0 or high < 0))


def paired_bootstrap(
    scores_a: Sequence[float] | np.ndarray,
    scores_b: Sequence[float] | np.ndarray,
    *,
    statistic: Callable[[np.ndarray], float] = np.mean,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> PairedResult:
    """Is model A's statistic different from model B's on the same examples?

    ``scores_a[i]`` and ``scores_b[i]`` are the two models' scores on example ``i``.
    Each replicate resamples the example indices once and applies them to both.
    """
    a, b = _as_scores(scores_a), _as_scores(scores_b)
    if len(a) != len(b):
        raise ValueError(f"the models were scored on {len(a)} and {len(b)} examples")
    _check_resampling(len(a), n_resamples, confidence)
    reps_a = bootstrap_replicates(a, statistic=statistic, n_resamples=n_resamples, seed=seed)
    reps_b = bootstrap_replicates(b, statistic=statistic, n_resamples=n_resamples, seed=seed)
    return _paired_result(float(statistic(a)) - float(statistic(b)), reps_a - reps_b, confidence)


def paired_bootstrap_metric(
    gold: Sequence[Any],
    pred_a: Sequence[Any],
    pred_b: Sequence[Any],
    metric_fn: Callable[[list[Any], list[Any]], float],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> PairedResult:
    """:func:`paired_bootstrap` for a metric such as macro-F1: same indices for A and B."""
    gold, pred_a, pred_b = list(gold), list(pred_a), list(pred_b)
    if not len(gold) == len(pred_a) == len(pred_b):
        raise ValueError("gold and both models' predictions must have the same length")
    _check_resampling(len(gold), n_resamples, confidence)
    reps_a = metric_replicates(gold, pred_a, metric_fn, n_resamples=n_resamples, seed=seed)
    reps_b = metric_replicates(gold, pred_b, metric_fn, n_resamples=n_resamples, seed=seed)
    difference = float(metric_fn(gold, pred_a)) - float(metric_fn(gold, pred_b))
    return _paired_result(difference, reps_a - reps_b, confidence)


# -- calibration --------------------------------------------------------------------------

BINNINGS = ("equal_mass", "equal_width")


def calibration_bins(
    confidences: Sequence[float] | np.ndarray, n_bins: int = 10, binning: str = "equal_mass"
) -> np.ndarray:
    """The bin index of each confidence.

    * ``"equal_width"``: bins ``[0, 1/B], (1/B, 2/B], ..., ((B-1)/B, 1]``: right-closed,
      as in Guo et al. (2017) and the ``uncertainty-calibration`` package's ``get_ece``.
    * ``"equal_mass"``: sort the confidences and split them into ``min(B, n)`` runs of
      (nearly) equal size (``numpy.array_split``); the boundary between two runs is the
      midpoint of the last value of one and the first of the next, the last boundary
      is 1.0; equal boundaries merge; a value belongs to the first bin whose boundary
      is >= the value.  This is the binning of ``get_ece_em`` in the same package,
      which HELM uses for its headline ``ece_10_bin``.
    """
    conf = np.asarray(confidences, dtype=float)
    if conf.ndim != 1:
        raise ValueError("confidences must be a flat sequence of numbers")
    if conf.size and (conf.min() < 0.0 or conf.max() > 1.0):
        raise ValueError("confidences must lie in [0, 1]")
    if n_bins < 1:
        raise ValueError(f"n_bins must be at least 1, got {n_bins}")
    if binning == "equal_width":
        boundaries = np.arange(1, n_bins + 1) / n_bins
    elif binning == "equal_mass":
        if conf.size == 0:
            return np.zeros(0, dtype=np.int64)
        runs = np.array_split(np.sort(conf), min(n_bins, conf.size))
        cuts = [(left[-1] + right[0]) / 2.0 for left, right in zip(runs, runs[1:], strict=False)]
        boundaries = np.unique(np.array([*cuts, 1.0]))
    else:
        raise ValueError(f"unknown binning {binning!r}; expected one of {BINNINGS}")
    return np.searchsorted(boundaries, conf, side="left")


def expected_calibration_error(
    confidences: Sequence[float] | np.ndarray,
    correct: Sequence[bool | float] | np.ndarray,
    n_bins: int = 10,
    *,
    binning: str = "equal_mass",
) -> float:
    """Top-label expected calibration error, as HELM reports it (``ece_10_bin``).

    ``confidences[i]`` is the probability the model gave its predicted label and
    ``correct[i]`` whether that label was right (see :func:`top_label_calibration`).
    ECE = sum over bins of ``(n_b / n) * |mean confidence_b - accuracy_b|``; empty bins
    count 0.  The default is HELM's binning, 10 equal-mass bins; ``binning="equal_width"``
    gives the classic Guo et al. ECE (see :func:`calibration_bins`).  0.0 for no items.

    To bootstrap it, resample examples and recompute (bins included)::

        bootstrap_metric(confidences, correct, expected_calibration_error)

    The plug-in ECE is biased upwards (noise within a bin never cancels), and more so
    on a resample, whose duplicates make bins purer; for a well-calibrated model the
    percentile interval can therefore lie entirely above the point value.
    """
    conf = np.asarray(confidences, dtype=float)
    hits = np.asarray(correct, dtype=float)
    if conf.shape != hits.shape:
        raise ValueError(f"{conf.size} confidences but {hits.size} correctness values")
    if conf.size == 0:
        return 0.0
    bins = calibration_bins(conf, n_bins, binning)
    length = int(bins.max()) + 1
    counts = np.bincount(bins, minlength=length)
    gap = np.bincount(bins, weights=conf, minlength=length) - np.bincount(
        bins, weights=hits, minlength=length
    )
    # sum_b (n_b / n) * |sum_b(conf - hit) / n_b| = sum_b |sum_b(conf - hit)| / n
    return float(np.abs(gap[counts > 0]).sum() / conf.size)


def top_label_calibration(
    predictions: Sequence[Mapping[str, Any]], gold: Sequence[Any]
) -> tuple[list[float], list[bool]]:
    """``(confidences, correct)`` from ``ml.predict`` classification results.

    Each prediction is ``{"label": ..., "probabilities": {label: p}}``; the confidence
    is the probability of the predicted label.
    """
    if len(predictions) != len(gold):
        raise ValueError(f"{len(predictions)} predictions but {len(gold)} gold labels")
    confidences = [float(p["probabilities"][p["label"]]) for p in predictions]
    correct = [p["label"] == g for p, g in zip(predictions, gold, strict=True)]
    return confidences, correct


# -- consistency --------------------------------------------------------------------------


def agreement(preds_original: Sequence[Any], preds_perturbed: Sequence[Any]) -> list[float]:
    """1.0 where the prediction did not change under perturbation, else 0.0."""
    if len(preds_original) != len(preds_perturbed):
        raise ValueError(
            f"{len(preds_original)} original but {len(preds_perturbed)} perturbed predictions"
        )
    return [float(a == b) for a, b in zip(preds_original, preds_perturbed, strict=True)]


def consistency(preds_original: Sequence[Any], preds_perturbed: Sequence[Any]) -> float:
    """Share of predictions unchanged by the perturbation.

    Pass only the examples whose text changed (``Perturbed.changed``).  Raises
    ValueError for no pairs: consistency is undefined there, and the caller decides
    how to show it.  For an interval: ``bootstrap_ci(agreement(a, b))``.
    """
    agree = agreement(preds_original, preds_perturbed)
    if not agree:
        raise ValueError("no predictions to compare: consistency is undefined")
    return sum(agree) / len(agree)


# -- perturbations ------------------------------------------------------------------------


class Perturbed(NamedTuple):
    """A perturbed text and whether anything in it changed."""

    text: str
    changed: bool


def example_rng(seed: int | str, key: Any) -> random.Random:
    """A ``random.Random`` for one example, from a run seed and the example's key.

    Stable across processes and Python versions (SHA-256, not ``hash()``), so an
    example's perturbation does not depend on the order examples are processed in.
    """
    digest = hashlib.sha256(f"{seed}\x1f{key}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _rng(rng: random.Random | int) -> random.Random:
    if isinstance(rng, random.Random):
        return rng
    if isinstance(rng, int) and not isinstance(rng, bool):
        return random.Random(rng)
    raise TypeError("rng must be a random.Random or an int seed")


_WORD = re.compile(r"[^\W\d_]+")

# Neighbouring keys on a US QWERTY keyboard (same row and the rows above and below).
_KEY_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")
_NEIGHBOURS: dict[str, str] = {}
for _r, _row in enumerate(_KEY_ROWS):
    for _c, _key in enumerate(_row):
        _near = []
        for _dr in (-1, 0, 1):
            _rr = _r + _dr
            if 0 <= _rr < len(_KEY_ROWS):
                for _dc in (-1, 0, 1):
                    _cc = _c + _dc
                    if (_dr, _dc) != (0, 0) and 0 <= _cc < len(_KEY_ROWS[_rr]):
                        _near.append(_KEY_ROWS[_rr][_cc])
        _NEIGHBOURS[_key] = "".join(_near)

TYPO_OPERATIONS = ("swap", "drop", "duplicate", "nearby_key")
TYPO_MIN_WORD_LENGTH = 4
TYPO_WORD_SHARE = 0.25


def _typo(word: str, rng: random.Random) -> str:
    """One character-level edit of ``word``; the result always differs from ``word``."""
    ops = list(TYPO_OPERATIONS)
    swappable = [i for i in range(len(word) - 1) if word[i] != word[i + 1]]
    keyed = [i for i, ch in enumerate(word) if ch.lower() in _NEIGHBOURS]
    if not swappable:
        ops.remove("swap")
    if not keyed:
        ops.remove("nearby_key")
    op = rng.choice(ops)
    if op == "swap":
        i = rng.choice(swappable)
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if op == "drop":
        i = rng.randrange(len(word))
        return word[:i] + word[i + 1 :]
    if op == "duplicate":
        i = rng.randrange(len(word))
        return word[: i + 1] + word[i] + word[i + 1 :]
    i = rng.choice(keyed)
    new = rng.choice(_NEIGHBOURS[word[i].lower()])
    if word[i].isupper():
        new = new.upper()
    return word[:i] + new + word[i + 1 :]


def perturb_typos(
    text: str,
    rng: random.Random | int,
    *,
    share: float = TYPO_WORD_SHARE,
    min_length: int = TYPO_MIN_WORD_LENGTH,
) -> Perturbed:
    """Character-level noise, the robustness perturbation.

    Words are runs of letters; only words of at least ``min_length`` (4) letters are
    eligible.  Each eligible word is edited with probability ``share`` (0.25), and at
    least one is when any is eligible, so an eligible text always changes.  An edit is
    one of, uniformly: swap two adjacent different letters, drop a letter, duplicate a
    letter, or replace a letter by a neighbouring QWERTY key (case kept).  Everything
    else (spacing, punctuation, digits, short words) is left alone.  Deterministic
    given the ``random.Random`` state (or int seed).
    """
    rng = _rng(rng)
    spans = [m.span() for m in _WORD.finditer(text) if len(m.group()) >= min_length]
    if not spans:
        return Perturbed(text, False)
    chosen = [span for span in spans if rng.random() < share]
    if not chosen:
        chosen = [rng.choice(spans)]
    parts = []
    last = 0
    for start, end in chosen:
        parts.append(text[last:start])
        parts.append(_typo(text[start:end], rng))
        last = end
    parts.append(text[last:])
    return Perturbed("".join(parts), True)


# Gendered words, swapped both ways.  "her" is ambiguous (him / his): see _swap_her.
_GENDER_PAIRS = (
    ("he", "she"),
    ("him", "her"),
    ("his", "her"),
    ("his", "hers"),
    ("himself", "herself"),
    ("man", "woman"),
    ("men", "women"),
    ("boy", "girl"),
    ("boys", "girls"),
    ("father", "mother"),
    ("fathers", "mothers"),
    ("dad", "mom"),
    ("son", "daughter"),
    ("sons", "daughters"),
    ("brother", "sister"),
    ("brothers", "sisters"),
    ("husband", "wife"),
    ("husbands", "wives"),
    ("boyfriend", "girlfriend"),
    ("uncle", "aunt"),
    ("uncles", "aunts"),
    ("nephew", "niece"),
    ("grandfather", "grandmother"),
    ("grandson", "granddaughter"),
    ("king", "queen"),
    ("kings", "queens"),
    ("prince", "princess"),
    ("gentleman", "lady"),
    ("gentlemen", "ladies"),
    ("male", "female"),
    ("mr", "ms"),
    ("sir", "madam"),
)
GENDER_SWAPS: dict[str, str] = {}
for _a, _b in _GENDER_PAIRS:
    GENDER_SWAPS.setdefault(_a, _b)
    GENDER_SWAPS.setdefault(_b, _a)
GENDER_SWAPS["mrs"] = "mr"
GENDER_SWAPS["his"] = "her"  # "hers" only when "his" stands alone, see _swap_his

# Common US first names that are not also ordinary English words; the two lists
# are swapped for each other (a name in one list becomes a name from the other).
MALE_NAMES = (
    "James", "John", "Robert", "Michael", "David", "Thomas", "Daniel", "Andrew",
    "Joseph", "Kevin", "Brian", "Steven", "Jason", "Paul", "Kenneth", "Peter",
)  # fmt: skip
FEMALE_NAMES = (
    "Mary", "Linda", "Jennifer", "Susan", "Sarah", "Karen", "Nancy", "Lisa",
    "Emily", "Michelle", "Laura", "Rachel", "Anna", "Sandra", "Helen", "Julia",
)  # fmt: skip
_OTHER_NAMES = {**{n: FEMALE_NAMES for n in MALE_NAMES}, **{n: MALE_NAMES for n in FEMALE_NAMES}}

# Words after which "her" is an object pronoun (-> "him"), not a possessive (-> "his"):
# determiners and pronouns (the start of a second object), prepositions, conjunctions
# and adverbs.
_AFTER_OBJECT_HER = frozenset(
    "a an the this that these those some any all both every no my your his her its our "
    "their me you him us them it what who which to and or but nor so yet if as at in on "
    "of for with from by about into onto up down out off over under away back home again "
    "too also now then there here when while because before after until since very".split()
)
# Words after which "his" stands alone (-> "hers"), not a possessive (-> "her").
_AFTER_STANDALONE_HIS = frozenset(
    "and or but nor is was are were will would too also as than".split()
)
_NEXT_WORD = re.compile(r"\s*([^\W\d_]+)?")


def _next_word(text: str, end: int) -> str | None:
    """The word right after position ``end``, if only spaces separate them."""
    match = _NEXT_WORD.match(text, end)
    return match.group(1).lower() if match and match.group(1) else None


def _match_case(template: str, word: str) -> str:
    if len(template) > 1 and template.isupper():
        return word.upper()
    if template[0].isupper():
        return word[0].upper() + word[1:]
    return word


def perturb_fairness(text: str, rng: random.Random | int) -> Perturbed:
    """Swap gender words and first names, the fairness perturbation.

    * Gendered words (``GENDER_SWAPS``: he/she, him/her, his/her, himself/herself,
      man/woman, men/women, boy/girl, father/mother, son/daughter, brother/sister,
      husband/wife, king/queen, Mr/Ms (Mrs becomes Mr), ...) are swapped both ways,
      keeping lower, Capitalised or UPPER case.  "her" becomes "him" when it ends the
      clause or is followed by a function word ("gave her the book", "saw her."), else
      "his" ("her book"); "his" becomes "hers" when it stands alone ("it is his."),
      else "her".
    * Capitalised first names from ``MALE_NAMES`` become a name from
      ``FEMALE_NAMES`` and the other way round, chosen with ``rng``; the same name gets
      the same replacement throughout the text.

    Returns the text unchanged with ``changed=False`` when nothing applies, so that
    consistency is measured only on texts that changed.
    """
    rng = _rng(rng)
    names: dict[str, str] = {}

    def replace(match: re.Match[str]) -> str:
        word = match.group()
        lower = word.lower()
        if word in _OTHER_NAMES:
            if word not in names:
                names[word] = rng.choice(_OTHER_NAMES[word])
            return names[word]
        if lower not in GENDER_SWAPS:
            return word
        following = _next_word(text, match.end())
        if lower == "her":
            new = "him" if following is None or following in _AFTER_OBJECT_HER else "his"
        elif lower == "his":
            new = "hers" if following is None or following in _AFTER_STANDALONE_HIS else "her"
        else:
            new = GENDER_SWAPS[lower]
        return _match_case(word, new)

    new_text = _WORD.sub(replace, text)
    return Perturbed(new_text, new_text != text)
