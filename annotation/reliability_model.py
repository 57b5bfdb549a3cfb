"""How much a validator's vote is worth, and when the votes so far decide an example.

Pure Python and numpy, no Django: the validation service calls it with rows read
from the database, and ``bench/validation.py`` replays real annotators through the
very same functions.

The question every vote answers is binary: *is the writer's answer right?* A vote
is a validator's decision on it (``correct`` or ``incorrect``; on a blind task the
validator gave their own answer before they saw the writer's). That makes one model
serve every task type, extractive QA included, where answers are spans and not
labels.

The model (a two-class Dawid-Skene model, with Beta priors):

- each example ``i`` of a stratum ``k`` (for example "fooled the model" or not) has
  a hidden truth ``z_i`` (the writer is right), right with probability ``pi_k``;
- each validator ``v`` has a *sensitivity* ``s_v = P(says correct | right)`` and a
  *specificity* ``t_v = P(says incorrect | wrong)``;
- votes are independent given the truth.

A validator who always says "correct" has ``s = 1`` and ``t = 0``; one who answers at
random has ``s = t = 1/2``; both have ``s + t = 1``, and their votes then carry no
evidence at all (a likelihood ratio of 1). A validator whose ``s + t`` falls to 1 or
below gets weight zero both ways: the votes of someone no better than chance decide
nothing, and a systematically inverted voter is not used inverted. No vote weighs
more than its validator's balanced accuracy, ``(s + t) / 2``, allows
(``Reliability.weight``).

``fit`` estimates ``s``, ``t`` and ``pi`` by EM from all the task's votes, with
researchers' decisions as known truths (anchors). The M step takes Beta posterior
means, so a newcomer's estimate is the prior (``Prior``) and moves with each vote
the EM can attribute; nothing is ever exactly 0 or 1. ``posterior_right`` combines
the votes on one example with the fitted reliabilities; ``decide`` applies a task's
rule (``Rule``) to that posterior.

The EM's estimate also learns from examples nobody checked, where a group that votes
together looks reliable to it whatever the truth. ``anchored`` is what a validator's
answers on anchors alone support (the Beta posterior from the prior and those answers:
few answers, a weight near a newcomer's), and ``capped`` keeps the fitted estimate
below it, so that no weight exceeds what checked answers support.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

VERIFIED, REJECTED, ESCALATED = "verified", "rejected", "escalated"
INTERVAL = 0.95
INTERVAL_DRAWS = 4000
MAX_ITERATIONS = 200
TOLERANCE = 1e-6


@dataclass(frozen=True)
class Prior:
    """Beta pseudo-counts (successes, failures): what the model assumes before any
    vote. The default says a newcomer is right four times in five either way, worth
    about as much as five votes of evidence, and a writer is right as often."""

    sensitivity: tuple[float, float] = (4.0, 1.0)
    specificity: tuple[float, float] = (4.0, 1.0)
    writer: tuple[float, float] = (4.0, 1.0)

    @property
    def mean_right(self) -> float:
        a, b = self.writer
        return a / (a + b)


DEFAULT_PRIOR = Prior()


@dataclass(frozen=True)
class Vote:
    example: Hashable
    validator: Hashable
    says_correct: bool


@dataclass(frozen=True)
class Reliability:
    """One validator's estimate: Beta posteriors over sensitivity and specificity,
    as pseudo-counts (the prior plus the soft counts of the fitted votes)."""

    s_hits: float
    s_misses: float
    t_hits: float
    t_misses: float
    votes: int = 0

    @classmethod
    def newcomer(cls, prior: Prior = DEFAULT_PRIOR) -> Reliability:
        return cls(*prior.sensitivity, *prior.specificity, votes=0)

    @property
    def sensitivity(self) -> float:
        return self.s_hits / (self.s_hits + self.s_misses)

    @property
    def specificity(self) -> float:
        return self.t_hits / (self.t_hits + self.t_misses)

    @property
    def informative(self) -> bool:
        """Better than chance: sensitivity and specificity add up to more than 1."""
        return self.sensitivity + self.specificity > 1.0

    def weight(self, says_correct: bool) -> float:
        """The vote's log likelihood ratio for "the writer is right" (0: no evidence),
        at most the validator's balanced accuracy's log odds either way.

        The cap closes a gap the plain model leaves open: a validator who says
        "correct" to everything has a tiny ``1 - s``, so a rare "incorrect" from them
        would weigh as much as an expert's; an account could spam agreement and then
        spend that weight on rejecting one writer's examples. Capped, it weighs what
        their record as a whole is worth, next to nothing."""
        if not self.informative:
            return 0.0
        s, t = self.sensitivity, self.specificity
        raw = math.log(s / (1.0 - t)) if says_correct else math.log((1.0 - s) / t)
        balanced = (s + t) / 2
        cap = math.log(balanced / (1.0 - balanced))
        return max(-cap, min(cap, raw))

    @property
    def strength(self) -> float:
        """How much one vote moves the decision, either way: the smaller of the two
        weights' sizes (0 for a validator no better than chance)."""
        return min(abs(self.weight(True)), abs(self.weight(False)))

    def accuracy(self, prior_right: float) -> float:
        """P(the vote matches the truth) on examples that are right with ``prior_right``."""
        return prior_right * self.sensitivity + (1.0 - prior_right) * self.specificity


