"""Whose votes decide an example: one person, one vote, and only votes the platform
has reason to trust.

- **An account is not a person.** Every account's addresses (sign-up, sign-in,
  writing, validating, a HIT arrival) are kept as keyed hashes (``AccountAddress``).
  Accounts that share one count as the same person: none of them may validate the
  others' examples, and the queue never serves them. An MTurk worker id is one
  account (``crowd.workers.identity_for``), so a worker is always their own writer.
  An arrival not yet confirmed as the worker's is an account of its own, whose votes
  count for nothing; once it joins the worker, a vote of its on their own example is
  dropped (``annotation.joining``).
  IPv6 addresses count by their /64 network, which one machine usually holds whole.
- **Which votes decide an example**: the task's researchers (at once), the MTurk
  workers of a validation batch once MTurk confirmed their assignment, and site
  accounts that have earned trust on the task or that a researcher vouches for
  (``standing``: the task config's ``validator_trust``). That holds for every
  example (``decides: "all"``, the default) or only for paid ones (``"paid"``).
  Anyone else's vote is stored and shown with ``not_counted_because =
  "untrusted"``; it moves no counter, so it neither decides the example nor moves
  the public verified error rate. A paid example needs two validators on the
  winning side who are not one person (``two_people``). A validator who fails the
  checked items (``failed_gold``) counts for nothing.
- **Nobody is paid on their own say-so.** A researcher may decide examples of
  accounts that count as them (a test of their own task), but on a paid example
  that decision is stored with ``not_counted_because = "same_person"``: it does
  not decide the example, and so does not pay it.
- **New accounts wait.** A site account's votes count only once the account is
  ``VALIDATOR_MIN_ACCOUNT_AGE`` seconds old: a time window cannot be bought in bulk.

Trust is earned against what the account could not have written or swayed: its
decisions on gold items (``gold``), and its blind answers on examples that
a researcher decided, or on paid examples that trusted votes decided without its own
vote; and only by agreeing more often than always giving one answer would. A blind
answer agrees with a decision when it agreed with the writer on a verified example,
or disagreed on a rejected one.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import timedelta
from itertools import combinations

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone
from django.utils.crypto import salted_hmac

from core.errors import Forbidden
from core.ratelimit import address_key
from tasks.models import Task
from tasks.roles import is_researcher

from . import record as checked
from .models import AccountAddress, AccountEmail, AnnotationSession, Example, Validation, VouchedValidator

NotCounted = Validation.NotCounted


def address_hash(address: str) -> str:
    """A keyed hash of the client address (IPv6 by its /64 network: ``address_key``, as
    every per-address limit counts it); "" for no address and for a loopback one, which is
    never a client's own (a try-out on the machine itself, or a proxy that hides its
    clients: ``NUM_PROXIES``)."""
    try:
        ip = ipaddress.ip_address((address or "").strip())
    except ValueError:
        return ""
    if ip.is_loopback or (ip.version == 6 and ip.ipv4_mapped is not None and ip.ipv4_mapped.is_loopback):
        return ""
    return salted_hmac("dynabench.annotation.account-address", address_key(str(ip)),
                       secret=settings.ADDRESS_HASH_KEY).hexdigest()


def record_address(user, address: str) -> None:
    """Remember that ``user`` was seen at ``address`` (one upsert)."""
    hashed = address_hash(address)
    if not hashed or user is None or not user.pk:
        return
    now = timezone.now()
    AccountAddress.objects.bulk_create(
        [AccountAddress(user=user, address_hash=hashed, first_seen_at=now, last_seen_at=now)],
        update_conflicts=True, unique_fields=["user", "address_hash"], update_fields=["last_seen_at"])


def same_person(user):
    """Ids of the accounts that count as ``user``: ``user`` and every account seen at one
    of their addresses (a subquery)."""
    theirs = AccountAddress.objects.filter(user=user).values("address_hash")
    return AccountAddress.objects.filter(address_hash__in=theirs).values("user")


def counts_as_writer(validator, example: Example) -> bool:
    """Whether ``validator`` is the example's writer, or an account that counts as them."""
    if example.annotator_id is None:
        return False
    if example.annotator_id == validator.pk:
        return True
    return same_person(validator).filter(user_id=example.annotator_id).exists()


