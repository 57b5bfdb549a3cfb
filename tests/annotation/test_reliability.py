"""The reliability model and the adaptive rule (``annotation.reliability_model``), on votes
made up here so that each property is visible: no database."""

from __future__ import annotations

import random

import pytest

from annotation import reliability_model as R


def crowd_votes(n_examples=400, seed=0, *, honest=4, accuracy=0.95, spammers=None, wrong_share=0.25):
    """Votes of ``honest`` validators of the given accuracy, plus ``spammers``
    ({name: "always_correct" | "random" | "inverted"}) voting on every example."""
    rng = random.Random(seed)
    truth, votes = {}, []
    for i in range(n_examples):
        right = rng.random() >= wrong_share
        truth[i] = right
        for v in range(honest):
            says = right if rng.random() < accuracy else not right
            votes.append(R.Vote(i, f"honest-{v}", says))
        for name, kind in (spammers or {}).items():
            says = {"always_correct": True, "random": rng.random() < 0.5, "inverted": not right}[kind]
            votes.append(R.Vote(i, name, says))
    return truth, votes


def test_a_newcomer_counts_at_the_prior():
    fitted = R.fit([])
    newcomer = fitted.reliability("someone")
    assert newcomer.votes == 0
    assert newcomer.sensitivity == pytest.approx(0.8) and newcomer.specificity == pytest.approx(0.8)
    assert newcomer.weight(True) == pytest.approx(-newcomer.weight(False))
    assert fitted.prior_for("any stratum") == pytest.approx(0.8)


def test_honest_validators_are_estimated_near_their_accuracy():
    _truth, votes = crowd_votes(accuracy=0.9)
    fitted = R.fit(votes)
    assert fitted.converged
    for v in range(4):
        rel = fitted.reliabilities[f"honest-{v}"]
        assert 0.85 < rel.sensitivity < 0.95 and 0.8 < rel.specificity < 0.97
        assert rel.votes == 400
    assert 0.68 < fitted.prior_for(None) < 0.82  # a quarter of the writers are wrong


@pytest.mark.parametrize("kind", ["always_correct", "random"])
def test_a_spammers_weight_falls_to_about_zero(kind):
    _truth, votes = crowd_votes(spammers={"spammer": kind})
    fitted = R.fit(votes)
    spammer, honest = fitted.reliabilities["spammer"], fitted.reliabilities["honest-0"]
    newcomer = R.Reliability.newcomer()
    assert spammer.strength < 0.15 * newcomer.strength
    assert honest.strength > 2.5
    # Whatever the spammer says moves a decision by next to nothing: even the rare
    # "incorrect" of an always-"correct" spammer (the raw model would weigh it like an
    # expert's) is capped by their balanced accuracy.
    assert abs(spammer.weight(True)) < 0.3 and abs(spammer.weight(False)) < 0.3


def test_a_spammer_with_few_votes_still_weighs_less_than_a_newcomer():
    _truth, votes = crowd_votes(n_examples=40, spammers={"spammer": "always_correct"})
    fitted = R.fit(votes)
    assert fitted.reliabilities["spammer"].strength < R.Reliability.newcomer().strength


def test_a_validator_no_better_than_chance_decides_nothing_either_way():
    worse = R.Reliability(1.0, 9.0, 5.0, 5.0)  # sensitivity .1, specificity .5: s + t < 1
    assert not worse.informative
    assert worse.weight(True) == 0 and worse.weight(False) == 0
    assert R.posterior_right(0.7, [(worse, True), (worse, False), (worse, True)]) == pytest.approx(0.7)


def test_an_inverted_voter_is_not_used_inverted():
    _truth, votes = crowd_votes(spammers={"liar": "inverted"})
    liar = R.fit(votes).reliabilities["liar"]
    assert not liar.informative and liar.strength == 0


def test_anchors_are_the_truth_and_teach_the_validators():
    # One validator, always wrong on the anchored examples: the anchors expose them.
    votes = [R.Vote(i, "v", True) for i in range(30)]
    anchors = {i: False for i in range(30)}
    fitted = R.fit(votes, anchors=anchors)
    assert all(fitted.posteriors[i] == 0.0 for i in range(30))
    assert fitted.reliabilities["v"].specificity < 0.2


def test_strata_get_their_own_share_of_right_writers():
    votes, strata = [], {}
    rng = random.Random(1)
    for i in range(600):
        fooled = i % 2 == 0
        right = rng.random() < (0.6 if fooled else 0.95)
        strata[i] = "fooled" if fooled else "not fooled"
        votes += [R.Vote(i, f"v{v}", right if rng.random() < 0.95 else not right) for v in range(3)]
    fitted = R.fit(votes, strata=strata)
    assert fitted.prior_for("fooled") < 0.7 < 0.88 < fitted.prior_for("not fooled")


def test_posterior_and_decision():
    good = R.Reliability(95, 5, 95, 5)
    rule = R.Rule(target_confidence=0.99, min_votes=1, max_votes=3)
    p1 = R.posterior_right(0.8, [(good, True)])
    assert p1 == pytest.approx(0.8 * 0.95 / (0.8 * 0.95 + 0.2 * 0.05))
    assert R.decide(p1, 1, rule) is None  # 0.987: not yet
    p2 = R.posterior_right(0.8, [(good, True), (good, True)])
    assert R.decide(p2, 2, rule) == R.VERIFIED
    p_no = R.posterior_right(0.8, [(good, False), (good, False), (good, False)])
    assert R.decide(p_no, 3, rule) == R.REJECTED
    split = R.posterior_right(0.8, [(good, True), (good, False), (good, True)])
    assert R.decide(R.posterior_right(0.8, [(good, True), (good, False)]), 2, rule) is None
    assert split == pytest.approx(p1)  # one against one cancels out
    assert R.decide(split, 3, rule) == R.ESCALATED  # max_votes reached, still short of 0.99
    stuck = R.posterior_right(0.5, [(good, True), (good, False), (good, False), (good, True)])
    assert R.decide(stuck, 4, R.Rule(0.99, 1, 4)) == R.ESCALATED
    assert R.decide(0.9999, 1, R.Rule(0.99, 2, 5)) is None  # min_votes holds
    assert R.distance_to_decision(p2, rule) == 0
    assert R.distance_to_decision(p1, rule) > 0


def test_accuracy_intervals_cover_the_estimate_and_narrow_with_votes():
    few = R.Reliability(4 + 9, 1 + 1, 4 + 9, 1 + 1, votes=20)
    many = R.Reliability(4 + 900, 1 + 100, 4 + 900, 1 + 100, votes=2000)
    intervals = R.accuracy_intervals({"few": few, "many": many}, 0.8, seed=3)
    for key, rel in (("few", few), ("many", many)):
        low, high = intervals[key]
        assert low < rel.accuracy(0.8) < high
    assert intervals["many"][1] - intervals["many"][0] < (intervals["few"][1] - intervals["few"][0]) / 4
    assert R.accuracy_intervals({"few": few}, 0.8, seed=3)["few"] == intervals["few"]
