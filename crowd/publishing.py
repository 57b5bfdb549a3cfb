"""Publishing a batch of HITs: check, money, (approval), one HIT type, N HITs.

The money comes first (``crowd.budgets``): the task's budget and the account's
balance must hold the most the new batch may cost on top of what every open
batch has committed, or nothing is asked of MTurk. A batch over
``CROWD_APPROVAL_THRESHOLD`` is then written *awaiting approval*: a superuser
who is another person than its creator approves it (``approve``; not an account
seen at one of the creator's addresses, ``trust.same_person``), the money is
checked again, and only then is anything posted.

A writing batch pays for examples that fool the round's target, so the target must
be worth fooling: it must clear the task's reference line on the static test set
(``check_target``: the majority-class answer, or for QA the SQuAD paper's
sliding-window baseline; ``leaderboard.promotion.round_target_checks``). Otherwise
the batch is refused (a Conflict, code ``target_below_reference``) unless a superuser overrides
the rule with a stated reason, which is recorded on the batch with what the rule
read. Approval checks the rule again for a batch that was not overridden.

The batch row is written first, with a uid; HIT number k is posted with the
UniqueRequestToken ``dynabench-<uid>-<k>``, so publishing again after a crash,
a timeout or a throttling error posts only the HITs that are missing and never
one twice (MTurk answers a repeated token with the HIT it already made).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import mail_admins
from django.db import transaction
from django.utils import timezone

from annotation import trust
from core.errors import Conflict, Forbidden, InvalidInput
from leaderboard.promotion import round_target_checks
from tasks.models import Round, Task
from tasks.roles import is_researcher

from . import budgets, costs, pay
from .hit_types import default_description, default_title, qualifications, with_warning  # noqa: F401
from .models import Batch, Hit
from .money import money, usd
from .platforms import PLATFORMS, PlatformError, by_name, for_batch
from .platforms.mturk import hit_url, unique_request_token  # noqa: F401  (their home before crowd.platforms)

MAX_HITS = 1000
# MTurk approves a submission by itself after the auto-approval delay: it must leave
# the sync (every 5 minutes) time to check the submission and reject a bad one.
MIN_AUTO_APPROVAL_DELAY = 3600
LOCALE = re.compile(r"[A-Z]{2}")
MAX_OVERRIDE_REASON = 2000


class TargetBelowReference(Conflict):
    """A writing batch on a round whose target does not clear the task's reference
    line (``check_target``); ``checks`` holds what the rule read."""

    code = "target_below_reference"

    def __init__(self, message: str, checks: dict):
        super().__init__(message)
        self.checks = checks


@dataclass
class BatchRequest:
    task: Task
    mode: str
    hits: int
    assignments_per_hit: int
    reward: Decimal
    bonus_per_example: Decimal = Decimal("0.00")
    round_number: int | None = None
    examples_per_assignment: int = 5
    title: str = ""
    description: str = ""
    keywords: str = "language, writing, AI, research"
    assignment_duration_seconds: int = 3600
    lifetime_seconds: int = 3 * 24 * 3600
    auto_approval_delay_seconds: int = 3 * 24 * 3600
    locales: tuple[str, ...] = ("US",)
    min_approval_rate: int | None = 95
    min_approved_count: int | None = 100
    quality_block_threshold: float | None = None
    # Only workers who passed the task's onboarding (its MTurk qualification) see the HITs.
    require_onboarding: bool = False
    # Publish a writing batch although the round's target does not clear the task's
    # reference line: superusers only, with a reason (``check_target``).
    allow_below_reference: bool = False
    override_reason: str = ""
    # Where to publish: "mturk" (HITs, USD) or "prolific" (one study: hits=1, its places are
    # assignments_per_hit; USD or GBP; its estimated time is required and judged against
    # Prolific's minimum hourly reward).
    platform: str = "mturk"
    currency: str = "USD"
    estimated_minutes: int | None = None


def hourly_rate(reward: Decimal, estimated_minutes: int | None) -> Decimal | None:
    """What a reward per assignment comes to per hour at the estimated time."""
    if not estimated_minutes or not isinstance(reward, Decimal):
        return None
    return costs.cents(reward * 60 / estimated_minutes)


def min_hourly_reward(currency: str) -> Decimal | None:
    """Prolific's minimum reward per hour in ``currency`` (``PROLIFIC_MIN_HOURLY_REWARD``)."""
    value = settings.PROLIFIC_MIN_HOURLY_REWARD.get(currency)
    return None if value is None else Decimal(value)