def two_people(validator_ids) -> bool:
    """Whether ``validator_ids`` hold at least two accounts that are not one person (no
    address in common): a paid example is decided by users only so."""
    ids = set(validator_ids)
    if len(ids) < 2:
        return False
    seen: dict[int, set[str]] = {pk: set() for pk in ids}
    for user_id, hashed in AccountAddress.objects.filter(user_id__in=ids).values_list("user_id", "address_hash"):
        seen[user_id].add(hashed)
    return any(not (seen[a] & seen[b]) for a, b in combinations(sorted(ids), 2))


def is_paid(example: Example) -> bool:
    """Whether the example was written in an MTurk assignment (it can earn money)."""
    return bool(example.session_id and example.session.mturk_assignment_id)


def is_batch_validator(session: AnnotationSession | None) -> bool:
    """A confirmed MTurk assignment of a validation batch: MTurk vouches for the worker."""
    return bool(session is not None and session.mturk_assignment_id and not session.provisional
                and session.mode == AnnotationSession.Mode.VALIDATE)


@dataclass(frozen=True)
class Standing:
    """A validator's record on a task: answers on gold items and answers on examples
    that others decided afterwards (``reference_decisions``, the *reference* answers), how
    many agree with the truth, and how many a validator who always gave one answer (always
    "the writer is right", or always "wrong") would have got right.

    Trust needs both kinds. A gold item is shown to every validator and keeps its verdict,
    so its answer can be learnt and passed round a ring; a reference decision is made on
    an ordinary example after the answer was given, so nobody can know it in advance. A
    ring that knows every gold answer and lies on the examples that pay fails the second
    part and never decides anything."""

    answers: int
    agreeing: int
    min_answers: int
    min_agreement: float
    constant: int = 0  # what the better of the two constant answers would agree on
    vouched: bool = False  # a researcher of the task vouched for them
    reference_answers: int = 0  # of ``answers``: those on examples others decided afterwards
    reference_agreeing: int = 0
    min_reference_answers: int = 0

    @property
    def agreement(self) -> float | None:
        return self.agreeing / self.answers if self.answers else None

    @property
    def trusted(self) -> bool:
        return self.vouched or self.earned

    @property
    def earned(self) -> bool:
        return (self.answers >= self.min_answers and self.agreeing >= self.min_agreement * self.answers
                and self.agreeing > self.constant
                and self.reference_answers >= self.min_reference_answers
                and self.reference_agreeing >= self.min_agreement * self.reference_answers)

    def describe(self) -> str:
        if self.vouched:
            return "a researcher of the task vouched for you"
        if checked.shown_agreement(self.answers):
            said = f"{self.answers} answers on checked items, {self.agreement:.0%} agreeing"
        else:  # an agreement over a few items would say how each went
            said = (f"{self.answers} answers on checked items so far (your agreement is shown once "
                    f"{checked.shown_agreement_from()} are counted)")
        needs = (f"trust needs {self.min_answers} at {self.min_agreement:.0%}, and more than always "
                 "giving one answer would get")
        if self.min_reference_answers:
            needs += (f"; of them {self.min_reference_answers} at least on examples that others decided after "
                      f"your answer, at {self.min_agreement:.0%} too")
        steps = f"; your record moves every {checked.step()} decisions on the task" if checked.step() > 1 else ""
        return f"{said}; {needs}{steps}"


def reference_decisions(task: Task):
    """The task's examples decided by votes the validator could not have bought: a
    researcher's decision that counted (gold items among them), or a paid example's
    (decided only by trusted votes)."""
    by_researcher = Validation.objects.filter(example=OuterRef("pk"), mode=Validation.Mode.OWNER,
                                              counted=True).exclude(label="")
    return (Example.objects.filter(task=task, validation_status__in=[Example.ValidationStatus.VERIFIED,
                                                                     Example.ValidationStatus.REJECTED])
            .filter(Q(session__mturk_assignment_id__gt="") | Exists(by_researcher)))


