"""Validators' reliability on a task, and the adaptive decision of an example.

The model is ``annotation.reliability_model`` (a two-class Dawid-Skene model fitted by
EM). Here it meets the database:

- **What it learns from.** Only votes it has reason to trust (``learning_votes``):
  counted decisions (``correct`` or ``incorrect``) of validators of confirmed MTurk
  validation batches and of accounts trusted on the task, and every decision on a
  gold item. Researchers' counted decisions and gold items are the known truths
  (anchors); no weight exceeds what the validator's own answers on anchors support
  (``reliability_model.anchored``: a newcomer's with none, a little more with a few),
  however consistently a group agrees with itself. Strata: whether the example fooled the
  model, so that writers of model-fooling examples (more often wrong) get a prior
  of their own.
- **When it is refitted.** By a job (``annotation.refit_reliability``), never inside
  the request that cast a vote: after ``RELIABILITY_REFIT_VOTES`` new counted votes on
  an adaptive task (queued once the vote commits; without a broker, on the process's
  background job thread), and by beat every ``RELIABILITY_REFIT_SECONDS`` for every
  task with new votes (fixed-policy tasks too, so that their researchers see the
  estimates before they switch). What is new comes from the rounds' ``counted_votes``
  counters against the last fit's count, not from counting votes. A fit reads every
  vote of the task; ``bench/validation.py`` measures what the EM costs. Between fits a
  new validator counts at the prior.
- **What a fit changes.** Only the estimates. A decided example is never decided
  again by a refit: decisions are taken at vote time, under the example's row lock,
  and only a researcher changes one afterwards.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.db import transaction
from django.db.models import FilteredRelation, Q
from django.utils import timezone

from core import celery_names
from jobs.engine import send_task_in_background
from tasks.models import Task

from . import counters, trust
from . import reliability_model as R
from .models import AnnotationSession, Example, ReliabilityFit, Validation, ValidatorReliability

log = logging.getLogger(__name__)

DECISIONS = [Validation.Label.CORRECT, Validation.Label.INCORRECT]


def stratum(example: Example) -> str:
    """The prior an example's writer gets: whether the example fooled the model."""
    if example.fooled is None:
        return "no_model"
    return "fooled" if example.fooled else "not_fooled"


def rule(task: Task) -> R.Rule:
    config = task.parsed_config.validation
    return R.Rule(target_confidence=float(config["target_confidence"]), min_votes=int(config["min_votes"]),
                  max_votes=int(config["max_votes"]))


def counted_votes(task: Task):
    """The task's counted decisions by validators who were not deciding as researchers."""
    return Validation.objects.filter(example__task=task, example__source=Example.Source.ANNOTATION,
                                     counted=True, mode=Validation.Mode.USER, label__in=DECISIONS)


def learning_votes(task: Task) -> list[tuple]:
    """The votes the fit learns from, as (example, validator, label, decided_at, fooled):
    only those it has reason to trust. Counted decisions by validators of a confirmed
    MTurk validation batch or by accounts that earned trust on the task
    (``trust.standings``), and every decision on a gold item (checked against the
    researchers' verdict, an anchor). Other votes are stored and shown, but a ring of
    accounts that vote together on their own examples teaches the fit nothing."""
    fields = ("example_id", "validator_id", "label", "decided_at", "example__fooled")
    counted = list(counted_votes(task).values_list(*fields, "session__mturk_assignment_id", "session__mode",
                                                   "session__provisional"))
    in_batches = {validator for _e, validator, _l, _d, _f, assignment, mode, provisional in counted
                  if assignment and mode == AnnotationSession.Mode.VALIDATE and not provisional}
    others = trust.standings(task, {row[1] for row in counted} - in_batches)
    trusted = in_batches | {validator for validator, record in others.items() if record.trusted}
    rows = [row[:5] for row in counted if row[1] in trusted]
    rows += list(Validation.objects.filter(task=task, gold_agrees__isnull=False, label__in=DECISIONS,
                                           mode=Validation.Mode.USER).values_list(*fields))
    return rows


