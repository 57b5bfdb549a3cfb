"""Validation: other people check that an example is labelled right.

With blind validation (the task config's ``blind_validation``, on by default) a
validator first gives their own answer, which is stored on their Validation;
only then does the server show them the writer's answer, and only then may they
decide (correct, incorrect, flagged). Blind items carry neither the writer's
answer nor the model's prediction nor whether it fooled the model. The example's
author and the task's researchers may always see the writer's answer, and a
researcher's decision is final at once.

Validators are assigned, not self-chosen: a blind answer or a decision is accepted
only on an example the validation queue served to that validator (``serving``: what
is served next, and the claims; any other id gets 409 ``not_assigned``). The task's
researchers are the exception: they may decide any example.

An example is verified, rejected or flagged when ``num_matching_validations``
counted user decisions agree (the ``fixed`` policy, the default); under the task
config's ``adaptive`` policy, as soon as the posterior that the writer is right (or
wrong), from the counted votes weighed by each validator's estimated reliability
(``services.reliability``), reaches the target, and by a researcher after
``max_votes`` votes without a decision (``escalated``). Either way the counters and
the status move under the example's row lock, and a decided example changes only by
a researcher's decision.
Which decisions count is ``trust``'s rule: accounts that share an address with the
writer may not validate at all; a decision made in a provisional session (an
MTurk assignment not yet verified against MTurk) counts only once
``confirm_session`` runs, so a worker id typed into a URL decides nothing; a new
account's decisions, and untrusted ones on an example that can earn money, are
stored and shown but count for nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from core.errors import Conflict, Forbidden, InvalidInput, NotFound
from tasks.models import Context
from tasks.roles import is_researcher

from . import gold, onboarding, record, reliability, sessions, trust
from .examples import MAX_REASON_LENGTH
from .models import AnnotationSession, Example, Validation
from .reliability_model import ESCALATED, decide
from .serving import check_assigned

OWNER_OUTCOME = {
    Validation.Label.CORRECT: Example.ValidationStatus.VERIFIED,
    Validation.Label.INCORRECT: Example.ValidationStatus.REJECTED,
    Validation.Label.FLAGGED: Example.ValidationStatus.FLAGGED,
}
COUNTER = {
    Validation.Label.CORRECT: "validations_correct",
    Validation.Label.INCORRECT: "validations_incorrect",
    Validation.Label.FLAGGED: "validations_flagged",
}


def may_see_target(example: Example, user, *, blind_answer_given: bool) -> bool:
    """Whether ``user`` may see the writer's answer (and the model's) on ``example``."""
    if not example.task.parsed_config.blind_validation:
        return True
    return blind_answer_given or example.annotator_id == user.pk or is_researcher(user, example.task)


def _locked_example(example_id: int) -> Example:
    example = (Example.objects.select_for_update(of=("self",)).select_related("task", "context", "session")
               .filter(pk=example_id).first())
    if example is None:
        raise NotFound("No such example.")
    return example


def _check_can_validate(example: Example, user) -> None:
    onboarding.require_passed(example.task, user)  # 403 onboarding_required before anything else
    if example.annotator_id == user.pk:
        raise Forbidden("You cannot validate your own example.")
    if not is_researcher(user, example.task) and trust.counts_as_writer(user, example):
        raise Forbidden("You cannot validate this example: your account was seen at an address its writer "
                        "uses, so it counts as the writer's.")
    if example.retracted:
        raise Conflict("The example was retracted by its author.")
    if example.source != Example.Source.ANNOTATION:
        raise Conflict("Imported examples are not validated on the platform.")
    if example.flagged and not is_researcher(user, example.task):
        raise Conflict("The example is flagged and waits for the task's researchers.")


@transaction.atomic
def give_blind_answer(example_id: int, user, answer) -> Validation:
    """Store ``user``'s own answer to the example, before they see the writer's."""
    example = _locked_example(example_id)
    _check_can_validate(example, user)
    config = example.task.parsed_config
    context_fields = example.context.fields if example.context_id else None
    answer = config.clean_target(answer, context_fields, field="answer", need_start=False)
    existing = Validation.objects.filter(example=example, validator=user).first()
    if existing is not None:
        raise Conflict("You already answered this example; your first answer stands."
                       if existing.blind_answer is not None else "You have already validated this example.")
    check_assigned(example, user, answered=False)  # before the state: an unserved id tells nothing of it
    if (example.validation_status != Example.ValidationStatus.PENDING and not example.gold_verdict
            and not is_researcher(user, example.task)):
        raise Conflict("This example has been decided already.")
    try:
        with transaction.atomic():
            return Validation.objects.create(
                example=example, validator=user, blind_answer=answer,
                blind_agrees=config.answers_agree(answer, example.target),
                mode=Validation.Mode.OWNER if is_researcher(user, example.task) else Validation.Mode.USER,
            )
    except IntegrityError as exc:  # the same user, twice at once
        raise Conflict("You already answered this example; your first answer stands.") from exc


def reveal_target(example: Example, user) -> dict:
    """The writer's answer, for a validator who has given their own (or its author,
    or the task's researchers)."""
    given = Validation.objects.filter(example=example, validator=user, blind_answer__isnull=False).exists()
    if not may_see_target(example, user, blind_answer_given=given):
        raise Forbidden("Give your own answer first (blind validation): the writer's answer is shown after it.")
    return example.target


