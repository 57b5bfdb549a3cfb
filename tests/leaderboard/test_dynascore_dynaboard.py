"""The Dynascore against Dynaboard's published NLI leaderboard (Ma et al. 2021, Table 2).

The table prints every input and every Dynascore with two decimals.  Our Dynascore of the
printed inputs differs from the printed Dynascore by 0.21 to 0.25 (with the 16 GB memory
offset): not one constant.  The formula is not the cause.  The AMRS averages, over
neighbours in performance order, |metric gap| / performance gap, and the closest neighbours,
ALBERT and T5, are 0.13 points apart; each of those two performances is known only to
+-0.005, so that gap only to +-0.01 (8%), and the rates on that pair dominate every AMRS.
A shift of an AMRS moves each model's score in proportion to that model's own metric
(the two fast baselines' throughput is eight times the others'), so it is not a constant.

What the table does pin down, and what is tested here: there are unrounded inputs, each
within 0.005 of the printed one, at which our Dynascore is the printed one plus one
constant, to within the printed one's own rounding (0.005).  That is as tight as two
decimals allow.  The same check fails for a score of performance alone and for other
details of the formula (another neighbour threshold, throughput as seconds per example,
memory not turned around).  What two decimals cannot show: the check notices
throughput's AMRS off by 5%, fairness's and robustness's by about 10%, but memory's not
even by 10% (in units of performance the models' memory spans under one point, their
throughput 14, so memory's AMRS mostly moves the constant).
"""

from __future__ import annotations

import numpy as np
import pytest

from leaderboard import dynascore as ds

# Ma et al. 2021 ("Dynaboard", NeurIPS), Table 2, task NLI, in its order (ranked by
# Dynascore under the default weights): accuracy, throughput (examples/s), memory (GB used),
# fairness, robustness, and the published Dynascore.
DYNABOARD_NLI = {
    "DeBERTa": (69.54, 7.41, 5.71, 91.97, 75.70, 38.83),
    "RoBERTa": (69.07, 9.23, 4.82, 90.94, 74.82, 38.61),
    "ALBERT": (67.29, 9.60, 2.18, 89.94, 74.12, 37.72),
    "T5": (67.16, 7.10, 10.62, 91.89, 73.47, 37.53),
    "BERT": (64.82, 9.39, 4.13, 92.11, 66.38, 36.36),
    "Majority Baseline": (32.41, 77.33, 1.15, 100.00, 100.00, 22.78),
    "FastText": (31.29, 73.94, 2.20, 83.23, 69.14, 21.13),
}
MODELS = list(DYNABOARD_NLI)
INPUTS = ("performance", "throughput", "memory", "fairness", "robustness")
TABLE = np.array([row[:5] for row in DYNABOARD_NLI.values()])
PUBLISHED = np.array([row[5] for row in DYNABOARD_NLI.values()])
# Half on performance, the rest split evenly over the other four.
PAPER_WEIGHTS = {"performance": 4, "throughput": 1, "memory": 1, "fairness": 1, "robustness": 1, "calibration": 0}
MEMORY_CAP = {"memory": 16}  # the paper shows memory as "16 GB - used"; the cap it used is not published
HALF_UNIT = 0.005  # the table prints two decimals: each number is within this of its true value
PERFORMANCE = INPUTS.index("performance")


def rows(models):
    return [{"model": key, "metrics": metrics} for key, metrics in models.items()]


def board(inputs):
    return {model: dict(zip(INPUTS, map(float, row), strict=True)) for model, row in zip(MODELS, inputs, strict=True)}


def ours(inputs, weights=PAPER_WEIGHTS, offsets=MEMORY_CAP):
    scores = ds.dynascores(board(inputs), weights, offsets=offsets)
    return np.array([scores[model] for model in MODELS])


def jacobian(score, inputs=TABLE, step=1e-5):
    """d score[model] / d inputs[row, column], columns flattened row by row."""
    columns = []
    for k in range(inputs.size):
        bump = np.zeros(inputs.size)
        bump[k] = step
        bump = bump.reshape(inputs.shape)
        columns.append((score(inputs + bump) - score(inputs - bump)) / (2 * step))
    return np.array(columns).T