def _as_reliability(row: ValidatorReliability) -> R.Reliability:
    return R.Reliability(row.s_hits, row.s_misses, row.t_hits, row.t_misses, votes=row.votes)


def reliabilities(task: Task, validator_ids) -> dict[int, R.Reliability]:
    """The stored estimate of each of ``validator_ids`` on ``task``; newcomers at the prior."""
    ids = list(validator_ids)
    stored = {row.validator_id: _as_reliability(row)
              for row in ValidatorReliability.objects.filter(task=task, validator_id__in=ids)}
    return {pk: stored.get(pk) or R.Reliability.newcomer() for pk in ids}


def prior_right(task: Task, example: Example) -> float:
    fit_row = ReliabilityFit.objects.filter(task=task).only("prior_right").first()
    if fit_row is None:
        return R.DEFAULT_PRIOR.mean_right
    return float(fit_row.prior_right.get(stratum(example), R.DEFAULT_PRIOR.mean_right))


def posterior(example: Example) -> tuple[float, int]:
    """P(the writer is right) from the example's counted votes, and how many there are.
    A flag is weighed like an "incorrect": evidence, by its validator's reliability,
    that the example is not right as written."""
    cast = list(Validation.objects.filter(example=example, counted=True, mode=Validation.Mode.USER,
                                          label__in=[*DECISIONS, Validation.Label.FLAGGED])
                .values_list("validator_id", "label"))
    known = reliabilities(example.task, {validator for validator, _ in cast})
    p = R.posterior_right(prior_right(example.task, example),
                          [(known[validator], label == Validation.Label.CORRECT) for validator, label in cast])
    return p, len(cast)


def decision_state(example: Example) -> dict:
    """How ``example`` is being decided, for its author and the task's researchers:
    the policy, the counted votes and, for an adaptive task, the posterior (as
    stored at the last vote) against the rule."""
    config = example.task.parsed_config
    counted = example.validations_correct + example.validations_incorrect
    if not config.adaptive_validation:
        return {"policy": "fixed", "counted_votes": counted, "posterior_right": None, "prior_right": None,
                "target_confidence": None, "min_votes": None, "max_votes": None,
                "matching_needed": config.num_matching_validations}
    adaptive = rule(example.task)
    return {"policy": "adaptive", "counted_votes": counted, "posterior_right": example.decision_posterior,
            "prior_right": prior_right(example.task, example), "target_confidence": adaptive.target_confidence,
            "min_votes": adaptive.min_votes, "max_votes": adaptive.max_votes, "matching_needed": None}


def is_known(task: Task, user) -> bool:
    """Whether ``user``'s reliability on ``task`` rests on at least RELIABILITY_KNOWN_VOTES votes."""
    return ValidatorReliability.objects.filter(task=task, validator=user,
                                               votes__gte=settings.RELIABILITY_KNOWN_VOTES).exists()