def check_platform(req: BatchRequest) -> None:
    """The platform, its currency and (Prolific) its fair-pay rule, before any call."""
    if req.platform not in PLATFORMS:
        raise InvalidInput.field("platform", f"Must be one of {sorted(PLATFORMS)}.")
    if req.platform == "mturk":
        if req.currency != "USD":
            raise InvalidInput.field("currency", "MTurk pays in USD only.")
        return
    if req.currency not in ("USD", "GBP"):
        raise InvalidInput.field("currency", "Prolific studies pay in GBP or USD.")
    if req.hits != 1:
        raise InvalidInput.field("hits", "A Prolific batch is one study: hits must be 1; its places are the "
                                         "assignments per HIT.")
    minutes = req.estimated_minutes
    if not isinstance(minutes, int) or isinstance(minutes, bool) or not 1 <= minutes <= 24 * 60:
        raise InvalidInput.field("estimated_minutes", "A Prolific study needs its estimated completion time: a "
                                                      "whole number of minutes from 1 to 1440.")
    if req.assignment_duration_seconds < minutes * 60:
        raise InvalidInput.field("assignment_duration_seconds", "Must leave at least the estimated time.")
    floor = min_hourly_reward(req.currency)
    rate = hourly_rate(req.reward, minutes)
    if floor is not None and rate is not None and rate < floor:
        symbol = money(floor, req.currency)[0]
        least = costs.cents(floor * minutes / 60 + Decimal("0.004"))
        raise InvalidInput.field("reward", f"A reward of {money(req.reward, req.currency)} for an estimated "
                                           f"{minutes} minutes is {symbol}{rate}/hour, below Prolific's minimum of "
                                           f"{symbol}{floor}/hour (PROLIFIC_MIN_HOURLY_REWARD): at least "
                                           f"{money(least, req.currency)} is needed.")