def _decide(example: Example, needed: int) -> str:
    """The validation status after a user decision changed the counters."""
    if example.validations_flagged >= needed:
        return Example.ValidationStatus.FLAGGED
    if example.validations_correct >= needed:
        return Example.ValidationStatus.VERIFIED
    if example.validations_incorrect >= needed:
        return Example.ValidationStatus.REJECTED
    return example.validation_status


@dataclass
class Validated:
    example: Example
    validation: Validation
    session: AnnotationSession


def validate_example(example_id: int, user, *, label: str, reason: str = "",
                     session: AnnotationSession | None = None,
                     within_transaction: Callable[[Validated], None] | None = None) -> Validated:
    """``user`` decides whether the writer's label is right.

    ``within_transaction(validated)`` runs inside the transaction after the writes;
    if it raises, nothing is stored."""
    if label not in COUNTER:
        raise InvalidInput.field("label", f"{label!r} is not one of {sorted(COUNTER)}.")
    if not isinstance(reason, str) or len(reason) > MAX_REASON_LENGTH or "\x00" in reason:
        raise InvalidInput.field("reason", f"Must be text of at most {MAX_REASON_LENGTH} characters.")
    if session is not None:
        problem = sessions.mode_problem(session, "validate")
        if problem:
            raise Forbidden(problem)
    with transaction.atomic():
        example = _locked_example(example_id)
        _check_can_validate(example, user)
        owner = is_researcher(user, example.task)
        existing = Validation.objects.filter(example=example, validator=user).first()
        if existing is not None:
            existing.example = example  # the locked row: its save counts on it
        if existing is not None and existing.label:
            raise Conflict("You have already validated this example.")
        on_gold = bool(example.gold_verdict) and not owner
        check_assigned(example, user, answered=existing is not None)  # before the state (see give_blind_answer)
        if not owner and not on_gold and example.validation_status != Example.ValidationStatus.PENDING:
            raise Conflict("This example has been decided already.")
        if not may_see_target(example, user, blind_answer_given=existing is not None):
            raise Conflict("Give your own answer first (blind validation): "
                           f"POST /api/examples/{example.pk}/blind-answer/, then decide.")
        mode = Validation.Mode.OWNER if owner else Validation.Mode.USER
        now = timezone.now()
        session = sessions.current_session(user, example.task, session)
        because = trust.why_not_counted(example, user, session)
        told = ""
        gold_agrees = None
        if on_gold:  # evidence about the validator: decides nothing, told as any other decision
            told, because, gold_agrees = because, Validation.NotCounted.GOLD, label == example.gold_verdict
        counted = not because
        if existing is not None:
            existing.label, existing.mode, existing.reason, existing.decided_at = label, mode, reason, now
            existing.session, existing.counted, existing.not_counted_because = session, counted, because
            existing.gold_agrees, existing.shown_not_counted_because = gold_agrees, told
            existing.save(update_fields=["label", "mode", "reason", "decided_at", "session", "counted",
                                         "not_counted_because", "gold_agrees", "shown_not_counted_because"])
            validation = existing
        else:
            try:
                with transaction.atomic():
                    validation = Validation.objects.create(example=example, validator=user, label=label,
                                                           mode=mode, reason=reason, decided_at=now,
                                                           session=session, counted=counted,
                                                           not_counted_because=because, gold_agrees=gold_agrees,
                                                           shown_not_counted_because=told)
            except IntegrityError as exc:  # a concurrent duplicate from the same user
                raise Conflict("You have already validated this example.") from exc
        if counted:
            _count(example, label, owner=owner)
        sessions.bump(session, validations_done=1)
        if not owner:
            record.close_step(example.task, user)
        validated = Validated(example, validation, session)
        if within_transaction is not None:
            within_transaction(validated)
    return validated