def standing(task: Task, user) -> Standing:
    """``user``'s record on ``task`` against the task's ``validator_trust`` rule."""
    return standings(task, [user.pk])[user.pk]


STANDINGS_CHUNK = 500  # validators whose records one query reads


def standings(task: Task, user_ids) -> dict[int, Standing]:
    """Each of ``user_ids``' records on ``task`` (two queries per ``STANDINGS_CHUNK``):
    each answer on a gold item against its verdict, and each answer on a reference
    decision their own vote did not help decide, against that decision: their decision
    when they gave one (the vote that would have counted), else their blind answer."""
    rule = task.parsed_config.validator_trust
    verified, rejected = Example.ValidationStatus.VERIFIED, Example.ValidationStatus.REJECTED
    on_gold = Q(gold_agrees__isnull=False)
    not_gold = Q(gold_agrees__isnull=True)
    # A reference answer: not on a gold item (not even a blind answer alone: its verdict
    # can be known), and not a vote that counted (it could have swayed the decision it is
    # checked against); a decision, or a blind answer alone.
    reference = (not_gold & Q(example__gold_verdict="") & (Q(counted=False) | Q(label=""))
                 & (~Q(label="") | Q(blind_agrees__isnull=False)))
    decided_agrees = (Q(label=Validation.Label.CORRECT, example__validation_status=verified)
                      | Q(label=Validation.Label.INCORRECT, example__validation_status=rejected))
    blind_agrees = Q(label="") & (Q(blind_agrees=True, example__validation_status=verified)
                                  | Q(blind_agrees=False, example__validation_status=rejected))
    reference_agrees = not_gold & (decided_agrees | blind_agrees)
    ids = sorted(set(user_ids))
    found = {}
    for start in range(0, len(ids), STANDINGS_CHUNK):
        chunk = ids[start:start + STANDINGS_CHUNK]
        vouched = set(VouchedValidator.objects.filter(task=task, validator_id__in=chunk)
                      .values_list("validator_id", flat=True))
        records = {row["validator_id"]: row for row in (
            Validation.objects.filter(checked.in_record(), validator_id__in=chunk, task=task)
            .filter(on_gold | (reference & Q(example__in=reference_decisions(task))))
            .order_by().values("validator_id")
            .annotate(answers=Count("pk"),
                      agreeing=Count("pk", filter=Q(gold_agrees=True) | reference_agrees),
                      references=Count("pk", filter=not_gold),
                      references_agreeing=Count("pk", filter=reference_agrees),
                      right=Count("pk", filter=(Q(gold_agrees__isnull=False, example__gold_verdict="correct")
                                                | Q(gold_agrees__isnull=True,
                                                    example__validation_status=verified)))))}
        for pk in chunk:
            record = records.get(pk, {"answers": 0, "agreeing": 0, "right": 0, "references": 0,
                                      "references_agreeing": 0})
            answers, right = record["answers"], record["right"]
            found[pk] = Standing(answers, record["agreeing"], rule["min_answers"], float(rule["min_agreement"]),
                                 constant=max(right, answers - right), vouched=pk in vouched,
                                 reference_answers=record["references"],
                                 reference_agreeing=record["references_agreeing"],
                                 min_reference_answers=int(rule.get("min_reference_answers", 0)))
    return found


def vouch(task: Task, validator, researcher) -> VouchedValidator:
    """``researcher`` vouches for ``validator`` on ``task``: their votes count there (a
    researcher's decision)."""
    if not is_researcher(researcher, task):
        raise Forbidden("Only the task's researchers vouch for validators.")
    row, _ = VouchedValidator.objects.get_or_create(task=task, validator=validator,
                                                    defaults={"vouched_by": researcher})
    return row