def within_rounding(score, columns=INPUTS, steps=3000):
    """Look for inputs within HALF_UNIT of the table's at which ``published - score`` is
    one constant.  Returns (largest distance of an offset from the constant, the constant,
    the shift of the inputs), evaluated exactly at the shifted inputs.

    The search: projected gradient on the linearised offsets' spread around their mean,
    with the shift of each input kept within +-HALF_UNIT (only ``columns`` move)."""
    free = np.zeros(TABLE.shape, dtype=bool)
    free[:, [INPUTS.index(name) for name in columns]] = True
    free = free.ravel()
    jac = jacobian(score)[:, free]
    centred = jac - jac.mean(axis=0)
    target = PUBLISHED - score(TABLE)
    target = target - target.mean()
    lipschitz = np.linalg.norm(centred, 2) ** 2
    shift = np.zeros(free.sum())
    for _ in range(steps):
        shift = np.clip(shift - centred.T @ (centred @ shift - target) / lipschitz, -HALF_UNIT, HALF_UNIT)
    full = np.zeros(TABLE.size)
    full[free] = shift
    full = full.reshape(TABLE.shape)
    offsets = PUBLISHED - score(TABLE + full)
    constant = (offsets.max() + offsets.min()) / 2
    return float(np.abs(offsets - constant).max()), float(constant), full


# -- the ranking --------------------------------------------------------------------------


def test_the_published_nli_board_ranks_as_dynaboard_ranked_it():
    ranked = ds.rank(rows(board(TABLE)), PAPER_WEIGHTS, offsets=MEMORY_CAP)
    assert [row["model"] for row in ranked] == MODELS
    # The cap moves every score by the same amount and changes no ranking.
    plain = ds.rank(rows(board(TABLE)), PAPER_WEIGHTS)
    assert [row["model"] for row in plain] == MODELS
    shifts = {round(a["dynascore"] - b["dynascore"], 9) for a, b in zip(ranked, plain, strict=True)}
    assert len(shifts) == 1


# -- the values ---------------------------------------------------------------------------


def test_the_published_values_are_ours_plus_one_constant_within_the_tables_rounding():
    distance, constant, shift = within_rounding(ours)
    assert np.abs(shift).max() <= HALF_UNIT  # every input within its rounding
    assert distance <= HALF_UNIT  # every published value within its rounding of ours + constant
    # The cap moves the constant only: by 16 GB in units of performance, times memory's
    # share of the weights (1/8), at the unrounded inputs found.
    uncapped, uncapped_constant, _ = within_rounding(lambda inputs: ours(inputs, offsets={}))
    assert uncapped == pytest.approx(distance, abs=1e-9)
    memory_amrs = ds.compute(board(TABLE + shift), PAPER_WEIGHTS).amrs["memory"]
    assert uncapped_constant - constant == pytest.approx(16 / memory_amrs / 8, abs=1e-9)


def test_the_printed_inputs_give_no_constant_offset_and_the_performances_are_why():
    offsets = PUBLISHED - ours(TABLE)
    # Not one constant: more spread than the published values' own rounding allows.
    worst, best = int(np.argmax(offsets)), int(np.argmin(offsets))
    spread = offsets[worst] - offsets[best]
    assert spread > 2 * HALF_UNIT
    # To first order, rounding the 28 other inputs can move the difference of these two
    # models' offsets by at most this; with the output's rounding it still falls short.
    jac = jacobian(ours).reshape(len(MODELS), *TABLE.shape)
    difference = np.abs(jac[worst] - jac[best])
    others = HALF_UNIT * np.delete(difference, PERFORMANCE, axis=1).sum()
    assert spread > others + 2 * HALF_UNIT
    # Rounding the performances can move it by far more, and the largest lever is a
    # performance of the closest usable neighbours (ALBERT and T5, 0.13 apart).
    assert HALF_UNIT * difference[:, PERFORMANCE].sum() > spread
    order = np.argsort(TABLE[:, PERFORMANCE])
    gaps = np.diff(TABLE[order, PERFORMANCE])
    closest = {MODELS[order[np.argmin(gaps)]], MODELS[order[np.argmin(gaps) + 1]]}
    assert closest == {"ALBERT", "T5"}
    lever = np.unravel_index(np.argmax(np.abs(jac).sum(axis=0)), TABLE.shape)
    assert lever[1] == PERFORMANCE and MODELS[lever[0]] in closest
    # Moving the performances alone within their rounding makes the offset one constant.
    distance, _, _ = within_rounding(ours, columns=("performance",))
    assert distance <= HALF_UNIT


def _only(*names):
    return {name: (1 if name in names else 0) for name in INPUTS}


def _as_seconds_per_example(inputs):
    turned = inputs.copy()
    turned[:, INPUTS.index("throughput")] = 1.0 / turned[:, INPUTS.index("throughput")]
    return ours(turned)


