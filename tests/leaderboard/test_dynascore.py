"""The Dynascore: the hand-computed example, weights, ranking and ties, intervals.

Against Dynaboard's published NLI board: test_dynascore_dynaboard.py."""

from __future__ import annotations

import itertools
from datetime import datetime

import numpy as np
import pytest

from leaderboard import dynascore as ds
from ml import scoring

# The worked example in leaderboard/dynascore.py's docstring.
EXAMPLE = {
    "A": {
        "performance": 0.60,
        "throughput": 100.0,
        "memory": 2.0,
        "robustness": 0.70,
        "fairness": 0.80,
        "calibration": 0.10,
    },
    "B": {
        "performance": 0.70,
        "throughput": 60.0,
        "memory": 3.0,
        "robustness": 0.75,
        "fairness": 0.85,
        "calibration": 0.08,
    },
    "C": {
        "performance": 0.80,
        "throughput": 40.0,
        "memory": 5.0,
        "robustness": 0.85,
        "fairness": 0.80,
        "calibration": 0.05,
    },
}


def rows(models, **extra):
    return [
        {"model": key, "metrics": metrics, **extra.get(key, {})} for key, metrics in models.items()
    ]


# -- the hand-computed example ------------------------------------------------------------


def test_hand_computed_three_model_example():
    result = ds.compute(EXAMPLE)
    assert result.amrs == pytest.approx(
        {
            "performance": 1.0,
            "throughput": 300.0,
            "memory": 15.0,
            "robustness": 0.75,
            "fairness": 0.5,
            "calibration": 0.25,
        }
    )
    assert result.converted["A"] == pytest.approx(
        {
            "performance": 0.6,
            "throughput": 1 / 3,
            "memory": -2 / 15,
            "robustness": 14 / 15,
            "fairness": 1.6,
            "calibration": -0.4,
        }
    )
    assert result.scores["A"] == pytest.approx(77 / 120, abs=1e-12)
    assert result.scores["B"] == pytest.approx(11 / 16, abs=1e-12)
    assert result.scores["C"] == pytest.approx(43 / 60, abs=1e-12)
    assert [r["model"] for r in ds.rank(rows(EXAMPLE))] == ["C", "B", "A"]


def test_the_example_by_the_formula_written_out():
    """D_i = sum_m w_m * y_im / AMRS_m / sum_m w_m, with y = -x for memory and ECE."""
    weights = ds.DEFAULT_WEIGHTS
    amrs = ds.compute(EXAMPLE).amrs
    for model, metrics in EXAMPLE.items():
        total = sum(
            weights[m] * (x if ds.HIGHER_IS_BETTER[m] else -x) / amrs[m] for m, x in metrics.items()
        )
        assert ds.dynascores(EXAMPLE)[model] == pytest.approx(total / sum(weights.values()))


def test_calibration_counts_once_a_user_weights_it():
    plain = ds.dynascores(EXAMPLE)
    weighted = ds.dynascores(EXAMPLE, {"calibration": 2})
    # Sum of weights 10; calibration in performance units: -0.40, -0.32, -0.20.
    assert weighted["A"] == pytest.approx((plain["A"] * 8 + 2 * -0.40) / 10)
    assert weighted["C"] == pytest.approx((plain["C"] * 8 + 2 * -0.20) / 10)


def test_averaging_over_datasets_with_weights():
    per_dataset = {
        model: {
            name: {
                "r1": value - 0.1 * (name == "performance"),
                "r2": value + 0.1 * (name == "performance"),
            }
            for name, value in metrics.items()
        }
        for model, metrics in EXAMPLE.items()
    }
    assert ds.dynascores(per_dataset) == pytest.approx(ds.dynascores(EXAMPLE))
    # Weighting r2 three times as much lifts every performance by 0.05.
    weighted = ds.compute(per_dataset, dataset_weights={"r1": 1, "r2": 3})
    assert weighted.averaged["A"]["performance"] == pytest.approx(0.65)
    assert ds.average_over_datasets({"x": 1.0, "y": 4.0}, {"y": 2}) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="negative"):
        ds.average_over_datasets({"x": 1.0}, {"x": -1})
    with pytest.raises(ValueError, match="add up to 0"):
        ds.average_over_datasets({"x": 1.0}, {"x": 0})


def test_lower_is_better_metrics_are_turned_around():
    better = {k: dict(v) for k, v in EXAMPLE.items()}
    better["B"]["memory"] = 2.5  # less memory, nothing else changes
    assert ds.dynascores(better)["B"] > ds.dynascores(EXAMPLE)["B"]
    worse = {k: dict(v) for k, v in EXAMPLE.items()}
    worse["B"]["calibration"] = 0.09
    assert (
        ds.dynascores(worse, {"calibration": 1})["B"]
        < ds.dynascores(EXAMPLE, {"calibration": 1})["B"]
    )