def check_request(req: BatchRequest) -> Round:
    """The round the batch works on, after every check of the request; InvalidInput or Conflict."""
    if req.mode not in Batch.Mode.values:
        raise InvalidInput.field("mode", f"Must be one of {Batch.Mode.values}.")
    for name, low, high in [("hits", 1, MAX_HITS), ("assignments_per_hit", 1, 100),
                            ("examples_per_assignment", 1, 100),
                            ("assignment_duration_seconds", 30, 365 * 24 * 3600),
                            ("lifetime_seconds", 30, 365 * 24 * 3600),
                            ("auto_approval_delay_seconds", MIN_AUTO_APPROVAL_DELAY, 30 * 24 * 3600)]:
        value = getattr(req, name)
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise InvalidInput.field(name, f"Must be a whole number from {low} to {high}.")
    top_reward, top_bonus = Decimal(settings.CROWD_MAX_REWARD), Decimal(settings.CROWD_MAX_BONUS_PER_EXAMPLE)
    if (not isinstance(req.reward, Decimal) or not Decimal("0.01") <= req.reward <= top_reward
            or req.reward != costs.cents(req.reward)):
        raise InvalidInput.field("reward", f"Must be an amount in USD from 0.01 to {top_reward} (CROWD_MAX_REWARD), "
                                           "in whole cents.")
    if (not isinstance(req.bonus_per_example, Decimal) or not 0 <= req.bonus_per_example <= top_bonus
            or req.bonus_per_example != costs.cents(req.bonus_per_example)):
        raise InvalidInput.field("bonus", f"Must be an amount in USD from 0.00 to {top_bonus} "
                                          "(CROWD_MAX_BONUS_PER_EXAMPLE), in whole cents.")
    if req.mode != Batch.Mode.CREATE and req.bonus_per_example > 0:
        raise InvalidInput.field("bonus", "Bonuses are paid for model-fooling examples, so only writing batches "
                                          "have them.")
    if not isinstance(req.require_onboarding, bool):
        raise InvalidInput.field("require_onboarding", "Must be true or false.")
    if (req.mode == Batch.Mode.ONBOARDING or req.require_onboarding) and not req.task.parsed_config.onboarding:
        raise InvalidInput.field("mode" if req.mode == Batch.Mode.ONBOARDING else "require_onboarding",
                                 f"Task {req.task.slug} has no onboarding (its config's 'onboarding').")
    if req.mode == Batch.Mode.ONBOARDING and req.require_onboarding:
        raise InvalidInput.field("require_onboarding", "An onboarding-only batch is for workers who have not "
                                                       "passed the onboarding; it cannot require it.")
    if not all(isinstance(code, str) and LOCALE.fullmatch(code) for code in req.locales):
        raise InvalidInput.field("locales", "Must be ISO 3166 country codes of two capital letters, e.g. US, GB.")
    if req.quality_block_threshold is not None and not 0 <= req.quality_block_threshold <= 1:
        raise InvalidInput.field("quality_block_threshold", "Must be a share from 0 to 1.")
    check_platform(req)
    if req.min_approval_rate is not None and not 0 <= req.min_approval_rate <= 100:
        raise InvalidInput.field("min_approval_rate", "Must be a percentage from 0 to 100.")
    if not isinstance(req.allow_below_reference, bool):
        raise InvalidInput.field("allow_below_reference", "Must be true or false.")
    if not isinstance(req.override_reason, str) or "\x00" in req.override_reason \
            or len(req.override_reason.strip()) > MAX_OVERRIDE_REASON:
        raise InvalidInput.field("override_reason", f"Must be text of at most {MAX_OVERRIDE_REASON} characters.")
    check_reachable(req.task)
    rounds = Round.objects.filter(task=req.task)
    rnd = rounds.filter(number=req.round_number).first() if req.round_number is not None \
        else rounds.filter(status=Round.Status.OPEN).first()
    if rnd is None:
        raise Conflict(f"Task {req.task.slug} has no round {req.round_number}." if req.round_number is not None
                       else f"Task {req.task.slug} has no open round to collect for.")
    if req.mode == Batch.Mode.CREATE and rnd.status != Round.Status.OPEN:
        raise Conflict(f"Round {rnd.number} of {req.task.slug} is {rnd.status}: writing batches need the open round.")
    if rnd.number == 0:
        raise Conflict("Round 0 holds static data; it is never collected for.")
    return rnd


OVERRIDE_HINT = ("A superuser may publish it anyway with the override (allow_below_reference) and a stated "
                 "reason, which is recorded on the batch.")


def check_target(task: Task, rnd: Round, mode: str, *, allow_below_reference: bool = False,
                 reason: str = "", user=None) -> tuple[dict, str]:
    """The reference rule of a writing batch: each target of ``rnd`` must clear the
    task's reference line on the static test set (``round_target_checks``: its 95%
    interval strictly above the majority-class answer, or for QA above the F1 of the
    sliding-window baseline; a target not scored there cannot show it). A bonus for
    fooling a target that does not clear it pays for examples nearly anyone could write.

    Returns (what the rule read, the override reason: "" when the rule passed or does
    not apply). Raises ``TargetBelowReference`` (a Conflict) when it fails without the override
    and a non-empty reason, ``Forbidden`` (403) when someone other than a superuser asks
    for the override (``user`` None: the management command, run on the server).
    Validation batches judge examples already written, for no bonus: the rule is not
    theirs."""
    if mode != Batch.Mode.CREATE:
        return {}, ""
    checks = round_target_checks(task, rnd)
    problems = checks["problems"]
    if not problems:
        return checks, ""
    reason = (reason or "").strip()
    refused = " ".join(p["message"] for p in problems)
    if not allow_below_reference:
        raise TargetBelowReference(f"No writing batch for {task.slug}: {refused} {OVERRIDE_HINT}", checks)
    if user is not None and not (user.is_authenticated and user.is_active and user.is_superuser):
        raise Forbidden("Only a superuser may publish a writing batch whose target does not clear the task's "
                        "reference line.")
    if not reason:
        raise TargetBelowReference(f"No writing batch for {task.slug}: {refused} The override needs a stated "
                                   "reason (override_reason).", checks)
    return checks, reason


