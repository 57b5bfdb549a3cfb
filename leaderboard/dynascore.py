# Long on purpose: one algorithm: the Dynascore, its replicates and its ranking with paired ties.
"""The Dynascore (Ma et al., 2021, "Dynaboard"): one number from several metrics,
with the weights a user chooses.

Pure functions on plain data; no Django.

Metrics
-------
``performance`` (the task's metric: accuracy, macro-F1 or SQuAD F1; higher is
better), ``throughput`` (examples/s; higher), ``memory`` (peak memory; lower),
``robustness`` and ``fairness`` (prediction consistency under perturbation; higher),
``calibration`` (expected calibration error; lower).

The formula
-----------
For models ``i``, metrics ``m``, datasets ``d`` with dataset weights ``v_d``
(default 1 each) and metric weights ``w_m`` (default performance 4, throughput 1,
memory 1, robustness 1, fairness 1, calibration 0):

1. Average over datasets: ``x_im = sum_d v_d x_imd / sum_d v_d``.
2. Turn lower-is-better metrics around by negating them: ``y_im = s_m x_im + c_m``
   with ``s_m = -1`` for memory and calibration, ``+1`` otherwise; the offset ``c_m``
   is 0 unless the caller passes one (Dynaboard shows memory as "16 GB - memory";
   an offset moves every model's Dynascore by the same amount and changes no
   ranking, because the AMRS below only uses differences).
3. Average marginal rate of substitution of each metric against performance (``p_i =
   y_i,performance``): sort the models by performance, ascending (equal performance:
   by ``str(model)``), and for each pair of neighbours ``k, k+1`` whose performance
   differs by more than ``1e-4 * max_i |p_i|`` (closer pairs are skipped, so that
   noise-level gaps do not blow the rate up):

       AMRS_m = mean over those pairs of |y_(k+1)m - y_(k)m| / (p_(k+1) - p_(k))

   This is "how many units of m one unit of performance is worth".  AMRS_performance
   is 1.  As in the paper (and Dynabench's own implementation) the rate is
   |delta metric| / delta performance, and a metric is converted into units of
   performance by *dividing* by it.
4. Dynascore: ``D_i = sum_m w_m * y_im / AMRS_m / sum_m w_m``.

A metric whose AMRS is undefined (no usable pair: one model, or all performances
equal) or 0 (the metric is the same for every model along the usable pairs) cannot
be priced in units of performance: it is left out of both sums, so it changes no
ranking, and ``D_i`` stays on performance's scale (one model alone scores its
performance).  A metric no model has is left out the same way; one that only some
models have is an error (rank only complete rows).  If no weighted metric is left,
every Dynascore is 0.0.

Worked example (one dataset, default weights, sum of weights 8)::

    model  performance  throughput  memory  robustness  fairness  calibration (ECE)
    A      0.60         100         2.0     0.70        0.80      0.10
    B      0.70          60         3.0     0.75        0.85      0.08
    C      0.80          40         5.0     0.85        0.80      0.05

  Sorted by performance: A, B, C; both gaps are 0.10.
  throughput:  |60-100|/0.1 = 400, |40-60|/0.1 = 200   -> AMRS 300
  memory:      y = -2, -3, -5;  1/0.1 = 10, 2/0.1 = 20  -> AMRS 15
  robustness:  0.05/0.1 = 0.5,  0.10/0.1 = 1.0         -> AMRS 0.75
  fairness:    0.05/0.1 = 0.5,  0.05/0.1 = 0.5         -> AMRS 0.5
  calibration: y = -0.10, -0.08, -0.05; 0.2, 0.3        -> AMRS 0.25 (weight 0)

  converted  perf  thr = x/300  mem = y/15  rob = x/0.75  fair = x/0.5  cal = y/0.25
  A          0.60  1/3          -2/15       14/15         1.6           -0.40
  B          0.70  1/5          -1/5        1             1.7           -0.32
  C          0.80  2/15         -1/3        17/15         1.6           -0.20

  D_A = (4*0.60 + 1/3 - 2/15 + 14/15 + 1.6) / 8 = (2.4 + 41/15) / 8 = 77/120 = 0.641667
  D_B = (4*0.70 + 1/5 - 1/5  + 1     + 1.7) / 8 = (2.8 + 2.7)   / 8 = 11/16  = 0.687500
  D_C = (4*0.80 + 2/15 - 1/3 + 17/15 + 1.6) / 8 = (3.2 + 38/15) / 8 = 43/60  = 0.716667

  Ranking: C, B, A.  (tests/leaderboard/test_dynascore.py asserts these numbers.)

Against Dynaboard's published NLI board (tests/leaderboard/test_dynascore_dynaboard.py):
the paper prints inputs and Dynascores with two decimals, and there are inputs within
0.005 of the printed ones at which this Dynascore is the printed one plus one constant
(an offset such as the unpublished memory cap moves only that constant) to within 0.005.
At the printed inputs themselves the offset varies by 0.04: the AMRS is dominated by the
closest neighbours (0.13 points apart), whose gap the rounding leaves uncertain by 8%.

Ranking and ties
----------------
:func:`rank` orders by: higher Dynascore (compared after rounding to 12 decimal
places, so that float noise does not decide), then higher performance (same
rounding), then older model (``created`` ascending; rows without it after those
with it), then ``name`` (default ``str(model)``), then ``str(model)``.  Every row
gets two tie marks, each ``False`` on the last row:

* ``tied_with_next``, on the ranked quantity: whether the 95% percentile interval of
  the per-replicate Dynascore difference with the next row (the same bootstrap
  replicates, AMRS recomputed in each, :func:`dynascore_replicates`) holds 0.
  ``None`` without replicate values, or when ``comparable(a, b)`` says the two
  models' replicates do not pair (scored on different examples).
* ``performance_tied_with_next``: whether the performance difference with the next
  row is *not* significant by a paired bootstrap (:func:`ml.scoring.paired_bootstrap`)
  on the per-example performance vectors the caller supplies, or by the caller's
  ``is_tie``; ``None`` when neither can tell.

Intervals
---------
:func:`dynascore_interval` computes the whole Dynascore, AMRS included, once per
bootstrap replicate, from per-replicate metric values per model (for example
``ml.scoring.bootstrap_replicates`` of each model's per-example scores on each dataset
with one seed per dataset, so replicate ``r`` is the same resample for every model),
and takes percentiles per model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ml.scoring import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    paired_bootstrap,
    percentile_intervals,
)

PERFORMANCE = "performance"
METRICS = ("performance", "throughput", "memory", "robustness", "fairness", "calibration")
HIGHER_IS_BETTER = {
    "performance": True,
    "throughput": True,
    "memory": False,
    "robustness": True,
    "fairness": True,
    "calibration": False,
}
DEFAULT_WEIGHTS = {
    "performance": 4.0,
    "throughput": 1.0,
    "memory": 1.0,
    "robustness": 1.0,
    "fairness": 1.0,
    "calibration": 0.0,
}
MIN_WEIGHT = 0.0
MAX_WEIGHT = 5.0
# Neighbouring models whose performance differs by at most this share of the best
# absolute performance are not used for the AMRS.
PERFORMANCE_GAP = 1e-4
# Dynascores and performances are compared after rounding to this many decimals.
TIE_DECIMALS = 12

Model = Hashable
MetricValue = float | Mapping[str, float]
MetricValues = Mapping[str, MetricValue]


# -- weights ----------------------------------------------------------------------------


def _check_weight(name: str, value: float) -> float:
    if name not in DEFAULT_WEIGHTS:
        raise ValueError(f"unknown metric {name!r}; expected one of: {', '.join(METRICS)}.")
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise ValueError(f"the weight of {name} must be a number, got {value!r}.")
    value = float(value)
    if not math.isfinite(value) or not MIN_WEIGHT <= value <= MAX_WEIGHT:
        raise ValueError(
            f"the weight of {name} must be between {MIN_WEIGHT:g} and {MAX_WEIGHT:g}, got {value:g}."
        )
    return value


def _check_weights(weights: Mapping[str, float]) -> dict[str, float]:
    merged = dict(DEFAULT_WEIGHTS)
    for name, value in weights.items():
        merged[name] = _check_weight(name, value)
    if not any(merged.values()):
        raise ValueError("at least one weight must be above 0.")
    return merged


NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)")  # a plain decimal: no nan, inf or exponent


def parse_weight(name: str, raw: str) -> float:
    """One metric's weight from its text (``parse_weights``' rules for one part).

    The messages name no field: the caller says where the value came from (the API's
    error body puts them under ``weights``)."""
    name, raw = name.strip(), raw.strip()
    if name not in DEFAULT_WEIGHTS:
        raise ValueError(f"unknown metric {name!r}; expected one of: {', '.join(METRICS)}.")
    if not NUMBER.fullmatch(raw):
        raise ValueError(f"the weight of {name} must be a number, got {raw!r}.")
    return _check_weight(name, round(float(raw), 1))


def parse_weights(text: str | None) -> dict[str, float]:
    """Parse ``performance:4,throughput:1,...`` (any subset; the rest keep defaults).

    Raises ValueError with a message fit to show a user for: an empty part (``a:1,,b:2``,
    a trailing comma), a part without ``name:value``, an unknown name, a repeated
    name, a value that is not a plain decimal number (no ``nan``, ``inf`` or
    exponents), a value outside 0-5, and all weights 0.  ``None`` or an empty /
    blank string gives the defaults.  Spaces around names and values are ignored.
    Values are rounded to one decimal (the page's sliders move in halves): 1.00001
    and 1 are the same board, so variants cannot each cost a board's computation.
    """
    if text is None or not text.strip():
        return dict(DEFAULT_WEIGHTS)
    seen: dict[str, float] = {}
    for position, part in enumerate(text.split(","), start=1):
        part = part.strip()
        if not part:
            raise ValueError(f"part {position} is empty.")
        name, sep, raw = part.partition(":")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"{part!r} is not of the form name:value.")
        if name in seen:
            raise ValueError(f"{name} is given more than once.")
        seen[name] = parse_weight(name, raw)
    return _check_weights(seen)


def format_weights(weights: Mapping[str, float]) -> str:
    """The inverse of :func:`parse_weights`, all metrics in ``METRICS`` order."""
    merged = _check_weights(weights)
    return ",".join(f"{name}:{merged[name]:g}" for name in METRICS)


# -- averaging over datasets ---------------------------------------------------------------


def average_over_datasets(
    values: MetricValue, dataset_weights: Mapping[str, float] | None = None
) -> float:
    """Weighted mean of ``{dataset: value}``; a bare number is returned as is.

    Datasets missing from ``dataset_weights`` weigh 1.
    """
    if not isinstance(values, Mapping):
        return _finite(values, "metric value")
    if not values:
        raise ValueError("no datasets to average over")
    weights = dataset_weights or {}
    total = weighted = 0.0
    for dataset, value in values.items():
        weight = _finite(weights.get(dataset, 1.0), f"weight of dataset {dataset!r}")
        if weight < 0:
            raise ValueError(f"the weight of dataset {dataset!r} is negative")
        total += weight
        weighted += weight * _finite(value, f"value on dataset {dataset!r}")
    if total <= 0:
        raise ValueError("the dataset weights add up to 0")
    return weighted / total


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise ValueError(f"{what} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value}")
    return value


def aggregate(
    models: Mapping[Model, MetricValues], dataset_weights: Mapping[str, float] | None = None
) -> dict[Model, dict[str, float]]:
    """``{model: {metric: value}}`` averaged over datasets, checked to be complete.

    Every model must have the same metrics, ``performance`` included, and for each
    metric the same datasets.
    """
    if not models:
        return {}
    _check_complete(models)
    return {
        model: {name: average_over_datasets(value, dataset_weights) for name, value in row.items()}
        for model, row in models.items()
    }


def _datasets(value: MetricValue) -> frozenset[str] | None:
    return frozenset(value) if isinstance(value, Mapping) else None


def _check_complete(models: Mapping[Model, Mapping[str, Any]]) -> None:
    first_model, first = next(iter(models.items()))
    names = set(first)
    unknown = names - set(METRICS)
    if unknown:
        raise ValueError(
            f"unknown metric(s) {sorted(unknown)}; expected some of: {', '.join(METRICS)}"
        )
    if PERFORMANCE not in names:
        raise ValueError(f"model {first_model!r} has no performance")
    for model, row in models.items():
        if set(row) != names:
            missing = sorted(names.symmetric_difference(row))
            raise ValueError(
                f"models {first_model!r} and {model!r} do not have the same metrics "
                f"(differing: {missing}); rank only models with every metric"
            )
        for name in names:
            if _datasets(row[name]) != _datasets(first[name]):
                raise ValueError(
                    f"models {first_model!r} and {model!r} have {name} on different datasets"
                )


# -- the score ---------------------------------------------------------------------------


class Dynascores(NamedTuple):
    """What :func:`compute` found.

    ``scores``: the Dynascore per model.  ``averaged``: each metric averaged over
    datasets (as measured, not turned around).  ``amrs``: per metric, ``None`` where
    undefined.  ``converted``: per model and metric, the metric in units of
    performance (``y / AMRS``), ``None`` where the AMRS is undefined.
    ``weights``: the weights used (defaults filled in).
    """

    scores: dict[Model, float]
    averaged: dict[Model, dict[str, float]]
    amrs: dict[str, float | None]
    converted: dict[Model, dict[str, float | None]]
    weights: dict[str, float]


def _order(models: Sequence[Model]) -> list[Model]:
    return sorted(models, key=str)


def _score_matrix(
    values: Mapping[str, np.ndarray],
    weights: Mapping[str, float],
    offsets: Mapping[str, float] | None,
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The Dynascore for R replicates at once.

    ``values[metric]`` has shape ``(R, N)``: replicate by model, models in ``str``
    order.  Returns scores ``(R, N)``, AMRS per metric ``(R,)`` (NaN = undefined) and
    converted values per metric ``(R, N)`` (NaN = undefined).
    """
    offsets = offsets or {}
    oriented = {
        name: (1.0 if HIGHER_IS_BETTER[name] else -1.0) * x + float(offsets.get(name, 0.0))
        for name, x in values.items()
    }
    performance = oriented[PERFORMANCE]
    replicates, n_models = performance.shape
    order = np.argsort(performance, axis=1, kind="stable")
    perf_sorted = np.take_along_axis(performance, order, axis=1)
    perf_gaps = np.diff(perf_sorted, axis=1)
    threshold = PERFORMANCE_GAP * np.abs(performance).max(axis=1, keepdims=True)
    usable = perf_gaps > threshold
    pairs = usable.sum(axis=1)
    safe_gaps = np.where(usable, perf_gaps, 1.0)

    amrs: dict[str, np.ndarray] = {}
    converted: dict[str, np.ndarray] = {}
    numerator = np.zeros((replicates, n_models))
    denominator = np.zeros((replicates, 1))
    for name, y in oriented.items():
        if name == PERFORMANCE:
            rate = np.ones(replicates)
        else:
            metric_gaps = np.abs(np.diff(np.take_along_axis(y, order, axis=1), axis=1))
            ratios = np.where(usable, metric_gaps / safe_gaps, 0.0)
            with np.errstate(invalid="ignore", divide="ignore"):
                rate = np.where(pairs > 0, ratios.sum(axis=1) / np.maximum(pairs, 1), np.nan)
            rate = np.where(rate > 0, rate, np.nan)
        defined = np.isfinite(rate)[:, None]
        amrs[name] = rate
        with np.errstate(invalid="ignore", divide="ignore"):
            converted[name] = np.where(defined, y / np.where(defined, rate[:, None], 1.0), np.nan)
        weight = float(weights.get(name, 0.0))
        if weight > 0:
            numerator += np.where(defined, weight * np.nan_to_num(converted[name]), 0.0)
            denominator += np.where(defined, weight, 0.0)
    scores = np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0)
    return scores, amrs, converted