def anchored(votes: Iterable[Vote], anchors: Mapping[Hashable, bool],
             prior: Prior = DEFAULT_PRIOR) -> dict[Hashable, Reliability]:
    """What each validator's answers on anchored examples support by themselves: the Beta
    posterior of their sensitivity (from anchors whose writer is right) and specificity
    (from those whose writer is wrong), starting at the prior. A validator with no such
    answer is missing (a newcomer's, ``Reliability.newcomer``); one with a few sits near it."""
    counts: dict[Hashable, list[int]] = {}
    for vote in votes:
        if vote.example not in anchors:
            continue
        tally = counts.setdefault(vote.validator, [0, 0, 0, 0])  # s hits, s misses, t hits, t misses
        if anchors[vote.example]:
            tally[0 if vote.says_correct else 1] += 1
        else:
            tally[3 if vote.says_correct else 2] += 1
    s_a, s_b = prior.sensitivity
    t_a, t_b = prior.specificity
    return {validator: Reliability(s_a + s_hits, s_b + s_misses, t_a + t_hits, t_b + t_misses,
                                   votes=s_hits + s_misses + t_hits + t_misses)
            for validator, (s_hits, s_misses, t_hits, t_misses) in counts.items()}


def capped(fitted: Reliability, supported: Reliability) -> Reliability:
    """``fitted`` with its sensitivity and its specificity each no higher than
    ``supported``'s (the pseudo-counts of the lower one are kept): a vote of it weighs no
    more than one of ``supported`` either way, and its balanced accuracy is no higher.
    Its vote count stays the fit's."""
    s = (fitted.s_hits, fitted.s_misses) if fitted.sensitivity <= supported.sensitivity else (
        supported.s_hits, supported.s_misses)
    t = (fitted.t_hits, fitted.t_misses) if fitted.specificity <= supported.specificity else (
        supported.t_hits, supported.t_misses)
    return Reliability(*s, *t, votes=fitted.votes)


