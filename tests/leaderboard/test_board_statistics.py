"""The leaderboard's statistics: every resampled metric on the same draws, a seeded
perturbation sample, throughput timed several times, memory measured."""

import numpy as np
import pytest
from django.conf import settings

from leaderboard.evaluation import (
    PERTURBED_SAMPLE,
    RESAMPLES,
    metric_replicates,
    perturbed_sample,
    uncertainty,
    unpack,
)
from leaderboard.models import Evaluation
from ml import scoring
from tests.leaderboard.test_board import boarded  # noqa: F401  (the fixture)


@pytest.mark.django_db
def test_every_metric_is_resampled_on_the_draws_of_performance(demo_tasks):
    rng = np.random.default_rng(3)
    n = 300
    gold = rng.choice(["a", "b"], size=n).tolist()
    pred = [g if rng.random() < 0.7 else ("b" if g == "a" else "a") for g in gold]
    per_example = [float(g == p) for g, p in zip(gold, pred, strict=True)]
    confidence = rng.uniform(0.5, 1.0, size=n).round(6).tolist()
    details = {"per_example": per_example, "gold": gold, "pred": pred, "confidence": confidence,
               # robustness "agrees" exactly where the model is right, on every example;
               # fairness is measured on the first 100 only
               "robustness_agreement": per_example, "robustness_positions": list(range(n)),
               "fairness_agreement": [1.0] * 50 + [0.0] * 50, "fairness_positions": list(range(100)),
               "throughput_runs": [100.0, 110.0, 90.0, 105.0, 95.0]}
    scores = {}
    found = uncertainty(demo_tasks["sentiment"], scores, details, list(range(n)), seed=7)
    performance = unpack(found["replicate_values"])
    others = metric_replicates(found["replicates"], found["metric_replicate_values"])
    assert found["replicates"]["metrics"] == ["ece", "robustness", "fairness", "throughput"]
    assert all(len(values) == RESAMPLES for values in others.values())
    # The same draws: robustness, equal to correctness on every example, resamples equal to performance.
    np.testing.assert_allclose(others["robustness"], performance, atol=1e-6)
    # ECE replicate r is the ECE of the examples that performance's replicate r drew.
    first = next(scoring.resample_indices(n, n_resamples=RESAMPLES, seed=7))[0]
    correct = np.array(per_example)
    assert others["ece"][0] == pytest.approx(scoring.expected_calibration_error(np.array(confidence)[first],
                                                                                correct[first]), abs=1e-6)
    # Fairness: the share agreeing among the drawn examples that were in its sample.
    inside = first[first < 100]
    assert others["fairness"][0] == pytest.approx(float((inside < 50).mean()), abs=1e-6)
    assert set(np.unique(others["throughput"])) <= {90.0, 95.0, 100.0, 105.0, 110.0}
    for name in ("ece", "robustness", "fairness", "throughput"):
        low, high = found["intervals"][name]
        assert low <= high and low < high  # a real spread, not a point
    assert scores["robustness"] == pytest.approx(np.mean(per_example))
    # Fairness counts only the 100 examples its swap changed: n, and the interval of that count
    # (each resample of 300 draws about a third of them); robustness changed all 300.
    assert scores["fairness_n"] == 100 and scores["robustness_n"] == n
    low, high = found["intervals"]["fairness_n"]
    assert 70 < low < 100 < high < 130
    assert found["intervals"]["robustness_n"] == [n, n]
    assert "fairness_n" not in found["replicates"]["metrics"]


def test_robustness_and_fairness_use_the_whole_set_or_a_seeded_sample_of_500():
    assert perturbed_sample(120) == list(range(120))
    sample = perturbed_sample(10_000)
    assert len(sample) == len(set(sample)) == PERTURBED_SAMPLE == 500
    assert sample == sorted(sample) == perturbed_sample(10_000)  # seeded: the same for every model


def test_the_board_carries_the_spread_of_every_metric_into_the_dynascore(boarded, client):  # noqa: F811
    task, models = boarded
    evaluation = Evaluation.objects.filter(model_version=models[0]).first()
    stored = metric_replicates(evaluation.replicates, evaluation.metric_replicate_values)
    assert {"ece", "robustness", "fairness", "throughput"} <= set(stored)
    assert len(evaluation.metrics["throughput_runs"]) == settings.EVALUATION_TIMED_PASSES >= 2  # a spread
    body = client.get(f"/api/tasks/{task.slug}/leaderboard/").json()
    for row in body["rows"][:2]:
        for name in ("calibration", "throughput", "robustness", "fairness"):
            metric = row["metrics"][name]
            assert metric["ci_low"] is not None and metric["ci_low"] <= metric["ci_high"]
        assert row["dynascore_ci_low"] <= row["dynascore"] <= row["dynascore_ci_high"]


def test_memory_is_measured_not_the_parameter_size(boarded):  # noqa: F811
    task, models = boarded
    metrics = Evaluation.objects.filter(model_version=models[0]).first().metrics
    # The peak resident memory that loading the model and a batch of 32 add to a process with torch:
    # more than the float32 weights alone, which stay a column of their own.
    assert metrics["memory_mb"] is not None and metrics["parameters_mb"] is not None
    assert metrics["memory_mb"] > metrics["parameters_mb"] > 1


def test_memory_that_cannot_be_measured_is_none(tmp_path):
    from ml.memory import inference_memory_mb

    assert inference_memory_mb(tmp_path / "no-model-here", [{"statement": "x"}]) is None
    assert inference_memory_mb(tmp_path, []) is None
