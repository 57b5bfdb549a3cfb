"""ml.scoring: bootstrap intervals, paired comparisons, ECE, perturbations, consistency."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from ml import metrics, scoring

# -- bootstrap -----------------------------------------------------------------------------


def test_bootstrap_ci_is_seeded_and_deterministic():
    scores = [1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0]
    first = scoring.bootstrap_ci(scores, seed=3)
    assert scoring.bootstrap_ci(scores, seed=3) == first
    assert scoring.bootstrap_ci(scores, seed=4) != first
    value, low, high = first
    assert value == pytest.approx(np.mean(scores))
    assert 0.0 <= low <= value <= high <= 1.0


def test_bootstrap_interval_covers_the_true_mean_about_95_percent_of_the_time():
    """Bernoulli p=0.7, n=200, 200 simulated data sets: the 95% interval covers p
    in roughly 90-99% of them."""
    p, n, simulations = 0.7, 200, 200
    covered = 0
    for sim in range(simulations):
        data = np.random.default_rng(10_000 + sim).random(n) < p
        _, low, high = scoring.bootstrap_ci(data, seed=sim)
        covered += low <= p <= high
    assert 0.90 <= covered / simulations <= 0.99


def test_bootstrap_with_a_statistic_that_is_not_the_mean():
    scores = np.arange(50, dtype=float)
    value, low, high = scoring.bootstrap_ci(scores, statistic=np.median, seed=1)
    assert value == 24.5
    assert low < value < high


def test_same_seed_and_size_give_the_same_resamples():
    a = list(scoring.resample_indices(30, n_resamples=5, seed=9))
    b = list(scoring.resample_indices(30, n_resamples=5, seed=9))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert sum(len(block) for block in a) == 5 and a[0].shape[1] == 30


def test_index_blocks_add_up_when_the_draws_are_split(monkeypatch):
    monkeypatch.setattr(scoring, "_BLOCK_CELLS", 64)
    blocks = list(scoring.resample_indices(20, n_resamples=7, seed=0))
    assert [len(b) for b in blocks] == [3, 3, 1]
    reps = scoring.bootstrap_replicates(np.ones(20), n_resamples=7)
    assert reps.shape == (7,) and np.all(reps == 1.0)


def test_bootstrap_input_errors():
    with pytest.raises(ValueError, match="at least one example"):
        scoring.bootstrap_ci([])
    with pytest.raises(ValueError, match="confidence"):
        scoring.bootstrap_ci([1, 0], confidence=1.0)
    with pytest.raises(ValueError, match="n_resamples"):
        scoring.bootstrap_ci([1, 0], n_resamples=0)
    with pytest.raises(ValueError, match="flat"):
        scoring.bootstrap_ci([[1, 0], [0, 1]])


def _labels(seed: int, n: int, accuracy: float, labels=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    gold = [labels[i] for i in rng.integers(0, len(labels), n)]
    pred = [
        g if rng.random() < accuracy else labels[int(rng.integers(0, len(labels)))] for g in gold
    ]
    return gold, pred


@pytest.mark.parametrize("metric_fn", [metrics.accuracy, metrics.macro_f1])
def test_fast_metric_paths_match_the_generic_loop(metric_fn):
    gold, pred = _labels(0, 60, 0.6, labels=("a", "b", "c", "rare"))
    fast = scoring.metric_replicates(gold, pred, metric_fn, n_resamples=200, seed=5)
    slow = scoring.metric_replicates(
        gold, pred, lambda g, p: metric_fn(g, p), n_resamples=200, seed=5
    )
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12)


def test_bootstrap_metric_macro_f1():
    gold, pred = _labels(1, 150, 0.7)
    value, low, high = scoring.bootstrap_metric(gold, pred, metrics.macro_f1, seed=2)
    assert value == pytest.approx(metrics.macro_f1(gold, pred))
    assert low < value < high
    with pytest.raises(ValueError, match="gold has"):
        scoring.bootstrap_metric(gold, pred[:-1], metrics.macro_f1)


# -- paired bootstrap ------------------------------------------------------------------------


def test_paired_bootstrap_identical_quality_is_not_significant():
    """B has the same accuracy as A but disagrees with it on 40 of 300 examples."""
    a = (np.random.default_rng(7).random(300) < 0.7).astype(float)
    b = a.copy()
    right, wrong = np.flatnonzero(a == 1)[:20], np.flatnonzero(a == 0)[:20]
    b[right], b[wrong] = 0.0, 1.0
    assert a.mean() == b.mean()
    result = scoring.paired_bootstrap(a, b, seed=0)
    assert result.difference == 0.0
    assert result.low < 0 < result.high
    assert not result.significant and result.p_value > 0.5


def test_paired_bootstrap_clearly_better_model_is_significant():
    rng = np.random.default_rng(8)
    a = (rng.random(300) < 0.9).astype(float)
    b = (rng.random(300) < 0.6).astype(float)
    result = scoring.paired_bootstrap(a, b, seed=0)
    assert result.significant and result.low > 0 and result.p_value < 0.01
    assert result.difference == pytest.approx(a.mean() - b.mean())
    flipped = scoring.paired_bootstrap(b, a, seed=0)
    assert flipped.significant and flipped.high < 0


def test_paired_bootstrap_resamples_both_models_with_the_same_indices():
    a = np.random.default_rng(2).random(40)
    same = scoring.paired_bootstrap(a, a.copy())
    assert (same.difference, same.low, same.high) == (0.0, 0.0, 0.0)
    assert same.p_value == 1.0 and not same.significant
    with pytest.raises(ValueError, match="scored on"):
        scoring.paired_bootstrap(a, a[:-1])


def test_paired_bootstrap_metric_with_macro_f1():
    gold, good = _labels(3, 300, 0.95)
    _, poor = _labels(3, 300, 0.5)
    result = scoring.paired_bootstrap_metric(gold, good, poor, metrics.macro_f1, seed=1)
    assert result.significant and result.difference > 0
    same = scoring.paired_bootstrap_metric(gold, good, list(good), metrics.macro_f1)
    assert not same.significant and same.difference == 0.0


# -- calibration -------------------------------------------------------------------------


def test_ece_equal_width_hand_case():
    # bins (0.9,1]: 0.95 vs 1; (0.8,0.9]: 0.85 vs 0; (0.6,0.7]: 0.65 vs 1; (0.5,0.6]: 0.55 vs 0
    ece = scoring.expected_calibration_error(
        [0.95, 0.85, 0.65, 0.55], [1, 0, 1, 0], binning="equal_width"
    )
    assert ece == pytest.approx((0.05 + 0.85 + 0.35 + 0.55) / 4)
    # (0.8,0.9]: conf 0.9, accuracy 1/2 -> 0.4 * 2/5; (0.5,0.6]: 0.6 vs 2/3 -> 1/15 * 3/5
    ece = scoring.expected_calibration_error(
        [0.9, 0.9, 0.6, 0.6, 0.6], [True, False, True, True, False], binning="equal_width"
    )
    assert ece == pytest.approx(0.4 * 2 / 5 + (2 / 3 - 0.6) * 3 / 5)


def test_equal_width_bins_are_right_closed():
    bins = scoring.calibration_bins([0.0, 0.1, 0.3, 0.35, 0.7, 1.0], 10, "equal_width")
    assert bins.tolist() == [0, 0, 2, 3, 6, 9]


@pytest.mark.parametrize(
    ("confidences", "correct", "n_bins", "expected"),
    [
        # sorted 0.1 0.5 | 0.7 0.9 (cut at 0.6): |0.3 - 0| / 2 + |0.8 - 1| / 2
        ([0.1, 0.7, 0.5, 0.9], [0, 1, 0, 1], 2, 0.25),
        # 0.6 0.7 | 0.8 0.9: |0.65 - 0| / 2 + |0.85 - 1| / 2
        ([0.6, 0.7, 0.8, 0.9], [0, 0, 1, 1], 2, 0.4),
        # one example per bin: (0.1 + 0.5 + 0.3 + 0.1) / 4
        ([0.1, 0.7, 0.5, 0.9], [0, 1, 1, 1], 4, 0.25),
        # more bins than examples: one bin per example
        ([0.1, 0.7, 0.5, 0.9], [0, 1, 1, 1], 10, 0.25),
    ],
)
def test_ece_equal_mass_hand_cases(confidences, correct, n_bins, expected):
    assert scoring.expected_calibration_error(confidences, correct, n_bins) == pytest.approx(
        expected
    )


def test_ece_one_bin_and_perfect_calibration():
    conf, correct = [0.9, 0.8, 0.7, 0.2], [1, 1, 0, 0]
    one_bin = abs(np.mean(conf) - np.mean(correct))
    for binning in scoring.BINNINGS:
        assert scoring.expected_calibration_error(
            conf, correct, 1, binning=binning
        ) == pytest.approx(one_bin)
    assert scoring.expected_calibration_error([1.0, 1.0, 0.5, 0.5], [1, 1, 1, 0]) == 0.0
    assert scoring.expected_calibration_error([], []) == 0.0


def test_ece_errors():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        scoring.expected_calibration_error([1.2], [1])
    with pytest.raises(ValueError, match="correctness"):
        scoring.expected_calibration_error([0.5, 0.5], [1])
    with pytest.raises(ValueError, match="binning"):
        scoring.expected_calibration_error([0.5], [1], binning="quantile")


def test_ece_bootstrap_and_top_label_helper():
    predictions = [
        {"label": "pos", "probabilities": {"pos": 0.9, "neg": 0.1}},
        {"label": "neg", "probabilities": {"pos": 0.3, "neg": 0.7}},
        {"label": "pos", "probabilities": {"pos": 0.6, "neg": 0.4}},
    ]
    conf, correct = scoring.top_label_calibration(predictions, ["pos", "pos", "pos"])
    assert conf == [0.9, 0.7, 0.6] and correct == [True, False, True]
    rng = np.random.default_rng(0)
    conf = rng.uniform(0.5, 1.0, 400)
    correct = rng.random(400) < conf  # calibrated by construction
    value, low, high = scoring.bootstrap_metric(
        conf, correct, scoring.expected_calibration_error, n_resamples=200
    )
    assert value < 0.1 and low < high
    # The plug-in ECE is biased upwards, more so on resamples (duplicates): near 0 the
    # percentile interval can lie entirely above the point value.  Documented.
    assert value < low


# -- consistency ---------------------------------------------------------------------------


def test_consistency():
    assert scoring.consistency(["a", "b", "c", "d"], ["a", "x", "c", "d"]) == 0.75
    assert scoring.agreement([1, 2], [1, 3]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="undefined"):
        scoring.consistency([], [])
    with pytest.raises(ValueError, match="perturbed"):
        scoring.consistency(["a"], ["a", "b"])


# -- perturbations ---------------------------------------------------------------------------

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage, and the crowd loves it!",
    "I really enjoyed this wonderful, moving film.",
    "Two dogs run through a field in the afternoon sun.",
]


def test_typos_are_deterministic_with_a_seed_and_change_the_text():
    for text in TEXTS:
        first = scoring.perturb_typos(text, random.Random(42))
        assert scoring.perturb_typos(text, 42) == first
        assert first.changed and first.text != text
    outcomes = {scoring.perturb_typos(TEXTS[0], seed).text for seed in range(20)}
    assert len(outcomes) > 10


def test_typos_never_touch_short_words_or_punctuation():
    for seed in range(30):
        for text in TEXTS:
            new = scoring.perturb_typos(text, seed).text
            old_tokens, new_tokens = text.split(" "), new.split(" ")
            assert len(old_tokens) == len(new_tokens)
            for old, fresh in zip(old_tokens, new_tokens, strict=True):
                letters = re.sub(r"[^A-Za-z]", "", old)
                if len(letters) < scoring.TYPO_MIN_WORD_LENGTH:
                    assert fresh == old
                assert re.sub(r"[A-Za-z]", "", fresh) == re.sub(r"[A-Za-z]", "", old)
    assert scoring.perturb_typos("a cat is on the mat", 0) == ("a cat is on the mat", False)


def test_typo_edits_are_small():
    def distance(a: str, b: str) -> int:
        row = list(range(len(b) + 1))
        for i, ca in enumerate(a, 1):
            prev, row[0] = row[0], i
            for j, cb in enumerate(b, 1):
                prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
        return row[-1]

    for seed in range(50):
        new = scoring.perturb_typos("wonderful", seed).text
        assert 1 <= distance("wonderful", new) <= 2  # a swap is two substitutions


def test_example_rng_is_stable_and_keyed():
    a = scoring.example_rng(0, "ex-1").random()
    assert scoring.example_rng(0, "ex-1").random() == a
    assert scoring.example_rng(0, "ex-2").random() != a
    assert scoring.example_rng(1, "ex-1").random() != a


@pytest.mark.parametrize(
    ("male", "female"),
    [
        ("he", "she"),
        ("him", "her"),
        ("himself", "herself"),
        ("man", "woman"),
        ("men", "women"),
        ("boy", "girl"),
        ("father", "mother"),
        ("son", "daughter"),
        ("brother", "sister"),
        ("husband", "wife"),
        ("king", "queen"),
        ("Mr", "Ms"),
    ],
)
def test_fairness_swaps_both_ways_keeping_case(male, female):
    def swap(text):
        return scoring.perturb_fairness(text, 0).text

    for a, b in ((male, female), (female, male)):
        a, b = a.lower(), b.lower()
        if a == "her":
            continue  # "her" is ambiguous, tested below
        assert swap(f"x {a} y.") == f"x {b} y."
        assert swap(f"{a.capitalize()} y.") == f"{b.capitalize()} y."
        assert swap(f"X {a.upper()} Y.") == f"X {b.upper()} Y."


def test_fairness_her_and_his():
    def swap(text):
        return scoring.perturb_fairness(text, 0).text

    assert swap("He gave her his book; she thanked him.") == (
        "She gave him her book; he thanked her."
    )
    assert swap("I saw her.") == "I saw him."
    assert swap("Her dog barks.") == "His dog barks."
    assert swap("The book is his.") == "The book is hers."
    assert swap("Hers is bigger than his.") == "His is bigger than hers."
    assert swap("Mr. Smith and Mrs. Jones") == "Ms. Smith and Mr. Jones"


def test_fairness_swaps_names_consistently_and_deterministically():
    text = "John met Mary. Later John called Mary and James."
    first = scoring.perturb_fairness(text, random.Random(5))
    assert scoring.perturb_fairness(text, 5) == first and first.changed
    words = first.text.replace(".", "").split()
    john, mary, james = words[0], words[2], words[-1]
    assert john in scoring.FEMALE_NAMES and james in scoring.FEMALE_NAMES
    assert mary in scoring.MALE_NAMES
    assert words[4] == john and words[6] == mary  # the same name, the same swap


def test_fairness_leaves_neutral_text_alone():
    text = "The committee approved the budget on Tuesday."
    assert scoring.perturb_fairness(text, 0) == (text, False)
    assert scoring.perturb_fairness("", 0) == ("", False)
    # "female" is a word of its own, not "fe" + "male"; "herald" is not "her"
    assert scoring.perturb_fairness("a female herald", 0).text == "a male herald"


def test_rng_must_be_a_random_or_a_seed():
    with pytest.raises(TypeError):
        scoring.perturb_typos("something", "seed")


@pytest.mark.parametrize("n", [1, 2, 3, 40, 999, 1000])
def test_percentile_intervals_match_numpy_quantiles_row_by_row(n):
    rows = np.random.default_rng(n).normal(size=(4, n))
    found = scoring.percentile_intervals(rows, 0.9)
    assert np.allclose(found, [np.quantile(row, [0.05, 0.95]) for row in rows], rtol=0, atol=1e-12)
    assert scoring.percentile_interval(rows[0], 0.9) == pytest.approx(found[0])
    with pytest.raises(ValueError, match="no replicates"):
        scoring.percentile_intervals(np.empty((2, 0)))