def _memory_not_turned_around(inputs):
    turned = inputs.copy()
    turned[:, INPUTS.index("memory")] *= -1.0
    return ours(turned)


OTHER_SCORES = {
    "performance alone": lambda inputs: ours(inputs, _only("performance")),
    "every metric weighed alike": lambda inputs: ours(inputs, _only(*INPUTS)),
    "throughput as seconds per example": _as_seconds_per_example,
    "memory higher is better": _memory_not_turned_around,
    # 0.2% of 69.54 is 0.139: the ALBERT-T5 pair (0.13 apart) is skipped.
    "neighbours closer than 0.2% skipped": ours,
}


@pytest.mark.parametrize("variant", list(OTHER_SCORES))
def test_the_value_check_fails_for_other_scores(variant, monkeypatch):
    """Negative: the check above tells these apart from the paper's score."""
    if variant == "neighbours closer than 0.2% skipped":
        monkeypatch.setattr(ds, "PERFORMANCE_GAP", 2e-3)
    distance, _, _ = within_rounding(OTHER_SCORES[variant])
    assert distance > HALF_UNIT


def test_the_threshold_on_tiny_gaps_and_the_scale_of_throughput_do_not_matter_here(monkeypatch):
    """No neighbours are closer than 0.13 points, so any threshold below 0.13/69.54 gives the
    same score; and the AMRS is in units of the metric, so its scale cancels."""
    reference = ours(TABLE)
    monkeypatch.setattr(ds, "PERFORMANCE_GAP", 0.0)
    assert ours(TABLE) == pytest.approx(reference, abs=1e-12)
    monkeypatch.setattr(ds, "PERFORMANCE_GAP", 0.99 * 0.13 / 69.54)
    assert ours(TABLE) == pytest.approx(reference, abs=1e-12)
    monkeypatch.setattr(ds, "PERFORMANCE_GAP", 1.01 * 0.13 / 69.54)
    assert ours(TABLE) != pytest.approx(reference, abs=1e-3)
    monkeypatch.undo()
    per_minute = TABLE.copy()
    per_minute[:, INPUTS.index("throughput")] *= 60
    assert ours(per_minute) == pytest.approx(reference, abs=1e-9)


# -- a trade-off that performance alone cannot rank ---------------------------------------

# A user who weighs throughput five times performance (the page's sliders allow 0-5): the
# two baselines answer 74-77 examples/s against 7-10 for the rest.  In units of
# performance (throughput's AMRS is 4.9 examples/s per point) that is about 14 points at
# weight 5 against a 33-38 point deficit at weight 1, so they rise to the top, and among
# the rest RoBERTa (9.23 examples/s) passes DeBERTa (7.41), 0.47 points more accurate.
THROUGHPUT_FIRST = {**PAPER_WEIGHTS, "performance": 1, "throughput": 5}
THROUGHPUT_FIRST_ORDER = ["Majority Baseline", "FastText", "RoBERTa", "DeBERTa", "ALBERT", "T5", "BERT"]


def ranks_as_throughput_first(score):
    """Whether ``score`` (one number per model, in MODELS order) ranks the board as the
    throughput-first weights do."""
    return [MODELS[i] for i in np.argsort(-np.asarray(score), kind="stable")] == THROUGHPUT_FIRST_ORDER


def test_a_trade_off_reverses_the_performance_order():
    assert ranks_as_throughput_first(ours(TABLE, THROUGHPUT_FIRST))
    ranked = ds.rank(rows(board(TABLE)), THROUGHPUT_FIRST, offsets=MEMORY_CAP)
    assert [row["model"] for row in ranked] == THROUGHPUT_FIRST_ORDER
    # The least accurate model is above the most accurate one.
    assert THROUGHPUT_FIRST_ORDER.index("Majority Baseline") < THROUGHPUT_FIRST_ORDER.index("DeBERTa")


@pytest.mark.parametrize(
    "increasing",
    [lambda p: p, np.exp, np.log, lambda p: 1 / (1 + np.exp(-(p - 50) / 5)), lambda p: p.argsort().argsort()]
)
def test_no_increasing_function_of_performance_ranks_as_the_trade_off_does(increasing):
    """Negative: every increasing function of performance ranks in performance order, which
    puts DeBERTa first; the throughput-first board puts the Majority Baseline first."""
    assert not ranks_as_throughput_first(increasing(TABLE[:, PERFORMANCE]))
    # The Dynascore weighing performance alone is one of them.
    assert not ranks_as_throughput_first(ours(TABLE, {**THROUGHPUT_FIRST, "throughput": 0}))