def accuracy_intervals(reliabilities: Mapping[Hashable, Reliability], prior_right: float,
                       seed: int = 0) -> dict[Hashable, tuple[float, float]]:
    """A 95% interval on each validator's accuracy: seeded draws from the Beta
    posteriors of sensitivity and specificity, weighed by ``prior_right``."""
    tail = 100 * (1 - INTERVAL) / 2
    result = {}
    for key, rel in reliabilities.items():
        # Seeded by the validator as well: an interval does not move when others join.
        digest = hashlib.sha256(f"reliability:{seed}:{key!r}".encode()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
        draws = (prior_right * rng.beta(rel.s_hits, rel.s_misses, INTERVAL_DRAWS)
                 + (1.0 - prior_right) * rng.beta(rel.t_hits, rel.t_misses, INTERVAL_DRAWS))
        low, high = np.percentile(draws, [tail, 100 - tail])
        result[key] = (float(low), float(high))
    return result


@dataclass
class Fit:
    """What ``fit`` learnt: each validator's reliability, each stratum's share of
    right writers (``prior_right``), and the posterior of every example it saw."""

    reliabilities: dict[Hashable, Reliability]
    prior_right: dict[Hashable, float]
    posteriors: dict[Hashable, float]
    iterations: int
    converged: bool
    prior: Prior = field(default_factory=Prior)

    def reliability(self, validator: Hashable) -> Reliability:
        return self.reliabilities.get(validator) or Reliability.newcomer(self.prior)

    def prior_for(self, stratum: Hashable = None) -> float:
        return self.prior_right.get(stratum, self.prior.mean_right)

    @property
    def overall_prior_right(self) -> float:
        """The share of right writers over all strata (for accuracies shown to people)."""
        if not self.posteriors:
            return self.prior.mean_right
        return sum(self.posteriors.values()) / len(self.posteriors)


def _logit(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def posterior_right(prior_right: float, votes: Iterable[tuple[Reliability, bool]]) -> float:
    """P(the writer is right | these votes), each vote by a validator of that reliability."""
    return _sigmoid(_logit(prior_right) + sum(rel.weight(says) for rel, says in votes))


def fit(votes: Sequence[Vote], *, anchors: Mapping[Hashable, bool] | None = None,
        strata: Mapping[Hashable, Hashable] | None = None, prior: Prior = DEFAULT_PRIOR,
        max_iterations: int = MAX_ITERATIONS, tolerance: float = TOLERANCE) -> Fit:
    """Fit the model to ``votes`` by EM.

    ``anchors`` maps examples whose truth is known (a researcher decided them) to
    True (right) or False (wrong); they are not re-estimated. ``strata`` maps an
    example to its stratum (default: one stratum, ``None``). Examples with no vote
    and no anchor play no part. The loops are numpy over arrays of votes: a fit over
    tens of thousands of votes takes milliseconds."""
    anchors = dict(anchors or {})
    strata = strata or {}
    example_index: dict[Hashable, int] = {}
    validator_index: dict[Hashable, int] = {}
    cast_example, cast_validator, cast_says = [], [], []
    for vote in votes:
        cast_example.append(example_index.setdefault(vote.example, len(example_index)))
        cast_validator.append(validator_index.setdefault(vote.validator, len(validator_index)))
        cast_says.append(bool(vote.says_correct))
    for example in anchors:
        example_index.setdefault(example, len(example_index))
    examples, validators = list(example_index), list(validator_index)
    n_examples, n_validators = len(examples), len(validators)
    ex = np.asarray(cast_example, dtype=np.int64)
    va = np.asarray(cast_validator, dtype=np.int64)
    says = np.asarray(cast_says, dtype=bool)
    stratum_keys = sorted({strata.get(e) for e in examples}, key=repr)
    stratum_index = {k: i for i, k in enumerate(stratum_keys)}
    stratum = np.asarray([stratum_index[strata.get(e)] for e in examples], dtype=np.int64)
    anchored = np.zeros(n_examples, dtype=bool)
    anchor_value = np.zeros(n_examples)
    for example, right in anchors.items():
        anchored[example_index[example]] = True
        anchor_value[example_index[example]] = 1.0 if right else 0.0
    s_a, s_b = prior.sensitivity
    t_a, t_b = prior.specificity
    counts = np.zeros((n_validators, 4))  # s hits, s misses, t hits, t misses (soft counts)
    votes_per_validator = np.bincount(va, minlength=n_validators)
    prior_right = np.full(len(stratum_keys), prior.mean_right)

    def vote_weights() -> tuple[np.ndarray, np.ndarray]:
        s = (s_a + counts[:, 0]) / (s_a + s_b + counts[:, 0] + counts[:, 1])
        t = (t_a + counts[:, 2]) / (t_a + t_b + counts[:, 2] + counts[:, 3])
        useful = s + t > 1.0
        balanced = (s + t) / 2
        cap = np.log(balanced / (1.0 - balanced))  # as in Reliability.weight
        yes = np.where(useful, np.clip(np.log(s / (1.0 - t)), -cap, cap), 0.0)
        no = np.where(useful, np.clip(np.log((1.0 - s) / t), -cap, cap), 0.0)
        return yes, no

    def e_step() -> np.ndarray:
        yes, no = vote_weights()
        evidence = np.bincount(ex, weights=np.where(says, yes[va], no[va]), minlength=n_examples)
        p = np.clip(prior_right[stratum], 1e-12, 1 - 1e-12)
        right = 1.0 / (1.0 + np.exp(-(np.log(p / (1 - p)) + evidence)))
        return np.where(anchored, anchor_value, right)

    posteriors = e_step()
    iterations, converged = 0, n_examples == 0
    while iterations < max_iterations and not converged:
        iterations += 1
        right = posteriors[ex]
        counts = np.stack([
            np.bincount(va, weights=np.where(says, right, 0.0), minlength=n_validators),
            np.bincount(va, weights=np.where(says, 0.0, right), minlength=n_validators),
            np.bincount(va, weights=np.where(says, 0.0, 1.0 - right), minlength=n_validators),
            np.bincount(va, weights=np.where(says, 1.0 - right, 0.0), minlength=n_validators),
        ], axis=1)
        right_per_stratum = np.bincount(stratum, weights=posteriors, minlength=len(stratum_keys))
        size_per_stratum = np.bincount(stratum, minlength=len(stratum_keys))
        prior_right = (prior.writer[0] + right_per_stratum) / (sum(prior.writer) + size_per_stratum)
        updated = e_step()
        converged = bool(np.max(np.abs(updated - posteriors), initial=0.0) < tolerance)
        posteriors = updated
    reliabilities = {
        v: Reliability(s_a + counts[i, 0], s_b + counts[i, 1], t_a + counts[i, 2], t_b + counts[i, 3],
                       votes=int(votes_per_validator[i]))
        for i, v in enumerate(validators)}
    return Fit(reliabilities, {k: float(prior_right[i]) for k, i in stratum_index.items()},
               {e: float(posteriors[i]) for i, e in enumerate(examples)}, iterations, converged, prior)


@dataclass(frozen=True)
class Rule:
    """A task's adaptive rule: decide once the posterior that the writer is right (or
    wrong) reaches ``target_confidence`` after at least ``min_votes`` votes; hand the
    example to a researcher after ``max_votes`` votes without a decision."""

    target_confidence: float = 0.998
    min_votes: int = 1
    max_votes: int = 5


def decide(p_right: float, votes: int, rule: Rule) -> str | None:
    """``VERIFIED``, ``REJECTED``, ``ESCALATED`` (to a researcher), or None (wait for
    another vote)."""
    if votes >= rule.min_votes:
        if p_right >= rule.target_confidence:
            return VERIFIED
        if 1.0 - p_right >= rule.target_confidence:
            return REJECTED
    if votes >= rule.max_votes:
        return ESCALATED
    return None


def distance_to_decision(p_right: float, rule: Rule) -> float:
    """How much evidence (log odds) the example still needs to be decided either way:
    0 once decided; the queue serves the smallest first."""
    need = _logit(rule.target_confidence)
    return max(0.0, need - abs(_logit(p_right)))