def checked_record(task: Task, user) -> tuple[int, int]:
    """(decisions, agreeing): ``user``'s decisions on ``task`` that a researcher's
    verdict checks: on gold items, and on examples a researcher decided (a flag agrees
    only with a researcher's flag; on a gold item it never does). Flag-only voters are
    judged like any other."""
    verified, rejected, flagged = (Example.ValidationStatus.VERIFIED, Example.ValidationStatus.REJECTED,
                                   Example.ValidationStatus.FLAGGED)
    by_researcher = Exists(Validation.objects.filter(example=OuterRef("example"), mode=Validation.Mode.OWNER,
                                                     counted=True).exclude(label=""))
    row = (Validation.objects.filter(checked.in_record(), validator=user, task=task, mode=Validation.Mode.USER)
           .exclude(label="")
           .filter(Q(gold_agrees__isnull=False) | (Q(gold_agrees__isnull=True) & by_researcher))
           .aggregate(answers=Count("pk"), agreeing=Count("pk", filter=Q(gold_agrees=True) | (
               Q(gold_agrees__isnull=True) & (
                   Q(label=Validation.Label.CORRECT, example__validation_status=verified)
                   | Q(label=Validation.Label.INCORRECT, example__validation_status=rejected)
                   | Q(label=Validation.Label.FLAGGED, example__validation_status=flagged))))))
    return row["answers"], row["agreeing"]


def failed_gold(task: Task, user) -> bool:
    """Whether ``user`` failed the checks (``checked_record``): at least
    ``gold_min_answers`` checked decisions, agreeing on fewer than
    ``gold_min_agreement`` of them."""
    rule = task.parsed_config.validator_trust
    answers, agreeing = checked_record(task, user)
    return answers >= int(rule["gold_min_answers"]) and agreeing < float(rule["gold_min_agreement"]) * answers


def email_unverified(user) -> bool:
    """Whether ``user`` signed up on the site and has not confirmed their e-mail address
    yet (``AccountEmail``): they may write, but their votes never count."""
    if user is None or not getattr(user, "pk", None):
        return False
    return AccountEmail.objects.filter(user_id=user.pk, verified_at__isnull=True).exists()


def account_too_new(user) -> bool:
    joined = getattr(user, "date_joined", None)
    age = timedelta(seconds=settings.VALIDATOR_MIN_ACCOUNT_AGE)
    return joined is None or timezone.now() - joined < age


def min_account_age_text() -> str:
    """``VALIDATOR_MIN_ACCOUNT_AGE`` in words: "24 hours", "2 days", "30 minutes"."""
    seconds = int(settings.VALIDATOR_MIN_ACCOUNT_AGE)
    # The largest unit that divides it evenly; days from two on ("24 hours", not "1 day").
    for unit, size, least in (("day", 86400, 2 * 86400), ("hour", 3600, 3600), ("minute", 60, 60)):
        if seconds >= least and seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'' if count == 1 else 's'}"
    return f"{seconds} second{'' if seconds == 1 else 's'}"


def votes_count_from(task: Task, user, session: AnnotationSession | None):
    """When a new account's decisions on ``task`` start to count (a datetime), or None
    when the new-account wait does not hold them back: a researcher's, a validation
    batch's worker (MTurk vouches for them), or an account old enough. The same order
    as ``why_not_counted``, before any example is known."""
    if is_researcher(user, task) or is_batch_validator(session) or (session is not None and session.provisional):
        return None
    if not account_too_new(user):
        return None
    joined = getattr(user, "date_joined", None) or timezone.now()
    return joined + timedelta(seconds=settings.VALIDATOR_MIN_ACCOUNT_AGE)