def _none_if_nan(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def compute(
    models: Mapping[Model, MetricValues],
    weights: Mapping[str, float] | None = None,
    *,
    dataset_weights: Mapping[str, float] | None = None,
    offsets: Mapping[str, float] | None = None,
) -> Dynascores:
    """The Dynascore of each model, with the pieces that went into it.

    ``models``: ``{model: {metric: value or {dataset: value}}}``; ``weights``: any
    subset of the metric weights (the rest keep their defaults); ``offsets``: constants
    added to the turned-around metrics (see the module docstring).
    """
    merged = _check_weights(weights or {})
    averaged = aggregate(models, dataset_weights)
    if not averaged:
        return Dynascores({}, {}, {}, {}, merged)
    keys = _order(list(averaged))
    names = [name for name in METRICS if name in averaged[keys[0]]]
    matrix = {name: np.array([[averaged[k][name] for k in keys]]) for name in names}
    scores, amrs, converted = _score_matrix(matrix, merged, offsets)
    return Dynascores(
        scores={k: float(scores[0, j]) for j, k in enumerate(keys)},
        averaged={k: averaged[k] for k in keys},
        amrs={name: _none_if_nan(float(amrs[name][0])) for name in names},
        converted={
            k: {name: _none_if_nan(float(converted[name][0, j])) for name in names}
            for j, k in enumerate(keys)
        },
        weights=merged,
    )


def dynascores(
    models: Mapping[Model, MetricValues],
    weights: Mapping[str, float] | None = None,
    *,
    dataset_weights: Mapping[str, float] | None = None,
    offsets: Mapping[str, float] | None = None,
) -> dict[Model, float]:
    """``{model: Dynascore}``; see :func:`compute`."""
    return compute(models, weights, dataset_weights=dataset_weights, offsets=offsets).scores


# -- intervals ---------------------------------------------------------------------------


def _replicate_column(value: Any, what: str) -> np.ndarray:
    array = np.asarray(value, dtype=float)
    if array.ndim > 1:
        raise ValueError(f"{what}: replicate values must be a number or a flat sequence")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: replicate values must be finite")
    return array


def dynascore_replicates(
    replicate_values: Mapping[Model, Mapping[str, Any]],
    weights: Mapping[str, float] | None = None,
    *,
    dataset_weights: Mapping[str, float] | None = None,
    offsets: Mapping[str, float] | None = None,
) -> dict[Model, np.ndarray]:
    """The Dynascore of every model in every bootstrap replicate.

    ``replicate_values[model][metric]`` is a sequence of R replicate values, a number
    (the same in every replicate: throughput and memory are measured, not resampled),
    or ``{dataset: sequence or number}``.  All sequences must have the same length R,
    and replicate ``r`` should be the same resample of examples for every model (same
    seed per dataset, see ``ml.scoring``).  The AMRS is recomputed in each replicate.
    """
    merged = _check_weights(weights or {})
    if not replicate_values:
        return {}
    _check_complete(replicate_values)
    keys = _order(list(replicate_values))
    names = [name for name in METRICS if name in replicate_values[keys[0]]]
    lengths: set[int] = set()
    columns: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for key in keys:
        for name in names:
            value = replicate_values[key][name]
            parts = value if isinstance(value, Mapping) else {None: value}
            if not parts:
                raise ValueError(f"{key!r} {name}: no datasets")
            weights_by_dataset = dataset_weights or {}
            total = 0.0
            column: np.ndarray | float = 0.0
            for dataset, part in parts.items():
                weight = 1.0 if dataset is None else float(weights_by_dataset.get(dataset, 1.0))
                if weight < 0:
                    raise ValueError(f"the weight of dataset {dataset!r} is negative")
                array = _replicate_column(part, f"{key!r} {name}")
                if array.ndim == 1:
                    lengths.add(len(array))
                column = column + weight * array
                total += weight
            if total <= 0:
                raise ValueError("the dataset weights add up to 0")
            columns[name].append(np.asarray(column, dtype=float) / total)
    if len(lengths) > 1:
        raise ValueError(f"replicate sequences have different lengths: {sorted(lengths)}")
    replicates = lengths.pop() if lengths else 1
    if replicates == 0:
        raise ValueError("no replicates")
    matrix = {
        name: np.stack([np.broadcast_to(c, (replicates,)) for c in cols], axis=1)
        for name, cols in columns.items()
    }
    scores, _, _ = _score_matrix(matrix, merged, offsets)
    return {key: scores[:, j].copy() for j, key in enumerate(keys)}


def dynascore_interval(
    replicate_values: Mapping[Model, Mapping[str, Any]],
    weights: Mapping[str, float] | None = None,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    dataset_weights: Mapping[str, float] | None = None,
    offsets: Mapping[str, float] | None = None,
) -> dict[Model, tuple[float, float]]:
    """``{model: (low, high)}``: percentiles of the per-replicate Dynascores."""
    per_model = dynascore_replicates(
        replicate_values, weights, dataset_weights=dataset_weights, offsets=offsets
    )
    if not per_model:
        return {}
    keys = list(per_model)
    found = percentile_intervals(np.vstack([per_model[key] for key in keys]), confidence)
    return dict(zip(keys, found, strict=True))


# -- ranking -----------------------------------------------------------------------------


def _sort_key(row: Mapping[str, Any], score: float, performance: float) -> tuple:
    created = row.get("created")
    model = row["model"]
    return (
        -round(score, TIE_DECIMALS),
        -round(performance, TIE_DECIMALS),
        created is None,
        created if created is not None else 0,
        str(row.get("name", model)),
        str(model),
    )


def rank(
    rows: Sequence[Mapping[str, Any]],
    weights: Mapping[str, float] | None = None,
    *,
    dataset_weights: Mapping[str, float] | None = None,
    offsets: Mapping[str, float] | None = None,
    per_example_performance: Mapping[Model, Sequence[float]] | None = None,
    is_tie: Callable[[Model, Model], bool | None] | None = None,
    replicate_values: Mapping[Model, Mapping[str, Any]] | None = None,
    comparable: Callable[[Model, Model], bool] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Rows in leaderboard order, each a copy of the input row plus:

    * ``rank``: 1, 2, 3, ... (position; every row has its own rank);
    * ``dynascore``;
    * ``tied_with_next``: ``True`` when the Dynascore difference with the next row
      is not significant (its per-replicate interval holds 0), ``False`` when it is
      (and on the last row), ``None`` when it cannot tell (no ``replicate_values``,
      or ``comparable`` says the two do not pair);
    * ``performance_tied_with_next``: the same for performance, from the paired
      bootstrap on ``per_example_performance`` or from ``is_tie``;
    * ``tie_test``: the :class:`ml.scoring.PairedResult` behind the performance mark, or ``None``;
    * ``dynascore_ci_low`` / ``dynascore_ci_high`` when ``replicate_values`` is given
      (see :func:`dynascore_replicates`).

    Input rows: ``{"model": key, "metrics": {metric: value or {dataset: value}}}`` and
    optionally ``"created"`` (any comparable value, e.g. a datetime) and ``"name"``.
    Model keys must be unique.  Order: see the module docstring.

    ``per_example_performance[model]``: the model's performance per example, in the
    same example order for every model (the mean of it should be its performance).
    For metrics that are not a mean (macro-F1), pass ``is_tie(model_a, model_b)``
    instead, e.g. built on ``ml.scoring.paired_bootstrap_metric``.
    """
    keys = [row["model"] for row in rows]
    if len(set(keys)) != len(keys):
        raise ValueError("model keys must be unique")
    result = compute(
        {row["model"]: row["metrics"] for row in rows},
        weights,
        dataset_weights=dataset_weights,
        offsets=offsets,
    )
    ordered = sorted(
        rows,
        key=lambda row: _sort_key(
            row, result.scores[row["model"]], result.averaged[row["model"]][PERFORMANCE]
        ),
    )
    per_replicate = (
        dynascore_replicates(
            replicate_values, result.weights, dataset_weights=dataset_weights, offsets=offsets
        )
        if replicate_values is not None
        else None
    )
    out: list[dict[str, Any]] = []
    for position, row in enumerate(ordered):
        model = row["model"]
        entry = {**row, "rank": position + 1, "dynascore": result.scores[model]}
        tied, test = _tie_with_next(
            ordered, position, per_example_performance, is_tie, n_resamples, confidence, seed
        )
        entry["performance_tied_with_next"] = tied
        entry["tie_test"] = test
        entry["tied_with_next"] = _dynascore_tie_with_next(ordered, position, per_replicate, comparable,
                                                           confidence)
        if per_replicate is not None:
            low, high = percentile_intervals(per_replicate[model][np.newaxis, :], confidence)[0]
            entry["dynascore_ci_low"], entry["dynascore_ci_high"] = low, high
        out.append(entry)
    return out


def _dynascore_tie_with_next(
    ordered: Sequence[Mapping[str, Any]],
    position: int,
    per_replicate: Mapping[Model, np.ndarray] | None,
    comparable: Callable[[Model, Model], bool] | None,
    confidence: float,
) -> bool | None:
    """Whether the row and the next one are not told apart by their Dynascores: the
    percentile interval of their per-replicate difference holds 0."""
    if position + 1 >= len(ordered):
        return False
    if per_replicate is None:
        return None
    a, b = ordered[position]["model"], ordered[position + 1]["model"]
    if comparable is not None and not comparable(a, b):
        return None
    difference = per_replicate[a] - per_replicate[b]
    if difference.size < 2:
        return None  # one replicate: no interval
    low, high = percentile_intervals(difference[np.newaxis, :], confidence)[0]
    return bool(low <= 0 <= high)


def _tie_with_next(
    ordered: Sequence[Mapping[str, Any]],
    position: int,
    per_example: Mapping[Model, Sequence[float]] | None,
    is_tie: Callable[[Model, Model], bool | None] | None,
    n_resamples: int,
    confidence: float,
    seed: int,
) -> tuple[bool | None, Any]:
    if position + 1 >= len(ordered):
        return False, None
    a, b = ordered[position]["model"], ordered[position + 1]["model"]
    if is_tie is not None:
        return is_tie(a, b), None
    if per_example is None or a not in per_example or b not in per_example:
        return None, None
    scores_a, scores_b = per_example[a], per_example[b]
    if len(scores_a) != len(scores_b) or len(scores_a) == 0:
        return None, None
    test = paired_bootstrap(
        scores_a, scores_b, n_resamples=n_resamples, confidence=confidence, seed=seed
    )
    return not test.significant, test
