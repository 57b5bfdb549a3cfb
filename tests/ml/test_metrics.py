"""Metric functions against hand-computed values."""

from __future__ import annotations

import pytest

from ml import metrics as M

GOLD = ["cat", "cat", "cat", "dog", "dog", "bird"]
PRED = ["cat", "cat", "dog", "dog", "cat", "cat"]
LABELS = ["cat", "dog", "bird"]


def test_accuracy():
    assert M.accuracy(GOLD, PRED) == pytest.approx(3 / 6)
    assert M.accuracy([], []) == 0.0
    with pytest.raises(ValueError):
        M.accuracy(["a"], [])


def test_confusion_matrix_rows_are_gold_columns_are_predictions():
    assert M.confusion_matrix(LABELS, GOLD, PRED) == [
        [2, 1, 0],  # gold cat: 2 -> cat, 1 -> dog
        [1, 1, 0],  # gold dog: 1 -> cat, 1 -> dog
        [1, 0, 0],  # gold bird: 1 -> cat
    ]


def test_per_class_and_macro_f1():
    scores = M.per_class(GOLD, PRED, LABELS)
    # cat: tp 2, predicted 4, support 3 -> p 1/2, r 2/3, f1 4/7
    assert scores["cat"]["precision"] == pytest.approx(0.5)
    assert scores["cat"]["recall"] == pytest.approx(2 / 3)
    assert scores["cat"]["f1"] == pytest.approx(4 / 7)
    assert scores["cat"]["support"] == 3
    # dog: tp 1, predicted 2, support 2 -> p 1/2, r 1/2, f1 1/2
    assert scores["dog"]["f1"] == pytest.approx(0.5)
    # bird: never predicted -> all 0, no division error
    assert scores["bird"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert M.macro_f1(GOLD, PRED, LABELS) == pytest.approx((4 / 7 + 0.5 + 0.0) / 3)


def test_macro_f1_defaults_to_labels_seen():
    assert M.macro_f1(["a", "b"], ["a", "a"]) == pytest.approx((2 / 3 + 0.0) / 2)


def test_classification_report_collects_everything():
    report = M.classification_report(GOLD, PRED, LABELS)
    assert report["labels"] == LABELS
    assert report["count"] == 6
    assert report["accuracy"] == pytest.approx(0.5)
    assert report["macro_f1"] == pytest.approx(M.macro_f1(GOLD, PRED, LABELS))
    assert report["confusion_matrix"][0] == [2, 1, 0]
    assert set(report["per_class"]) == set(LABELS)


@pytest.mark.parametrize(
    "raw, normalised",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   apple, a pear  ", "apple pear"),
        ("Theory of the Atom", "theory of atom"),  # "the" inside words stays
        ("U.S.A.", "usa"),
    ],
)
def test_normalize_answer(raw, normalised):
    assert M.normalize_answer(raw) == normalised


def test_exact_match_and_f1():
    assert M.exact_match("the Eiffel tower", "Eiffel Tower.") == 1.0
    assert M.exact_match("Eiffel", "Eiffel Tower") == 0.0
    # pred "eiffel", gold "eiffel tower": p 1, r 1/2 -> 2/3
    assert M.f1("Eiffel", "Eiffel Tower") == pytest.approx(2 / 3)
    # pred "in paris france", gold "paris": p 1/3, r 1 -> 1/2
    assert M.f1("in Paris, France", "Paris") == pytest.approx(0.5)
    assert M.f1("London", "Paris") == 0.0
    # the best gold answer counts
    assert M.exact_match("1889", ["in 1889", "1889"]) == 1.0
    assert M.f1("in 1889", ["1889", "the year 1889"]) == pytest.approx(2 / 3)
    # an answer that normalises to nothing matches only an empty gold
    assert M.f1("the", "a") == 1.0
    assert M.f1("the", "Paris") == 0.0


def test_squad_scores_averages():
    scores = M.squad_scores(["1889", "Eiffel"], ["1889", "Eiffel Tower"])
    assert scores == {"exact_match": 0.5, "f1": pytest.approx((1 + 2 / 3) / 2), "count": 2}


def test_model_fooled_classification_compares_labels_exactly():
    assert M.model_fooled("exact_match", {"label": "neutral"}, "entailment") is True
    assert M.model_fooled("exact_match", {"label": "entailment"}, "entailment") is False
    # bare strings are labels unless told otherwise: no answer normalisation
    assert M.model_fooled("exact_match", "not-hate", "nothate") is True


def test_model_fooled_qa():
    assert M.model_fooled("exact_match", {"answer": "the Himalayas"}, "Himalayas") is False
    assert M.model_fooled("exact_match", "Nepal", "Himalayas", kind="extractive_qa") is True
    # string_f1: fooled when F1 < threshold (0.4 by default)
    assert M.model_fooled("string_f1", {"answer": "in the Himalayas"}, "Himalayas") is False
    # "the mountains of nepal" vs "nepal": p 1/3, r 1 -> F1 0.5
    assert M.model_fooled("string_f1", {"answer": "the mountains of Nepal"}, "Nepal") is False
    assert M.model_fooled("string_f1", {"answer": "the mountains of Nepal"}, "Nepal", 0.6)
    assert M.model_fooled("string_f1", {"answer": "Paris"}, ["London", "UK"]) is True


def test_model_fooled_rejects_unknown_metric():
    with pytest.raises(ValueError):
        M.model_fooled("bleu", "a", "b")


def test_wilson_interval_of_a_proportion():
    from ml.metrics import wilson_interval

    low, high = wilson_interval(50, 100)
    assert (round(low, 4), round(high, 4)) == (0.4038, 0.5962)
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson_interval(10, 10) == (pytest.approx(0.7225, abs=1e-4), 1.0)
    assert wilson_interval(0, 0) == (None, None)
    with pytest.raises(ValueError, match="between 0 and total"):
        wilson_interval(11, 10)
