"""A ring that knows the gold, played out against the platform's own services, from the
attacker's side (issue 49 §4).

Three aged accounts at three addresses (so no same-person rule links them) share what
they know of the gold items' verdicts and a script. Every gold item they know, they
answer right; every other item they take for one that pays, and there they lie
together: "correct" on their accomplice's mislabelled paid examples, "incorrect" on
honest writers' right ones. Beside them, the task's own validators (a researcher
vouched for them, and each answered a few gold items) tell the truth. Everything runs
through the services the API calls: the queue serves (``serving.next_for``),
answers are given blind and then decided, and the reliability fit is refitted as the
beat does. The task keeps its default settings.

What the ring knows of the gold (``all``, ``some``: half the items, ``none``) and
how many honest validators there are are the parameters: whatever they are, the ring
verifies no mislabelled paid example, rejects no right one, and no validator's weight
exceeds what their answers on gold items support."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from annotation import reliability, serving, sessions, trust, validation
from annotation import reliability_model as R
from annotation.models import AnnotationSession, Example, Validation, ValidatorReliability

from .test_trust import account, write

pytestmark = pytest.mark.django_db

RING = 3
GOLD_ITEMS = 24  # half with the writer right, half wrong
RING_GOLD_ANSWERS = 20  # as many as the trust rule asks for (validator_trust.min_answers)
HONEST_GOLD_ANSWERS = 5
PAID = {"honest": 8, "accomplice": 4}
REFIT_EVERY = 15  # counted votes between the beat's refits
TURNS = 12  # rounds in which every validator asks the queue once


@dataclass
class Played:
    """What the users' votes did to the paid examples."""

    verified_mislabelled: int = 0  # the ring's goal, one way
    rejected_right: int = 0  # and the other
    decided: int = 0
    correct: int = 0
    votes_on_decided: int = 0
    escalated: int = 0
    pending: int = 0

    @property
    def votes_per_decision(self) -> float:
        return self.votes_on_decided / self.decided if self.decided else 0.0


def flipped(label: str) -> str:
    return "negative" if label == "positive" else "positive"


def answer(user, example: Example, says_right: bool) -> None:
    """A blind answer (the writer's label, or the other one), then the decision that goes with it."""
    validation.give_blind_answer(example.pk, user, {"label": example.target["label"] if says_right
                                                    else flipped(example.target["label"])})
    validation.validate_example(example.pk, user, label="correct" if says_right else "incorrect")


def writes_paid(task, writer, *, label: str, text: str) -> Example:
    """An example written in the writer's MTurk assignment (it pays when verified)."""
    hit = (AnnotationSession.objects.filter(user=writer, task=task).exclude(mturk_assignment_id="").first()
           or sessions.start_session(writer, task, mturk_assignment_id=f"A-{writer.username}",
                                     mode=AnnotationSession.Mode.CREATE))
    return write(task, writer, label=label, text=text, session=hit)