def refit(task: Task) -> ReliabilityFit:
    """Fit the task's reliability model to all its votes now and store it (one fit at
    a time per task: a second caller waits for the first and then fits again only if
    votes came in meanwhile)."""
    started = time.perf_counter()
    with transaction.atomic():
        ReliabilityFit.objects.get_or_create(task=task)
        fit_row = ReliabilityFit.objects.select_for_update().get(task=task)
        total = counters.task_totals(task)["counted_votes"]  # what triggers a refit: see votes_since_fit
        rows = learning_votes(task)
        newest = max((decided for _e, _v, _l, decided, _f in rows if decided), default=None)
        if fit_row.fitted_at and fit_row.votes == total and (newest is None or newest <= fit_row.fitted_at):
            return fit_row  # nothing new since the last fit
        anchored = (Example.objects.filter(task=task, validations__mode=Validation.Mode.OWNER,
                                           validations__label__in=DECISIONS, validations__counted=True,
                                           validation_status__in=[Example.ValidationStatus.VERIFIED,
                                                                  Example.ValidationStatus.REJECTED])
                    .values_list("pk", "validation_status", "fooled").distinct())
        anchors = {pk: status == Example.ValidationStatus.VERIFIED for pk, status, _ in anchored}
        anchors.update({pk: verdict == Validation.Label.CORRECT
                        for pk, verdict in gold_items(task).values_list("pk", "gold_verdict")})
        strata = {pk: _stratum_of(fooled) for pk, _, fooled in anchored}
        strata.update({example: _stratum_of(fooled) for example, _v, _l, _d, fooled in rows})
        votes = [R.Vote(example, validator, label == Validation.Label.CORRECT)
                 for example, validator, label, _d, _f in rows]
        fit_started = time.perf_counter()
        fitted = R.fit(votes, anchors=anchors, strata=strata)
        fit_seconds = time.perf_counter() - fit_started
        # No weight above what the validator's answers on anchors support (a newcomer's
        # without any): the EM also learns from unchecked examples, where a group that
        # votes together looks reliable whatever the truth.
        supported = R.anchored(votes, anchors)
        newcomer = R.Reliability.newcomer()
        for validator, rel in list(fitted.reliabilities.items()):
            fitted.reliabilities[validator] = R.capped(rel, supported.get(validator, newcomer))
        overall = fitted.overall_prior_right
        intervals = R.accuracy_intervals(fitted.reliabilities, overall, seed=task.pk)
        now = timezone.now()
        stored = [
            ValidatorReliability(
                task=task, validator_id=validator, s_hits=rel.s_hits, s_misses=rel.s_misses,
                t_hits=rel.t_hits, t_misses=rel.t_misses, votes=rel.votes, sensitivity=rel.sensitivity,
                specificity=rel.specificity, accuracy=rel.accuracy(overall), accuracy_low=intervals[validator][0],
                accuracy_high=intervals[validator][1], weight=rel.strength, fitted_at=now)
            for validator, rel in fitted.reliabilities.items()]
        ValidatorReliability.objects.bulk_create(
            stored, update_conflicts=True, unique_fields=["task", "validator"],
            update_fields=["s_hits", "s_misses", "t_hits", "t_misses", "votes", "sensitivity", "specificity",
                           "accuracy", "accuracy_low", "accuracy_high", "weight", "fitted_at"])
        fit_row.fitted_at, fit_row.votes, fit_row.anchors = now, total, len(anchors)
        fit_row.validators, fit_row.iterations, fit_row.converged = len(stored), fitted.iterations, fitted.converged
        fit_row.prior_right = {str(k): v for k, v in fitted.prior_right.items()}
        fit_row.overall_prior_right, fit_row.fit_seconds = overall, fit_seconds
        fit_row.seconds = time.perf_counter() - started
        fit_row.save()
    log.info("reliability of %s: %d votes, %d validators, %d anchors, %d EM iterations, %.3f s",
             task.slug, len(votes), len(stored), len(anchors), fitted.iterations, fit_row.seconds)
    return fit_row


def gold_items(task: Task):
    return Example.objects.filter(task=task).exclude(gold_verdict="")


def _stratum_of(fooled) -> str:
    return "no_model" if fooled is None else ("fooled" if fooled else "not_fooled")


def votes_since_fit(task: Task) -> int:
    """Counted votes on ``task`` that its last fit did not read: the rounds' counters
    (``counters.task_totals``) against the fit's count, never a count of the votes."""
    fitted = ReliabilityFit.objects.filter(task=task).values_list("votes", flat=True).first() or 0
    return max(0, counters.task_totals(task)["counted_votes"] - fitted)


def refit_when_due(task: Task) -> None:
    """After a counted vote on an adaptive task: queue a refit once enough new votes
    came in since the last one (after the vote commits). Never inside the request:
    without a broker it goes to the process's background job thread."""
    if votes_since_fit(task) >= settings.RELIABILITY_REFIT_VOTES:
        transaction.on_commit(lambda: _send_refit(task.pk))


def _send_refit(task_id: int) -> None:
    try:
        send_task_in_background(celery_names.REFIT_RELIABILITY, task_id)
    except Exception:  # the vote is stored already; the beat's refit comes later
        log.exception("could not refit the reliability of task %s now", task_id)


def tasks_due_for_refit():
    """Tasks with counted votes their last fit did not read (for the beat): a few
    counter rows per task. Fixed-policy tasks too: their researchers see the
    estimates, and the cost forecast of switching."""
    return [task for task in Task.objects.order_by("pk") if votes_since_fit(task) > 0]