def _count(example: Example, label: str, *, owner: bool) -> None:
    """Add one decision (its Validation already stored) to the (locked) example's
    counters and decide its status by the task's policy."""
    field = COUNTER[label]
    setattr(example, field, getattr(example, field) + 1)
    config = example.task.parsed_config
    if owner:
        example.validation_status = OWNER_OUTCOME[label]
    else:
        before = example.validation_status
        if config.adaptive_validation:
            outcome = _decide_adaptive(example)
            reliability.refit_when_due(example.task)
        else:
            outcome = _decide(example, config.num_matching_validations)
        example.validation_status = _paid_outcome(example, before, outcome)
    example.save(update_fields=[field, "validation_status", "decision_posterior", "updated_at"])


DECIDED_LABEL = {Example.ValidationStatus.VERIFIED: Validation.Label.CORRECT,
                 Example.ValidationStatus.REJECTED: Validation.Label.INCORRECT,
                 Example.ValidationStatus.FLAGGED: Validation.Label.FLAGGED}


def _paid_outcome(example: Example, before: str, outcome: str) -> str:
    """The users' outcome on an example that can earn money, under two more rules: it
    is decided only when the votes on the winning side come from at least two
    validators who are not one person (``trust.two_people``), whatever the posterior
    says; and users' flags do not settle it at $0: a flagged paid example goes to the
    researchers (escalated)."""
    if outcome == before or outcome not in DECIDED_LABEL or not trust.is_paid(example):
        return outcome
    side = (Validation.objects.filter(example=example, counted=True, mode=Validation.Mode.USER,
                                      label=DECIDED_LABEL[outcome]).values_list("validator_id", flat=True))
    if not trust.two_people(side):
        return before
    return Example.ValidationStatus.ESCALATED if outcome == Example.ValidationStatus.FLAGGED else outcome


def _decide_adaptive(example: Example) -> str:
    """The adaptive policy: verified or rejected once the posterior that the writer is
    right (or wrong) reaches the task's target after ``min_votes`` counted votes;
    escalated to the researchers after ``max_votes`` votes without a decision. A flag
    is weighed like an "incorrect" vote, by its validator's reliability (no count of
    flags decides by itself); a rejection carried mostly by flags flags the example."""
    example.decision_posterior, decisions = reliability.posterior(example)
    rule = reliability.rule(example.task)
    outcome = decide(example.decision_posterior, decisions, rule)
    if outcome == Example.ValidationStatus.REJECTED and example.validations_flagged > example.validations_incorrect:
        outcome = Example.ValidationStatus.FLAGGED  # not right, and mostly for being unanswerable
    if outcome is None and example.validations_total >= rule.max_votes:
        outcome = ESCALATED
    return outcome or example.validation_status