def check_reachable(task: Task) -> None:
    """Workers can reach the task's HITs: an https address, a public task."""
    if not settings.PUBLIC_BASE_URL:
        raise Conflict("PUBLIC_BASE_URL is unset: every HIT links to the platform's public address, and MTurk "
                       "shows only HTTPS pages in its frame. Set it to the platform's public https:// address.")
    if urlsplit(settings.PUBLIC_BASE_URL).scheme != "https":
        raise Conflict(f"PUBLIC_BASE_URL is {settings.PUBLIC_BASE_URL!r}: MTurk shows only HTTPS pages in its "
                       "frame. Set it to the platform's public https:// address.")
    if not task.is_public:
        raise Conflict(f"Task {task.slug} is not public (inactive or hidden): MTurk workers could not reach it.")


@dataclass(frozen=True)
class BaseUrlReport:
    """What the publish form says about the address HITs will link to."""

    shown: str  # PUBLIC_BASE_URL as set, or (unset) the address this request came to
    ok: bool  # publishing would accept it
    how: str  # what to do when it is not ok
    warning: str  # set, but not the host this request came to ("" when it is)


def base_url_report(request_scheme: str, request_host: str) -> BaseUrlReport:
    """The publish form's line about ``PUBLIC_BASE_URL``, given the scheme and the host
    (with its port, as ``request.get_host()`` gives it) that the admin's request came
    to: the setting as it is, with a warning when it names another host or port; or,
    unset, the request's own address, which publishing does not take (HITs are also
    posted by commands and later approvals, with no request: they need the setting)."""
    configured = settings.PUBLIC_BASE_URL
    here = f"{request_scheme}://{request_host}"
    if not configured:
        return BaseUrlReport(
            shown=here, ok=False, warning="",
            how=f"PUBLIC_BASE_URL is unset; this server answered this page at {here!r}. HITs link to "
                "PUBLIC_BASE_URL and MTurk shows only HTTPS pages in its frame: set it to the platform's public "
                "https:// address")
    ok = urlsplit(configured).scheme == "https"
    # Host and port only: a proxy that ends TLS makes the request's scheme http.
    differs = _host_and_port(urlsplit(configured).netloc) != _host_and_port(request_host)
    return BaseUrlReport(
        shown=configured, ok=ok,
        how="" if ok else f"MTurk shows only HTTPS pages in its frame; PUBLIC_BASE_URL is {configured!r}",
        warning=(f"PUBLIC_BASE_URL is {configured!r}, but this page was reached at {here!r}: HITs link "
                 "to PUBLIC_BASE_URL, so check that it is this server's public address." if differs else ""))


def _host_and_port(netloc: str) -> str:
    """``host[:port]`` in lower case, without a default port (80, 443)."""
    netloc = netloc.rsplit("@", 1)[-1].lower()
    for default in (":80", ":443"):
        if netloc.endswith(default):
            return netloc[: -len(default)]
    return netloc


