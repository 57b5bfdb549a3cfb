"""Evaluation metrics: classification (accuracy, F1, confusion matrix), SQuAD-style
answer matching, and the "did the annotator fool the model" decision.

Pure Python, no torch.  All scores are fractions in [0, 1].
"""

from __future__ import annotations

import collections
import math
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any

# -- classification ------------------------------------------------------------------


def _check_lengths(gold: Sequence[Any], pred: Sequence[Any]) -> None:
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} items but pred has {len(pred)}")


def _label_order(gold: Sequence[Any], pred: Sequence[Any], labels: Sequence[Any] | None):
    if labels is not None:
        return list(labels)
    seen: dict[Any, None] = {}
    for x in list(gold) + list(pred):
        seen.setdefault(x, None)
    return list(seen)


def accuracy(gold: Sequence[Any], pred: Sequence[Any]) -> float:
    """Fraction of positions where ``pred`` equals ``gold`` (0.0 for no items)."""
    _check_lengths(gold, pred)
    if not gold:
        return 0.0
    return sum(g == p for g, p in zip(gold, pred, strict=True)) / len(gold)


def confusion_matrix(
    labels: Sequence[Any], gold: Sequence[Any], pred: Sequence[Any]
) -> list[list[int]]:
    """``matrix[i][j]`` = number of items with gold ``labels[i]`` predicted as ``labels[j]``.

    Items whose gold or predicted label is not in ``labels`` are not counted.
    """
    _check_lengths(gold, pred)
    index = {label: i for i, label in enumerate(labels)}
    matrix = [[0] * len(labels) for _ in labels]
    for g, p in zip(gold, pred, strict=True):
        if g in index and p in index:
            matrix[index[g]][index[p]] += 1
    return matrix


def per_class(
    gold: Sequence[Any], pred: Sequence[Any], labels: Sequence[Any] | None = None
) -> dict[Any, dict[str, float]]:
    """Precision, recall, F1 and support per label (0.0 where undefined)."""
    _check_lengths(gold, pred)
    out: dict[Any, dict[str, float]] = {}
    for label in _label_order(gold, pred, labels):
        tp = sum(g == label and p == label for g, p in zip(gold, pred, strict=True))
        predicted = sum(p == label for p in pred)
        support = sum(g == label for g in gold)
        precision = tp / predicted if predicted else 0.0
        recall = tp / support if support else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[label] = {"precision": precision, "recall": recall, "f1": f1, "support": support}
    return out


def macro_f1(
    gold: Sequence[Any], pred: Sequence[Any], labels: Sequence[Any] | None = None
) -> float:
    """Unweighted mean of per-label F1 over ``labels`` (default: every label seen)."""
    scores = per_class(gold, pred, labels)
    if not scores:
        return 0.0
    return sum(s["f1"] for s in scores.values()) / len(scores)


def classification_report(
    gold: Sequence[Any], pred: Sequence[Any], labels: Sequence[Any] | None = None
) -> dict[str, Any]:
    """Everything above in one JSON-serialisable dict."""
    order = _label_order(gold, pred, labels)
    return {
        "labels": list(order),
        "count": len(gold),
        "accuracy": accuracy(gold, pred),
        "macro_f1": macro_f1(gold, pred, order),
        "per_class": per_class(gold, pred, order),
        "confusion_matrix": confusion_matrix(order, gold, pred),
    }


# -- SQuAD answer matching --------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, drop punctuation, drop articles (a, an, the),
    collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _as_list(gold: str | Sequence[str]) -> list[str]:
    if isinstance(gold, str):
        return [gold]
    golds = list(gold)
    if not golds:
        raise ValueError("at least one gold answer is needed")
    return golds


def _exact_one(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def _f1_one(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        # Both empty counts as a match; one empty is a miss.
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str | Sequence[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0."""
    return max(_exact_one(prediction, g) for g in _as_list(gold))


def f1(prediction: str, gold: str | Sequence[str]) -> float:
    """SQuAD token-overlap F1, the maximum over the gold answers."""
    return max(_f1_one(prediction, g) for g in _as_list(gold))


def squad_scores(predictions: Sequence[str], golds: Sequence[str | Sequence[str]]) -> dict:
    """Mean exact match and F1 over a data set."""
    _check_lengths(golds, predictions)
    n = len(predictions)
    if n == 0:
        return {"exact_match": 0.0, "f1": 0.0, "count": 0}
    em = sum(exact_match(p, g) for p, g in zip(predictions, golds, strict=True)) / n
    f = sum(f1(p, g) for p, g in zip(predictions, golds, strict=True)) / n
    return {"exact_match": em, "f1": f, "count": n}


# -- model fooled -------------------------------------------------------------------------

FOOLED_METRICS = ("exact_match", "string_f1")


def _unwrap(value: Any, kind: str | None) -> tuple[Any, str | None]:
    """Accept a predict() result dict or a bare value; infer the task kind from dicts."""
    if isinstance(value, Mapping):
        if "label" in value:
            return value["label"], kind or "classification"
        if "answer" in value:
            return value["answer"], kind or "extractive_qa"
        if "text" in value:
            return value["text"], kind or "extractive_qa"
        raise ValueError("a prediction dict needs a 'label' or an 'answer'")
    return value, kind


def model_fooled(
    metric: str,
    prediction: Any,
    target: Any,
    threshold: float = 0.4,
    *,
    kind: str | None = None,
) -> bool:
    """Did the model get the annotator's example wrong?

    ``metric``:
      * ``"exact_match"``: classification -> the predicted label differs from the
        target label (plain equality, labels are identifiers); extractive QA -> the
        prediction is not a SQuAD exact match of the target answer(s).
      * ``"string_f1"``: fooled when the SQuAD token F1 between prediction and
        target answer(s) is below ``threshold``.

    ``prediction`` may be a predict() result (``{"label": ...}`` or
    ``{"answer": ...}``, which also tells the task kind) or a bare string; for a bare
    string with ``"exact_match"`` pass ``kind="extractive_qa"`` to get answer
    normalisation, otherwise labels are compared exactly.  ``target`` is a label, an
    answer, a list of acceptable answers, or a dict like ``prediction``.
    """
    if metric not in FOOLED_METRICS:
        raise ValueError(f"unknown metric {metric!r}; expected one of {FOOLED_METRICS}")
    pred_value, kind = _unwrap(prediction, kind)
    target_value, kind = _unwrap(target, kind)
    if metric == "string_f1":
        return f1(str(pred_value), target_value) < threshold
    if kind == "extractive_qa":
        return exact_match(str(pred_value), target_value) < 1.0
    return pred_value != target_value


# -- proportions -----------------------------------------------------------------------

WILSON_Z = 1.959963984540054  # the normal quantile of a two-sided 95% interval


def wilson_interval(successes: int, total: int) -> tuple[float | None, float | None]:
    """The 95% Wilson score interval of a proportion ``successes / total`` (a model error
    rate: fooled / collected); ``(None, None)`` for no trials. Unlike the normal
    approximation it stays within [0, 1] and is not zero-width at 0 or 1."""
    if not total:
        return None, None
    if not 0 <= successes <= total:
        raise ValueError(f"successes must be between 0 and total ({total}); got {successes}")
    z = WILSON_Z
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    # At p = 0 or 1 the bound is exactly 0 or 1; the formula lands a rounding error short.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == total else min(1.0, centre + half)
    return low, high
