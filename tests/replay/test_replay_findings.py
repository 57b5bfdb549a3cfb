"""The replay's generated findings (``replay.findings``): a sentence compares
only what its test and its correction allow. Each case is one the hand-written prose
got wrong: overlapping intervals called apart, a model at the majority line called above
it, a difference inside the seeds' spread, a win listed without the loss beside it."""

import pytest

from replay import findings as F


def stat(accuracy, low, high, seeds=None, n=1000):
    return {"accuracy": accuracy, "ci_low": low, "ci_high": high, "num_examples": n,
            "by_seed": seeds if seeds is not None else [accuracy]}


def paired(difference, low, high, p):
    return {"difference": difference, "ci_low": low, "ci_high": high, "p_value": p, "num_examples": 1000}


REFERENCES = {"R1": {"num_examples": 1000, "chance": 0.5, "constant": {"yes": 0.69, "no": 0.31},
                     "majority": {"label": "yes", "accuracy": 0.69}},
              "static": {"num_examples": 1000, "chance": 0.5, "constant": {"yes": 0.05, "no": 0.95},
                         "majority": {"label": "no", "accuracy": 0.95}}}


def report(strategy="cumulative", *, m1=None, m2=None, seeds=(0,), m0=None, vs_control=None):
    m0 = m0 or {"R1": stat(0.31, 0.28, 0.34), "static": stat(0.95, 0.94, 0.96)}
    return {
        "task": "hate", "mode": "full", "strategy": strategy, "seeds": list(seeds),
        "statistics": {"resamples": 1000, "confidence": 0.95}, "references": REFERENCES,
        "rounds": [
            {"number": 0, "name": "static", "model": "m0", "test": m0},
            {"number": 1, "name": "R1", "model": "m1", "test": m1 or {"R1": stat(0.79, 0.765, 0.813)},
             "collection": {"model_error_rate": 0.62, "ci_low": 0.59, "ci_high": 0.65, "by_seed": [0.62]},
             "gain_over_previous": {**paired(0.48, 0.43, 0.52, 0.002), "test_set": "R1", "previous_model": "m0"},
             "vs_control": vs_control or {}},
            {"number": 2, "name": "R2", "model": "m2", "test": m2 or {"R1": stat(0.795, 0.773, 0.818)},
             "collection": {"model_error_rate": 0.44, "ci_low": 0.41, "ci_high": 0.47, "by_seed": [0.44]}},
        ],
    }


def test_holm_adjusts_step_down_and_keeps_the_order():
    assert F.holm([0.01, 0.04, 0.03]) == [0.03, 0.06, 0.06]
    assert F.holm([0.5]) == [0.5]
    assert F.holm([0.002] * 66)[0] > 0.05  # the bootstrap's floor cannot survive 66 comparisons


def test_overlapping_intervals_from_two_runs_are_read_with_the_replicates_spread():
    """continue's M7 at 75.5 (72.9-77.8) against cumulative's 79.5 (77.3-81.8): two runs
    of one recipe already differ by 6.5 points, so a 4-point gap is not told apart, and no
    sentence speaks of overlap at all (overlapping intervals may still differ)."""
    a = report("continue", m1={"R1": stat(0.854, 0.833, 0.873)}, m2={"R1": stat(0.755, 0.729, 0.778)})
    b = report("cumulative", m1={"R1": stat(0.789, 0.765, 0.813)}, m2={"R1": stat(0.795, 0.773, 0.818)})
    text = "\n".join(F.strategy_findings(a, b))
    assert "differ by up to 6.5 points (m1 on R1)" in text
    assert "Not told apart" in text and "`continue` lower" not in text and "overlap" not in text
    (alone,) = F.strategy_family(a, b, None)
    assert alone.told_apart  # without the replicate, the normal test alone would call it


def test_a_difference_inside_the_replicates_spread_is_not_told_apart():
    """The two runs' M1 (one recipe) differ by 6.5 points: a strategy gap of 5 is no evidence,
    even with intervals that do not overlap."""
    a = report("continue", m1={"R1": stat(0.854, 0.833, 0.873)}, m2={"R1": stat(0.80, 0.79, 0.81)})
    b = report("cumulative", m1={"R1": stat(0.789, 0.765, 0.813)}, m2={"R1": stat(0.85, 0.84, 0.86)})
    spread, where = F.replicate_spread(a, b)
    assert round(spread, 3) == 0.065 and where == "m1 on R1"
    (gap,) = F.strategy_family(a, b, spread)
    assert gap.adjusted < F.ALPHA and not gap.told_apart
    (wide,) = F.strategy_family(a, report("cumulative", m2={"R1": stat(0.90, 0.89, 0.91)}), spread)
    assert wide.told_apart and wide.difference < 0