def publish(req: BatchRequest, *, user=None) -> Batch:
    """Check the request, the task's budget and the account's balance (both counting
    what open batches have committed), then post the batch's HIT type and HITs; or,
    over ``CROWD_APPROVAL_THRESHOLD``, leave the batch awaiting a superuser's approval."""
    rnd = check_request(req)
    checks, override = check_target(req.task, rnd, req.mode, allow_below_reference=req.allow_below_reference,
                                    reason=req.override_reason, user=user)
    if req.currency == "USD":
        pay.check_floor(req.task, req.mode, req.reward, req.bonus_per_example)  # crowd.pay: the hourly floor
    most = costs.max_cost(hits=req.hits, assignments_per_hit=req.assignments_per_hit, reward=req.reward,
                          bonus_per_example=req.bonus_per_example,
                          examples_per_assignment=req.examples_per_assignment, mode=req.mode, platform=req.platform)
    # Prolific has no sandbox: its studies pay real money.
    sandbox = settings.MTURK_SANDBOX if req.platform == "mturk" else False
    budgets.check_budget(req.task, sandbox, most, currency=req.currency)  # an early answer, before any call
    balance = by_name(req.platform).balance(sandbox=sandbox, currency=req.currency)
    with transaction.atomic():
        budgets.check_money(req.task, sandbox, most, balance, currency=req.currency)  # again, under the lock
        waits = budgets.needs_approval(most, task=req.task, sandbox=sandbox, user=user)
        batch = Batch.objects.create(
            task=req.task, round=rnd, mode=req.mode, sandbox=sandbox, platform=req.platform, currency=req.currency,
            estimated_minutes=req.estimated_minutes,
            completion_code=secrets.token_hex(6).upper() if req.platform == "prolific" else "",
            title=with_warning(req.task, req.title or default_title(req), 128),
            description=with_warning(req.task, req.description or default_description(req), 2000),
            keywords=req.keywords, hits=req.hits, assignments_per_hit=req.assignments_per_hit,
            # An onboarding-only HIT asks for the quiz, once.
            examples_per_assignment=1 if req.mode == Batch.Mode.ONBOARDING else req.examples_per_assignment,
            reward=req.reward,
            bonus_per_example=req.bonus_per_example, assignment_duration_seconds=req.assignment_duration_seconds,
            lifetime_seconds=req.lifetime_seconds, auto_approval_delay_seconds=req.auto_approval_delay_seconds,
            locales=list(req.locales), min_approval_rate=req.min_approval_rate,
            min_approved_count=req.min_approved_count, quality_block_threshold=req.quality_block_threshold,
            require_onboarding=req.require_onboarding, max_cost=most, created_by=user, reference_checks=checks,
            reference_override_reason=override,
            reference_overridden_by=user if override and user is not None else None,
            status=Batch.Status.AWAITING_APPROVAL if waits else Batch.Status.PUBLISHING)
        Hit.objects.bulk_create([Hit(batch=batch, number=k) for k in range(1, req.hits + 1)])
    if waits:
        _ask_for_approval(batch)
        return batch
    return post_hits(batch)


def _ask_for_approval(batch: Batch) -> None:
    who = batch.created_by.get_username() if batch.created_by else "the command line"
    mail_admins(f"A crowd batch waits for approval: up to ${batch.max_cost:.2f} for {batch.task.slug}",
                f"Batch {batch.pk} ({batch.hits} HITs x {batch.assignments_per_hit} assignments on the "
                f"{'sandbox' if batch.sandbox else 'LIVE site'}), asked for by {who}, may cost up to "
                f"${batch.max_cost:.2f}; with what the same person published alone on the task in the last 24 hours "
                f"that is over CROWD_APPROVAL_THRESHOLD ({usd(settings.CROWD_APPROVAL_THRESHOLD)}). "
                "A superuser other than its creator approves it in the admin (Crowd work > Batches, "
                "'Approve and publish'), or it can be cancelled there.", fail_silently=True)


def may_approve(batch: Batch, user) -> str | None:
    """Why ``user`` may not approve ``batch``; None if they may."""
    if not (user and user.is_authenticated and user.is_active and user.is_superuser):
        return "Only a superuser approves a batch over CROWD_APPROVAL_THRESHOLD."
    if batch.created_by_id is not None and batch.created_by_id == user.pk:
        return "A batch over CROWD_APPROVAL_THRESHOLD needs a second person: its creator cannot approve it."
    # One person, whichever account: one seen at an address of the creator's account counts
    # as its creator (trust.same_person; a deleted creator's addresses are kept for this).
    if batch.created_by_id is not None and trust.same_person(user).filter(user_id=batch.created_by_id).exists():
        return ("A batch over CROWD_APPROVAL_THRESHOLD needs a second person: your account was seen at an address "
                "its creator's account uses, so it counts as its creator. Another superuser approves it.")
    return None