def play(task, researcher, *, knows: str, honest: int) -> tuple[Played, list]:
    """The ring against ``honest`` honest validators on ``task``; returns what happened
    to the paid examples, and the validators (the ring's first)."""
    rng = random.Random(f"ring:{knows}:{honest}")
    gold_writer = account("gold-writer", "203.0.113.50")
    gold = []
    for i in range(GOLD_ITEMS):
        right = i % 2 == 0
        written = write(task, gold_writer, label="positive" if right else "negative", text=f"A fine film, gold {i}")
        gold.append(validation.mark_gold(written.pk, researcher, "correct" if right else "incorrect"))
    # "some": the first half, where the writer is right on every other item as on the rest.
    known = {"all": {g.pk for g in gold}, "some": {g.pk for g in gold[:GOLD_ITEMS // 2]}, "none": set()}[knows]

    members = [account(f"ring{i}", f"192.0.2.{10 + i}") for i in range(RING)]
    pool = [account(f"honest{i}", f"198.51.100.{10 + i}") for i in range(honest)]
    for user in pool:
        trust.vouch(task, user, researcher)
        for item in rng.sample(gold, HONEST_GOLD_ANSWERS):
            serving.assign(item, user)
            answer(user, item, says_right=item.gold_verdict == "correct")

    def says_right(user, example: Example) -> bool:
        """What ``user`` says: is the writer right?"""
        truth = example.gold_verdict == "correct" if example.gold_verdict else example.target["label"] == "positive"
        if user in members:
            return truth if example.pk in known else not truth  # lies on anything it takes for paid
        return truth

    # The ring earns what trust gold items give: each member answers as many as the rule
    # asks for. (Served one at a time; a patient script gets each in the end, waiting out
    # the claim on whatever else it was served.)
    for member in members:
        for item in rng.sample(gold, RING_GOLD_ANSWERS):
            serving.assign(item, member)
            answer(member, item, says_right(member, item))
    reliability.refit(task)

    writers = [account(f"writer{i}", f"203.0.113.{60 + i}") for i in range(2)]
    accomplice = account("accomplice", "203.0.113.70")
    paid = [writes_paid(task, writers[i % 2], label="positive", text=f"A fine film {i}")
            for i in range(PAID["honest"])]
    paid += [writes_paid(task, accomplice, label="negative", text=f"A fine film, mislabelled {i}")
             for i in range(PAID["accomplice"])]

    validators = [*members, *pool]
    since_refit = 0
    for _turn in range(TURNS):
        for user in rng.sample(validators, len(validators)):
            example = serving.next_for(task, user)
            if example is None:
                continue
            answer(user, example, says_right(user, example))
            since_refit += 1
            if since_refit >= REFIT_EVERY:
                reliability.refit(task)
                since_refit = 0
        if not Example.objects.filter(pk__in=[e.pk for e in paid], validation_status="pending").exists():
            break
    reliability.refit(task)

    played = Played()
    for example in Example.objects.filter(pk__in=[e.pk for e in paid]):
        right = example.target["label"] == "positive"
        status = example.validation_status
        if status in (Example.ValidationStatus.VERIFIED, Example.ValidationStatus.REJECTED):
            played.decided += 1
            played.correct += (status == Example.ValidationStatus.VERIFIED) == right
            played.votes_on_decided += example.validations_correct + example.validations_incorrect
            played.verified_mislabelled += status == Example.ValidationStatus.VERIFIED and not right
            played.rejected_right += status == Example.ValidationStatus.REJECTED and right
        elif status == Example.ValidationStatus.ESCALATED:
            played.escalated += 1
        else:
            played.pending += 1
    return played, validators


def anchored_support(task) -> dict[int, R.Reliability]:
    """What each validator's decisions on gold items support, read from the votes as
    stored (not from the fit): the Beta posterior of the model's prior and those answers."""
    votes = [R.Vote(example, validator, label == Validation.Label.CORRECT) for example, validator, label in
             Validation.objects.filter(task=task, gold_agrees__isnull=False, mode=Validation.Mode.USER,
                                       label__in=[Validation.Label.CORRECT, Validation.Label.INCORRECT])
             .values_list("example_id", "validator_id", "label")]
    anchors = {pk: verdict == "correct" for pk, verdict in
               Example.objects.filter(task=task).exclude(gold_verdict="").values_list("pk", "gold_verdict")}
    return R.anchored(votes, anchors)


@pytest.mark.parametrize(("knows", "honest"), [("all", 3), ("all", 6), ("some", 3), ("none", 3)])
def test_a_ring_that_knows_the_gold_decides_nothing(demo_tasks, researcher, monkeypatch, production_steps, knows,
                                                    honest):
    task = demo_tasks["sentiment"]
    config = task.parsed_config
    assert config.validation["policy"] == "adaptive" and config.validator_trust["decides"] == "all"  # the defaults
    monkeypatch.setattr(serving, "_draws", random.Random(f"draws:{knows}:{honest}"))  # a replayable queue

    played, validators = play(task, researcher, knows=knows, honest=honest)

    assert played.verified_mislabelled == 0, played
    assert played.rejected_right == 0, played
    # The honest validators still decide every paid example.
    assert played.pending == 0 and played.escalated == 0 and played.correct == played.decided, played
    # No weight above what the validator's answers on gold items support, either way.
    supported = anchored_support(task)
    newcomer = R.Reliability.newcomer()
    for row in ValidatorReliability.objects.filter(task=task, validator__in=validators):
        fitted = R.Reliability(row.s_hits, row.s_misses, row.t_hits, row.t_misses)
        limit = supported.get(row.validator_id, newcomer)
        for says in (True, False):
            assert abs(fitted.weight(says)) <= abs(limit.weight(says)) + 1e-9, (row.validator.username, says)


# --- the ring's tools: the queue's head, and asking again --------------------------------


def pending_fooling(task, writer, n: int) -> list[Example]:
    return [writes_paid(task, writer, label="positive", text=f"Waiting {i}") for i in range(n)]


def test_accounts_asking_at_the_same_moment_do_not_land_on_one_example(demo_tasks, monkeypatch):
    """The queue's head was everyone's to predict: accounts of one script that asked at
    once were all served the same example, and two of them decide a paid one. Now each
    is drawn among the most urgent examples."""
    task = demo_tasks["sentiment"]
    monkeypatch.setattr(serving, "_draws", random.Random("same moment"))
    waiting = pending_fooling(task, account("writer", "203.0.113.80"), 20)
    accounts = [account(f"ring{i}", f"192.0.2.{20 + i}") for i in range(12)]
    served = [serving.next_for(task, user).pk for user in accounts]
    assert set(served) <= {example.pk for example in waiting}
    assert len(set(served[:3])) > 1  # the first three are not all on one
    assert len(set(served)) >= 6  # spread over the waiting examples (about 9 of 20 expected)


def test_asking_again_serves_the_same_example_until_the_claim_lapses(demo_tasks, researcher, monkeypatch):
    """A script that asks the queue again and again, answering only what it wants (a gold
    item it knows, its accomplice's example), is served the same example every time: a
    fresh draw costs waiting out the claim."""
    from datetime import timedelta

    from django.utils import timezone

    from annotation.models import ValidationClaim

    task = demo_tasks["sentiment"]
    monkeypatch.setattr(serving, "_draws", random.Random("asking again"))
    gold_writer = account("gold-writer", "203.0.113.81")
    for i in range(5):
        validation.mark_gold(write(task, gold_writer, text=f"Gold {i}").pk, researcher, "correct")
    pending_fooling(task, account("writer", "203.0.113.82"), 10)
    member = account("ring0", "192.0.2.30")
    first = serving.next_for(task, member)
    assert all(serving.next_for(task, member).pk == first.pk for _ in range(60))
    # Once answered, or once the claim lapses, the next one is drawn.
    ValidationClaim.objects.filter(validator=member).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert serving.next_for(task, member) is not None