def test_an_offset_moves_every_score_by_the_same_amount():
    plain = ds.dynascores(EXAMPLE)
    shifted = ds.dynascores(EXAMPLE, offsets={"memory": 16.0})
    shift = {k: shifted[k] - plain[k] for k in plain}
    assert shift["A"] == pytest.approx(16.0 / 15 / 8)
    assert shift["A"] == pytest.approx(shift["B"]) == pytest.approx(shift["C"])


def test_the_result_does_not_depend_on_input_order():
    reference = ds.dynascores(EXAMPLE)
    for order in itertools.permutations(EXAMPLE):
        assert ds.dynascores({k: EXAMPLE[k] for k in order}) == reference


# -- degenerate cases ---------------------------------------------------------------------


def test_one_model_scores_its_performance():
    result = ds.compute({"only": EXAMPLE["A"]})
    assert result.scores == {"only": pytest.approx(0.6)}
    assert result.amrs["throughput"] is None and result.converted["only"]["throughput"] is None


def test_equal_performance_leaves_only_performance():
    same = {k: {**v, "performance": 0.7} for k, v in EXAMPLE.items()}
    assert ds.dynascores(same) == {k: pytest.approx(0.7) for k in same}
    order = [r["model"] for r in ds.rank(rows(same))]
    assert order == ["A", "B", "C"]  # all equal: by name


def test_a_constant_metric_is_left_out():
    constant = {k: {**v, "fairness": 0.9} for k, v in EXAMPLE.items()}
    result = ds.compute(constant)
    assert result.amrs["fairness"] is None
    # Sum of weights 7 without fairness.
    assert result.scores["B"] == pytest.approx((2.8 + 0.2 - 0.2 + 1.0) / 7)


def test_a_metric_nobody_has_is_left_out_one_some_lack_is_an_error():
    no_fairness = {k: {m: x for m, x in v.items() if m != "fairness"} for k, v in EXAMPLE.items()}
    assert ds.dynascores(no_fairness)["B"] == pytest.approx((2.8 + 0.2 - 0.2 + 1.0) / 7)
    partial = {k: dict(v) for k, v in EXAMPLE.items()}
    del partial["B"]["fairness"]
    with pytest.raises(ValueError, match="same metrics"):
        ds.dynascores(partial)
    with pytest.raises(ValueError, match="unknown metric"):
        ds.dynascores({"A": {"performance": 0.5, "latency": 3.0}})
    with pytest.raises(ValueError, match="no performance"):
        ds.dynascores({"A": {"throughput": 3.0}})
    with pytest.raises(ValueError, match="different datasets"):
        ds.dynascores(
            {"A": {"performance": {"r1": 0.5}}, "B": {"performance": {"r1": 0.5, "r2": 0.6}}}
        )
    with pytest.raises(ValueError, match="finite"):
        ds.dynascores({"A": {"performance": float("nan")}})
    assert ds.dynascores({}) == {}


def test_nearly_equal_performance_pairs_are_skipped():
    models = {
        "A": {"performance": 0.5, "throughput": 10.0},
        "B": {"performance": 0.5 + 1e-9, "throughput": 90.0},  # noise-level gap: skipped
        "C": {"performance": 0.6, "throughput": 80.0},
    }
    assert ds.compute(models).amrs["throughput"] == pytest.approx(10.0 / (0.1 - 1e-9))


# -- weights ------------------------------------------------------------------------------


def test_parse_weights_good():
    assert ds.parse_weights(None) == ds.DEFAULT_WEIGHTS
    assert ds.parse_weights("") == ds.DEFAULT_WEIGHTS
    assert (
        ds.parse_weights(
            "performance:4,throughput:1,memory:1,robustness:1,fairness:1,calibration:0"
        )
        == ds.DEFAULT_WEIGHTS
    )
    assert ds.parse_weights(" performance : 2.5 , calibration:5") == {
        **ds.DEFAULT_WEIGHTS,
        "performance": 2.5,
        "calibration": 5.0,
    }
    assert ds.parse_weights("memory:0,throughput:.5")["throughput"] == 0.5
    text = "performance:3,throughput:0.5,memory:0,robustness:2,fairness:1,calibration:1"
    assert ds.parse_weights(ds.format_weights(ds.parse_weights(text))) == ds.parse_weights(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("speed:1", "unknown metric 'speed'"),
        ("performance:abc", "must be a number"),
        ("performance:nan", "must be a number"),
        ("performance:inf", "must be a number"),
        ("performance:1e0", "must be a number"),
        ("performance:", "must be a number"),
        ("performance:-1", "between 0 and 5"),
        ("performance:5.5", "between 0 and 5"),
        ("performance:1,performance:2", "more than once"),
        ("performance:1,,memory:2", "part 2 is empty"),
        ("performance:1,", "part 2 is empty"),
        (",performance:1", "part 1 is empty"),
        ("performance", "name:value"),
        (":3", "name:value"),
        ("performance:0,throughput:0,memory:0,robustness:0,fairness:0", "above 0"),
    ],
)
def test_parse_weights_bad(text, message):
    with pytest.raises(ValueError, match=message):
        ds.parse_weights(text)