def approve(batch: Batch, user) -> Batch:
    """A superuser other than the creator lets a batch awaiting approval be published:
    the task and the money are checked again (other batches may have committed the
    money meanwhile), then its HITs are posted."""
    refusal = may_approve(batch, user)
    if refusal:
        raise Forbidden(refusal)
    if batch.status != Batch.Status.AWAITING_APPROVAL:
        raise Conflict(f"Batch {batch.pk} is {batch.get_status_display().lower()}, not awaiting approval.")
    check_reachable(batch.task)
    if batch.mode == Batch.Mode.CREATE and batch.round.status != Round.Status.OPEN:
        raise Conflict(f"Round {batch.round.number} of {batch.task.slug} is {batch.round.status}: writing "
                       "batches need the open round.")
    if not batch.reference_override_reason:  # the target may have changed since it was asked for
        try:
            check_target(batch.task, batch.round, batch.mode)
        except TargetBelowReference as exc:
            raise TargetBelowReference(f"{exc.message} Cancel batch {batch.pk} and publish it again with the "
                                       "override to go on.", exc.checks) from None
    balance = for_batch(batch).balance(sandbox=batch.sandbox, currency=batch.currency)
    with transaction.atomic():
        budgets.lock_account(batch.sandbox)
        batch = Batch.objects.select_for_update().select_related("task").get(pk=batch.pk)
        if batch.status != Batch.Status.AWAITING_APPROVAL:  # another approval or a cancel won
            raise Conflict(f"Batch {batch.pk} is {batch.get_status_display().lower()}, not awaiting approval.")
        budgets.check_money(batch.task, batch.sandbox, batch.max_cost, balance, excluding=batch,
                            currency=batch.currency)
        batch.status, batch.approved_by, batch.approved_at = Batch.Status.PUBLISHING, user, timezone.now()
        batch.save(update_fields=["status", "approved_by", "approved_at"])
    return post_hits(batch)


def cancel(batch: Batch, user) -> Batch:
    """Withdraw a batch awaiting approval (its creator, the task's researchers or a
    superuser): nothing was posted, and its money is no longer committed."""
    if not is_researcher(user, batch.task):
        raise Forbidden("Only the task's researchers cancel its batches.")
    if not Batch.objects.filter(pk=batch.pk, status=Batch.Status.AWAITING_APPROVAL).update(
            status=Batch.Status.CANCELLED, finished_at=timezone.now()):
        batch.refresh_from_db()
        raise Conflict(f"Batch {batch.pk} is {batch.get_status_display().lower()}: only a batch awaiting "
                       "approval can be cancelled (expire a published one).")
    batch.refresh_from_db()
    return batch


def post_hits(batch: Batch) -> Batch:
    """Post the batch's HITs that have no id yet (safe to run again). On an MTurk error
    the batch keeps what was posted and records the error; running it again goes on.
    A batch awaiting approval (or cancelled) posts nothing."""
    if batch.status not in (Batch.Status.PUBLISHING, Batch.Status.PUBLISHED):
        raise Conflict(f"Batch {batch.pk} is {batch.get_status_display().lower()}: nothing is posted for it.")
    try:
        for_batch(batch).publish(batch)
    except PlatformError as exc:
        Batch.objects.filter(pk=batch.pk).update(
            last_error=f"{exc} Publish again to post the remaining HITs; none is posted twice.")
        batch.refresh_from_db()
        raise
    now = timezone.now()
    batch.status, batch.last_error = Batch.Status.PUBLISHED, ""
    batch.published_at = batch.published_at or now
    batch.expires_at = now + timedelta(seconds=batch.lifetime_seconds)
    batch.save(update_fields=["status", "last_error", "published_at", "expires_at"])
    return batch