def why_not_counted(example: Example, validator, session: AnnotationSession | None) -> str:
    """Why ``validator``'s decision on ``example``, made in ``session``, does not count
    towards its outcome ("" when it counts). The caller has already refused the
    writer and accounts that count as the writer, except for researchers: they may
    decide such an example, but on a paid one their decision does not count."""
    if is_researcher(validator, example.task):
        if is_paid(example) and counts_as_writer(validator, example):
            return NotCounted.SAME_PERSON
        return NotCounted.COUNTED
    if session is not None and session.provisional:
        return NotCounted.PROVISIONAL
    if failed_gold(example.task, validator):
        return NotCounted.FAILED_GOLD
    if is_batch_validator(session):
        return NotCounted.COUNTED
    if email_unverified(validator):
        return NotCounted.UNVERIFIED
    if account_too_new(validator):
        return NotCounted.NEW_ACCOUNT
    if needs_trust(example) and not standing(example.task, validator).trusted:
        return NotCounted.UNTRUSTED
    return NotCounted.COUNTED


def needs_trust(example: Example) -> bool:
    """Whether only trusted votes decide ``example``: every example (the task config's
    ``validator_trust.decides`` "all", the default), or only paid ones ("paid")."""
    return example.task.parsed_config.validator_trust.get("decides", "all") == "all" or is_paid(example)


EXPLANATIONS = {
    NotCounted.PROVISIONAL: "Your decision is stored; it counts once MTurk confirms your assignment.",
    NotCounted.NEW_ACCOUNT: "Your decision is stored, but it does not decide the example: votes count once an "
                            "account is {age} old.",
    NotCounted.UNTRUSTED: "Your decision is stored, but it does not decide this example: examples are decided "
                          "by validators who have earned trust on the task ({standing}).",
    NotCounted.SAME_PERSON: "Your decision is stored, but it does not decide this example: it earns money, and "
                            "your account was seen at an address its writer uses, so it counts as the writer's. "
                            "Another researcher or the task's validators decide it.",
    NotCounted.FAILED_GOLD: "Your decision is stored, but your decisions no longer count on this task: too many "
                            "of them disagreed with the researchers' own answers on checked items.",
    NotCounted.UNVERIFIED: "Your decision is stored, but it does not decide the example: votes count once you "
                           "confirm your e-mail address (the link we sent at sign-up; /me/ sends it again).",
    NotCounted.GOLD: "",
}


def explain(validation: Validation) -> str:
    """What the validator reads about a decision that does not count ("" when it does)."""
    reason = validation.not_counted_because
    if not reason:
        return ""
    text = EXPLANATIONS[reason]
    if "{standing}" in text:
        text = text.format(standing=standing(validation.example.task, validation.validator).describe())
    return text.format(age=min_account_age_text())


UNDECIDED = "undecided"
UNDECIDED_TEXT = "You gave your own answer but no decision yet: it counts for nothing until you decide."


def reasons(validations) -> dict[int, tuple[str, str]]:
    """Why each of ``validations`` (with ``example__task`` and ``validator`` loaded) does
    or does not count, as (code, text): the code stored when the vote was made
    (``why_not_counted``), on a gold item the one the validator was told (what it would
    be on any other item: nothing sets a gold item apart), and for an answer not decided
    yet (``undecided``); ("", "") when it counts. The worker's page shows these: it
    never works out a rule itself. A validator's standing
    is read once per task, whatever the number of votes."""
    standings_by_task: dict[int, Standing] = {}
    found = {}
    for validation in validations:
        code = validation.not_counted_because
        if not validation.label:
            found[validation.pk] = (UNDECIDED, UNDECIDED_TEXT)
            continue
        if code == NotCounted.GOLD or validation.gold_agrees is not None:
            code = validation.shown_not_counted_because
            if not code:
                found[validation.pk] = ("", "")
                continue
        elif validation.counted and not code:
            found[validation.pk] = ("", "")
            continue
        if not code:  # stored as waiting (a provisional session MTurk has not confirmed)
            code = NotCounted.PROVISIONAL
        text = EXPLANATIONS[code]
        if "{standing}" in text:
            task = validation.example.task
            if task.pk not in standings_by_task:
                standings_by_task[task.pk] = standing(task, validation.validator)
            text = text.format(standing=standings_by_task[task.pk].describe())
        found[validation.pk] = (code, text.format(age=min_account_age_text()))
    return found