def test_weight_dicts_are_checked_too():
    with pytest.raises(ValueError, match="between 0 and 5"):
        ds.dynascores(EXAMPLE, {"performance": 6})
    with pytest.raises(ValueError, match="unknown metric"):
        ds.dynascores(EXAMPLE, {"speed": 1})
    with pytest.raises(ValueError, match="must be a number"):
        ds.dynascores(EXAMPLE, {"performance": "4"})


def test_reweighting_changes_the_order():
    assert [r["model"] for r in ds.rank(rows(EXAMPLE), {"performance": 0})][0] == "A"
    assert [r["model"] for r in ds.rank(rows(EXAMPLE), ds.parse_weights("robustness:5"))][0] == "C"


# -- ranking and ties ---------------------------------------------------------------------


def test_equal_scores_break_ties_deterministically():
    metrics = EXAMPLE["B"]
    models = {name: dict(metrics) for name in ("zeta", "alpha", "mid", "late", "early")}
    extra = {
        "late": {"created": datetime(2024, 5, 1)},
        "early": {"created": datetime(2023, 1, 1)},
    }
    expected = ["early", "late", "alpha", "mid", "zeta"]  # older first, then by name
    for order in itertools.permutations(models):
        ranked = ds.rank([{"model": k, "metrics": models[k], **extra.get(k, {})} for k in order])
        assert [r["model"] for r in ranked] == expected
        assert [r["rank"] for r in ranked] == [1, 2, 3, 4, 5]


def test_equal_dynascores_then_higher_performance_wins():
    models = {
        "A": {"performance": 0.5, "throughput": 20.0},
        "B": {"performance": 0.7, "throughput": 20.0},
        "C": {"performance": 0.9, "throughput": 40.0},
    }
    only_throughput = {
        "performance": 0,
        "throughput": 1,
        "memory": 0,
        "robustness": 0,
        "fairness": 0,
    }
    ranked = ds.rank(rows(models), only_throughput)
    assert ranked[1]["dynascore"] == ranked[2]["dynascore"]
    assert [r["model"] for r in ranked] == ["C", "B", "A"]


def test_rank_keeps_the_row_and_adds_fields():
    ranked = ds.rank(rows(EXAMPLE, C={"name": "Model C", "owner": "ana"}))
    top = ranked[0]
    assert top["model"] == "C" and top["owner"] == "ana" and top["rank"] == 1
    assert top["dynascore"] == pytest.approx(43 / 60)
    assert [r["tied_with_next"] for r in ranked] == [None, None, False]
    assert [r["performance_tied_with_next"] for r in ranked] == [None, None, False]
    with pytest.raises(ValueError, match="unique"):
        ds.rank(rows(EXAMPLE) + rows({"A": EXAMPLE["A"]}))
    assert ds.rank([]) == []


def test_performance_tied_with_next_comes_from_a_paired_bootstrap():
    rng = np.random.default_rng(11)
    strong = (rng.random(400) < 0.9).astype(float)
    twin = strong.copy()  # the same accuracy, different mistakes
    right, wrong = np.flatnonzero(strong == 1)[:15], np.flatnonzero(strong == 0)[:15]
    twin[right], twin[wrong] = 0.0, 1.0
    weak = (rng.random(400) < 0.6).astype(float)
    per_example = {"strong": strong, "twin": twin, "weak": weak}
    models = {
        key: {"performance": float(v.mean()), "throughput": 10.0 + i}
        for i, (key, v) in enumerate(per_example.items())
    }
    ranked = ds.rank(
        rows(models, twin={"created": datetime(2020, 1, 1)}),
        {"throughput": 0},
        per_example_performance=per_example,
    )
    assert [r["model"] for r in ranked] == ["twin", "strong", "weak"]
    assert [r["performance_tied_with_next"] for r in ranked] == [True, False, False]
    assert not ranked[0]["tie_test"].significant and ranked[1]["tie_test"].significant
    # a caller-supplied test (e.g. macro-F1) is used as given
    hook = ds.rank(
        rows(models), {"throughput": 0}, is_tie=lambda a, b: {a, b} == {"strong", "twin"}
    )
    assert [r["model"] for r in hook] == ["strong", "twin", "weak"]  # no dates: by name
    assert [r["performance_tied_with_next"] for r in hook] == [True, False, False]