def test_a_model_at_the_majority_line_is_not_above_it():
    """Equal is not better: an interval that holds the majority answer is not above it, and
    a point estimate a little above it with a wide interval is not either."""
    at_line = report(m2={"R1": stat(0.69, 0.66, 0.72), "static": stat(0.96, 0.93, 0.99)})
    rows = {c.what.split(":")[0]: c for c in F.majority_family(at_line)}
    assert not rows["m2 on R1"].told_apart and rows["m2 on R1"].difference == 0
    assert not rows["m2 on static"].told_apart and rows["m2 on static"].difference > 0
    lines = "\n".join(F.report_findings(at_line))
    assert "Above the majority answer" in lines  # m1 on R1 (79.0, 76.5-81.3) is, against 69.0
    assert "m2 on R1" not in lines.split("Above the majority answer")[1].split("\n")[0]


def test_a_model_that_learnt_a_constant_is_named():
    lines = "\n".join(F.report_findings(report()))
    assert "m0 scores within 1.0 points of always answering \u201cno\u201d" in lines
    assert "m1 scores within" not in lines


def test_wins_and_losses_against_the_control_are_both_listed():
    control = {"R1": paired(0.45, 0.41, 0.49, 0.002), "R3": paired(-0.098, -0.146, -0.049, 0.002),
               "static": paired(0.01, -0.01, 0.03, 0.4)}
    text = "\n".join(F.report_findings(report(vs_control=control)))
    assert "Better than the control (1 of 3): m1 against its control on R1" in text
    assert "Worse than the control (1 of 3): m1 against its control on R3 (\u22129.8 points" in text
    assert "Not told apart (1 of 3): m1 against its control on static" in text


def test_the_seeds_spread_must_be_exceeded():
    """Three seeds whose values spread over 8 points: a 6-point gain that the paired test
    calls significant is still not told apart."""
    seeds = report(seeds=(0, 1, 2), m1={"R1": stat(0.79, 0.765, 0.813, seeds=[0.75, 0.79, 0.83])})
    seeds["rounds"][1]["gain_over_previous"] = {**paired(0.06, 0.03, 0.09, 0.002), "test_set": "R1",
                                                "previous_model": "m0"}
    (gain,) = F.gain_family(seeds)
    assert gain.adjusted < F.ALPHA and round(gain.spread, 3) == 0.08
    assert not gain.told_apart
    assert "3 seeds (0, 1, 2)" in "\n".join(F.report_findings(seeds))


def test_the_bootstrap_floor_falls_back_to_the_interval():
    """A p-value at the bootstrap's floor is read from the paired interval instead (the
    resamples could not resolve it), so a large effect survives a large family; a p-value
    above the floor is kept as the report gives it."""
    far = paired(0.45, 0.41, 0.49, 2 / 1001)
    assert F.paired_p(far, 1000) < 1e-10
    near = paired(0.03, 0.001, 0.06, 0.04)
    assert F.paired_p(near, 1000) == 0.04


def test_the_collection_trend_is_a_comparison_too():
    """R1 62 (59-65) against R2 44 (41-47): lower, with its correction; the rate is named
    as what it is, the previous model's error on the round's examples."""
    (change,) = F.collection_family(report())
    assert change.told_apart and change.difference < 0
    assert "M(r\u22121)'s error on round r's examples" in "\n".join(F.report_findings(report()))


def test_the_findings_block_is_replaced_and_a_missing_marker_is_named():
    text = f"# Doc\n{F.DOC_BEGIN}\nstale line\n{F.DOC_END}\nrest\n"
    out = F.with_findings(text, {"run": report()})
    assert out.startswith("# Doc") and out.endswith("rest\n") and "stale line" not in out
    assert "#### Hate speech, full mode, strategy `cumulative` (`run`)" in out
    with pytest.raises(ValueError, match="no findings block"):
        F.with_findings("no markers", {"run": report()})


def test_each_control_is_its_own_family_and_the_majority_test_is_the_reports_paired_one():
    """Two controls (static, balanced): a family each, so a win against one is not spent
    on the other's correction; and where the report holds a paired test against the
    majority answer, that test decides (here: an interval that holds the line, but a
    paired test that says the model is below it)."""
    rep = report(vs_control=None)
    rep["rounds"][1]["vs_controls"] = {"static": {"R1": paired(0.45, 0.41, 0.49, 0.002)},
                                       "balanced": {"R1": paired(0.01, -0.02, 0.04, 0.5)}}
    assert F.control_names(rep) == ["static", "balanced"]
    assert [c.told_apart for c in F.control_family(rep, "static")] == [True]
    assert [c.told_apart for c in F.control_family(rep, "balanced")] == [False]
    text = "\n".join(F.report_findings(rep))
    assert "against its static control" in text and "against its balanced control" in text
    rep["rounds"][2]["test"] = {"R1": stat(0.67, 0.64, 0.70)}
    (by_interval,) = [c for c in F.majority_family(rep) if c.what.startswith("m2 on R1")]
    assert not by_interval.told_apart
    rep["rounds"][2]["vs_majority"] = {"R1": paired(-0.02, -0.035, -0.005, 0.004)}
    (by_pairs,) = [c for c in F.majority_family(rep) if c.what.startswith("m2 on R1")]
    assert by_pairs.p_value == 0.004 and by_pairs.difference < 0