def confirm_session(session: AnnotationSession) -> int:
    """The provisional session's work is confirmed real: its decisions now count
    (by the rules of ``trust.why_not_counted``, now that MTurk vouches for the worker)
    on the examples still undecided (a decision that comes too late counts for
    nothing), and each example it wrote counts as a use of its context (and as fooling
    it, if it did: ``times_used``, ``times_fooled``, which steer what is served next, move
    only with confirmed work). Returns how many decisions counted; safe to call again."""
    counted = 0
    with transaction.atomic():
        if not AnnotationSession.objects.filter(pk=session.pk, provisional=True).update(provisional=False):
            session.provisional = False
            return 0  # confirmed already (by this call's twin): its work counted then
        session.provisional = False
        # What it wrote is collected from now on: counted, and served to validators.
        uses: dict[int, list[int]] = {}
        for example_id in (Example.objects.filter(session=session, provisional=True).order_by("pk")
                           .values_list("pk", flat=True)):
            example = _locked_example(example_id)
            example.provisional = False
            example.save(update_fields=["provisional", "updated_at"])
            if example.context_id is not None:
                used = uses.setdefault(example.context_id, [0, 0])
                used[0] += 1
                used[1] += example.fooled is True
        for context_id, (used, fooled) in sorted(uses.items()):
            Context.objects.filter(pk=context_id).update(times_used=F("times_used") + used,
                                                         times_fooled=F("times_fooled") + fooled)
        waiting = (Validation.objects.filter(session=session, counted=False,
                                             not_counted_because=Validation.NotCounted.PROVISIONAL)
                   .exclude(label="").select_related("validator").order_by("decided_at", "pk"))
        for validation in waiting.select_for_update(of=("self",)):
            example = _locked_example(validation.example_id)
            validation.example = example
            if example.validation_status != Example.ValidationStatus.PENDING or example.retracted:
                continue
            validation.not_counted_because = trust.why_not_counted(example, validation.validator, session)
            validation.counted = not validation.not_counted_because
            validation.save(update_fields=["counted", "not_counted_because"])
            if validation.counted:
                _count(example, validation.label, owner=False)
                counted += 1
        gold.tell_confirmed(session)
    return counted


def mark_gold(example_id: int, researcher, verdict: str) -> Example:
    """Make the example a gold item with ``verdict`` (the writer is right: "correct";
    wrong: "incorrect"), as ``researcher``'s decision on it. A researcher's earlier
    decision must agree; marking again with the same verdict changes nothing."""
    if verdict not in gold.VERDICTS:
        raise InvalidInput.field("verdict", f"{verdict!r} is not one of {list(gold.VERDICTS)}.")
    example = Example.objects.select_related("task", "round").filter(pk=example_id).first()
    if example is None:
        raise NotFound("No such example.")
    if not is_researcher(researcher, example.task):
        raise Forbidden("Only the task's researchers mark gold items.")
    if example.source != Example.Source.ANNOTATION or example.retracted:
        raise Conflict("Only examples written on the platform and not retracted can be gold items.")
    gold.check_never_public(example, verdict)
    if trust.counts_as_writer(researcher, example):
        raise Conflict("Your account counts as this example's writer (a shared address): another researcher "
                       "must make it a gold item.")
    with transaction.atomic():
        decided = (Validation.objects.filter(example=example, mode=Validation.Mode.OWNER, counted=True)
                   .exclude(label="")
                   .values_list("label", flat=True).first())
        if decided is not None and decided != verdict:
            raise Conflict(f"A researcher decided this example {decided!r} already; its gold verdict must agree.")
        if decided is None:
            if Validation.objects.filter(example=example, validator=researcher).exclude(label="").exists():
                raise Conflict("You validated this example as a user; a gold item needs a researcher's decision.")
            validate_example(example.pk, researcher, label=verdict)
        Example.objects.filter(pk=example.pk).update(gold_verdict=verdict)
    example.refresh_from_db()
    return example