def test_tied_with_next_tests_the_dynascore_the_board_ranks_by():
    """Performance tells the two apart, the Dynascore does not: with throughput
    weighed as much as performance, the faster, weaker model's throughput is worth
    exactly its performance gap (two models: the AMRS is that rate), in every replicate."""
    rng = np.random.default_rng(5)
    draws = rng.integers(0, 1000, size=(200, 1000))
    accurate = (rng.random(1000) < 0.8).astype(float)
    fast = (rng.random(1000) < 0.7).astype(float)
    replicates = {"accurate": {"performance": accurate[draws].mean(axis=1), "throughput": 10.0},
                  "fast": {"performance": fast[draws].mean(axis=1), "throughput": 1000.0}}
    points = {k: {"performance": float(v.mean()), "throughput": t}
              for (k, v), t in zip({"accurate": accurate, "fast": fast}.items(), (10.0, 1000.0), strict=True)}
    weights = {"performance": 1, "throughput": 1, "memory": 0, "robustness": 0, "fairness": 0}
    ranked = ds.rank(rows(points), weights, per_example_performance={"accurate": accurate, "fast": fast},
                     replicate_values=replicates)
    assert ranked[0]["performance_tied_with_next"] is False  # 80% against 70% on 1,000 examples
    assert ranked[0]["tied_with_next"] is True
    assert ranked[0]["dynascore"] == pytest.approx(ranked[1]["dynascore"])
    # Weighed on performance alone, the Dynascore separates them too.
    alone = ds.rank(rows(points), {**weights, "throughput": 0}, replicate_values=replicates)
    assert alone[0]["model"] == "accurate" and alone[0]["tied_with_next"] is False
    # Replicates that do not pair (another test set) give no answer.
    unpaired = ds.rank(rows(points), weights, replicate_values=replicates, comparable=lambda a, b: False)
    assert unpaired[0]["tied_with_next"] is None and unpaired[1]["tied_with_next"] is False


# -- intervals ----------------------------------------------------------------------------


def test_replicates_equal_to_the_point_values_give_a_zero_width_interval():
    constant = {k: {m: [x] * 5 for m, x in v.items()} for k, v in EXAMPLE.items()}
    intervals = ds.dynascore_interval(constant)
    point = ds.dynascores(EXAMPLE)
    for key, (low, high) in intervals.items():
        assert low == pytest.approx(point[key]) and high == pytest.approx(point[key])


def _simulated_leaderboard(n=300, replicates=500):
    """Per-example correctness for three models and their bootstrap replicates."""
    rng = np.random.default_rng(4)
    truth = {"A": 0.6, "B": 0.7, "C": 0.8}
    per_dataset = {
        dataset: {k: (rng.random(n) < p).astype(float) for k, p in truth.items()}
        for dataset in ("r1", "r2")
    }
    point, reps = {}, {}
    for k in truth:
        fixed = {m: x for m, x in EXAMPLE[k].items() if m != "performance"}
        point[k] = {
            "performance": {d: float(v[k].mean()) for d, v in per_dataset.items()},
            **fixed,
        }
        reps[k] = {
            "performance": {
                d: scoring.bootstrap_replicates(v[k], n_resamples=replicates, seed=seed)
                for seed, (d, v) in enumerate(per_dataset.items())
            },
            **fixed,  # measured, not resampled: the same in every replicate
        }
    return point, reps


def test_dynascore_interval_from_bootstrap_replicates():
    point, reps = _simulated_leaderboard()
    scores = ds.dynascores(point)
    intervals = ds.dynascore_interval(reps)
    for key, (low, high) in intervals.items():
        assert low < scores[key] < high
        assert high - low < 0.2
    per_replicate = ds.dynascore_replicates(reps)
    assert per_replicate["A"].shape == (500,)
    ranked = ds.rank([{"model": k, "metrics": v} for k, v in point.items()], replicate_values=reps)
    assert all(r["dynascore_ci_low"] < r["dynascore"] < r["dynascore_ci_high"] for r in ranked)


def test_one_replicate_matches_the_point_computation():
    values = {k: {m: [x] for m, x in v.items()} for k, v in EXAMPLE.items()}
    reps = ds.dynascore_replicates(values, {"calibration": 3})
    point = ds.dynascores(EXAMPLE, {"calibration": 3})
    assert {k: float(v[0]) for k, v in reps.items()} == pytest.approx(point)


def test_replicate_errors():
    with pytest.raises(ValueError, match="different lengths"):
        ds.dynascore_replicates(
            {"A": {"performance": [0.5, 0.6]}, "B": {"performance": [0.5, 0.6, 0.7]}}
        )
    with pytest.raises(ValueError, match="finite"):
        ds.dynascore_replicates({"A": {"performance": [0.5, float("nan")]}})
    assert ds.dynascore_interval({}) == {}