def validator_rows(task: Task):
    """The task's validators with their estimates, most votes first (researchers only)."""
    return (ValidatorReliability.objects.filter(task=task).select_related("validator")
            .order_by("-votes", "validator_id"))


def spammer_like(task: Task, max_weight: float = 0.2):
    """Validators whose votes carry next to no evidence (an estimated weight below
    ``max_weight``, on at least RELIABILITY_KNOWN_VOTES votes): always "correct", or at
    random. The crowd's quality block reads this for validation batches."""
    return validator_rows(task).filter(Q(weight__lt=max_weight), votes__gte=settings.RELIABILITY_KNOWN_VOTES)


FORECAST_HISTORY = 2000  # the most recent decided examples a forecast replays


def validation_forecast(task: Task) -> dict:
    """What validating one example costs under the task's policy, from its history.

    The most recent ``FORECAST_HISTORY`` examples that validators (not researchers)
    decided are replayed, each with its counted votes in the order they came,
    through the task's rule: ``fixed`` stops at ``num_matching_validations``
    matching votes; ``adaptive`` at the posterior the current fit gives (an example
    whose votes run out undecided would have gone to a researcher). Also: how often
    a written example fooled the model, and how often a decided fooling example was
    verified."""
    config = task.parsed_config
    totals = counters.task_totals(task)  # collected examples: counters, not a count
    collected, fooled = totals["collected"], totals["fooled"]
    decided_fooling_n = totals["verified_fooled"] + totals["rejected_fooled"]
    verified_fooling = totals["verified_fooled"]
    written = Example.objects.filter(task=task, source=Example.Source.ANNOTATION, retracted=False)
    # The newest decided examples (an index on the task's updated_at, walked until enough
    # are found), each checked by a join for a researcher's decision.
    decided = (written.filter(validation_status__in=[Example.ValidationStatus.VERIFIED,
                                                     Example.ValidationStatus.REJECTED])
               .annotate(by_researcher=FilteredRelation("validations", condition=Q(
                   validations__mode=Validation.Mode.OWNER) & ~Q(validations__label="")))
               .filter(by_researcher__isnull=True).order_by("-updated_at")
               .values_list("pk", "fooled")[:FORECAST_HISTORY])
    history = dict(decided)
    sequences: dict[int, list[tuple[int, bool]]] = {pk: [] for pk in history}
    for example_id, validator_id, label in (counted_votes(task).filter(example_id__in=list(history))
                                            .order_by("decided_at", "pk")
                                            .values_list("example_id", "validator_id", "label")):
        sequences[example_id].append((validator_id, label == Validation.Label.CORRECT))
    used, escalated = [], 0
    if config.adaptive_validation:
        adaptive = rule(task)
        fit_row = ReliabilityFit.objects.filter(task=task).first()
        priors = fit_row.prior_right if fit_row else {}
        known = reliabilities(task, {v for votes in sequences.values() for v, _ in votes})
        for example_id, votes in sequences.items():
            prior = float(priors.get(_stratum_of(history[example_id]), R.DEFAULT_PRIOR.mean_right))
            cast, outcome = [], None
            for validator, says in votes:
                cast.append((known[validator], says))
                outcome = R.decide(R.posterior_right(prior, cast), len(cast), adaptive)
                if outcome is not None:
                    break
            if outcome in (None, R.ESCALATED):
                escalated += 1
            used.append(len(cast))
    else:
        needed = config.num_matching_validations
        for votes in sequences.values():
            yes = no = n = 0
            for _validator, says in votes:
                n, yes, no = n + 1, yes + says, no + (not says)
                if yes >= needed or no >= needed:
                    break
            used.append(n)
    return {
        "policy": config.validation["policy"],
        "history": len(used),
        "validations_per_example": sum(used) / len(used) if used else None,
        "to_researchers": escalated / len(used) if used else None,
        "collected": collected,
        "fooled_share": fooled / collected if collected else None,
        "verified_share_of_fooling": verified_fooling / decided_fooling_n if decided_fooling_n else None,
    }
