"""A worker's arrival at a HIT, their work, and their submission.

MTurk opens our ExternalURL with ``assignmentId``, ``hitId``, ``workerId`` and
``turkSubmitTo``. None of them is secret or signed, so nothing they claim is
trusted: anyone who knows a worker's id can open the HIT with it and a made-up
assignment id.

- **Nobody acts as another worker.** An arrival the platform has not confirmed as
  the worker's is its own provisional identity: its session belongs to a user of its
  own (``workers.arrival_user``), which reaches nothing of the worker's account (their
  page, examples, flags, standing, gold record, blocks). The platform confirms it
  (``Platform.confirm_work``, or the sync's listing: the assignment under that worker
  on that HIT); ``confirm_worker`` then joins its work to the account
  (``annotation.joining``). MTurk shows an assignment only once it is submitted, so an
  MTurk arrival is confirmed by the sync after its submission; Prolific shows a
  submission from its start, so a Prolific arrival is confirmed at once
  (``crowd.prolific_arrivals``), and one Prolific says is not the participant's is refused.
  The door still refuses by the claimed worker's blocks and onboarding, as the
  platform itself would, and an arrival may work where the worker passed the task's
  onboarding (``onboarding.carry_pass``).
- A preview (``ASSIGNMENT_ID_NOT_AVAILABLE``) writes nothing and gets no token.
- Unknown HITs, ended batches (or past their lifetime), blocked workers (on every
  task, or on the HIT's task) and foreign ``turkSubmitTo`` hosts are refused; an
  address (IPv6: its /64) may open at most ``MTURK_ARRIVALS_PER_ADDRESS`` new
  assignments per ``MTURK_ARRIVAL_WINDOW``.
- The session is *provisional*: its validations count, and its examples are collected,
  only once the sync verifies the work (the platform lists it as submitted with our
  proof of work: ``validation.confirm_session``).
- Made-up ids on a public HIT id are bounded: a writing assignment writes at most
  ``examples_cap`` examples (each costs a model pass), and a HIT holds at most
  ``unconfirmed_cap`` places for unconfirmed arrivals, each for at most
  ``CROWD_UNCONFIRMED_HOLD_SECONDS``; one more unconfirmed arrival is a 409 until a
  place frees (the task config's ``crowd_limits``). A confirmed arrival never waits
  for them.
- The assignment's session token works on its task's annotation endpoints for
  the batch's kind of work only, until the assignment's deadline; submitting
  ends it, so a replayed assignment cannot write again.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation import joining, onboarding, sessions
from annotation.models import AnnotationSession, Example, Validation
from core.errors import Conflict, Forbidden, Gone, InvalidInput, NotFound, TooMany
from core.ratelimit import Limiter, address_key

from . import mturk, workers
from .completion import completion_ok, completion_token  # noqa: F401  (their home before crowd.completion)
from .models import Assignment, Batch, Hit, WorkerIdentity
from .platforms import PlatformError, by_name

log = logging.getLogger(__name__)

PREVIEW = "ASSIGNMENT_ID_NOT_AVAILABLE"
MTURK_ID = re.compile(r"[A-Z0-9]{10,64}")
SUBMITTED_MESSAGE = "This assignment was submitted: it takes no more work."


def bad_link(parameter: str, message: str) -> InvalidInput:
    """A HIT link whose ``parameter`` is wrong (400; the page shows ``message``)."""
    return InvalidInput({parameter: [message]}, message=message)


class NotDoneYet(Conflict):
    """Submit before the work is done: the worker stays on the work page, told what is left."""

    def __init__(self, message: str, assignment):
        super().__init__(message)
        self.assignment = assignment


@dataclass
class Arrival:
    hit: Hit
    batch: Batch
    assignment: Assignment | None  # None: a preview


def find_hit(hit_id: str) -> Hit:
    hit = Hit.objects.select_related("batch__task", "batch__round").filter(hit_id=hit_id).first() \
        if MTURK_ID.fullmatch(hit_id or "") else None
    if hit is None:
        raise NotFound("This HIT is not one of ours, or it was withdrawn.")
    return hit


def arrivals_limiter() -> Limiter:
    return Limiter("mturk-arrivals", settings.MTURK_ARRIVALS_PER_ADDRESS, settings.MTURK_ARRIVAL_WINDOW)


def arrive(*, hit_id: str, assignment_id: str, worker_id: str, submit_to: str, address: str = "") -> Arrival:
    """What a worker's browser gets at the HIT's URL: a preview, or their assignment
    (created on the first arrival, the same one on every return while it is open)."""
    hit = find_hit(hit_id)
    batch = hit.batch
    if assignment_id == PREVIEW:
        return Arrival(hit, batch, None)
    if not MTURK_ID.fullmatch(assignment_id or ""):
        raise bad_link("assignmentId", "The assignment id in this link is not a valid MTurk assignment id.")
    if not workers.is_worker_id(worker_id):
        raise bad_link("workerId", "The worker id in this link is not a valid MTurk worker id.")
    submit_to = (submit_to or "").rstrip("/")
    if submit_to not in mturk.SUBMIT_HOSTS:
        raise bad_link("turkSubmitTo", "This link's turkSubmitTo is not an MTurk site; open the HIT from MTurk.")
    if mturk.SUBMIT_HOSTS[submit_to] != batch.sandbox:
        raise bad_link("turkSubmitTo", "This HIT belongs to the MTurk " + ("sandbox" if batch.sandbox else "live site")
                       + ", but the link came from the other one.")
    check_task_open(batch)
    existing = Assignment.objects.select_related("session__user", "worker__user", "hit").filter(
        assignment_id=assignment_id, worker__platform="mturk", worker__worker_id=worker_id).first()
    if existing is not None:  # a return to work already taken, which goes on after an early expiry
        return Arrival(hit, batch, _resume(existing, hit))
    check_taking_new(batch, "This batch of HITs has ended")
    # Checked and counted in one step: a script's arrivals sent at once get no more.
    wait = arrivals_limiter().take(address_key(address)) if address else None
    if wait:
        raise TooMany(f"Too many new assignments from this address; try again in {wait} s.", retry_after=wait)
    identity = workers.identity_for(worker_id, sandbox=batch.sandbox)
    _check_admitted(identity, batch.task)
    confirmed = platform_confirms(hit, assignment_id, worker_id)
    return Arrival(hit, batch, _new_assignment(hit, batch, assignment_id, identity, submit_to, confirmed=confirmed))


def check_taking_new(batch: Batch, ended: str) -> None:
    """Refuse a new arrival once the batch no longer takes workers: ended, or past its
    lifetime (the platform takes no one new then; the sync finishes the batch)."""
    if batch.status != Batch.Status.PUBLISHED or (batch.expires_at is not None
                                                  and batch.expires_at <= timezone.now()):
        raise Gone(by_name(batch.platform).refusal(ended))


def platform_confirms(hit: Hit, work_id: str, worker_id: str) -> bool:
    """Whether the platform confirms now that ``work_id`` on ``hit`` is ``worker_id``'s, for a
    platform that shows work in progress (``Platform.confirms_on_arrival``): True, it is; a
    403 when it says it is not (a forged link); False when it cannot tell (or its call
    failed): the arrival is then provisional until the sync's listing confirms it."""
    batch = hit.batch
    platform = by_name(batch.platform)
    if not platform.confirms_on_arrival:
        return False
    try:
        mine = platform.confirm_work(batch, hit, work_id, worker_id, at_once=True)
    except PlatformError as exc:
        log.warning("%s could not confirm %s as %s's: %s; provisional until the sync confirms it",
                    platform.label, work_id, worker_id, exc)
        return False
    if mine is False:
        raise Forbidden(f"{platform.label} does not show this link's work as yours: open the {platform.work_name} "
                        f"from {platform.label}.")
    return bool(mine)


def confirm_worker(assignment: Assignment) -> bool:
    """The platform confirmed that ``assignment`` is its worker's: its work joins the worker's
    account (``annotation.joining``), once. True when this call confirmed it."""
    now = timezone.now()
    with transaction.atomic():
        if not Assignment.objects.filter(pk=assignment.pk, worker_confirmed_at__isnull=True).update(
                worker_confirmed_at=now):
            return False
        assignment.worker_confirmed_at = now
        session = AnnotationSession.objects.select_related("user").get(pk=assignment.session_id)
        account = WorkerIdentity.objects.select_related("user").get(pk=assignment.worker_id).user
        joining.join(session.user, account)
        session.user = account
        assignment.session = session
    return True


def check_task_open(batch: Batch) -> None:
    """Refuse work on a task hidden from the public, or a writing batch whose task has no open round."""
    platform = by_name(batch.platform)
    if not batch.task.is_public:
        raise Gone(platform.refusal("This task is closed to the public now (a researcher hid or deactivated it)"))
    if batch.mode == Batch.Mode.CREATE and batch.task.open_round() is None:
        raise Gone(platform.refusal("This task has no open round to write for now"))


def _check_admitted(identity: WorkerIdentity, task, *, taking_onboarding: bool = False) -> None:
    """Refuse blocked workers, in their platform's words. ``taking_onboarding``: a return
    to an onboarding-only assignment, which a worker who just failed the quiz there may
    still submit (the task's block keeps them from its other HITs)."""
    platform = by_name(identity.platform)
    not_admitted = platform.refusal(f"You are not admitted to these {platform.work_plural} any more")
    if identity.hard_blocked_at or identity.soft_blocked_at:
        raise Forbidden(not_admitted)
    if taking_onboarding:
        return
    if onboarding.is_blocked(task, identity.user):  # says why; holds when MTurk could not be given the block too
        raise Forbidden(platform.refusal(onboarding.blocked_message(task)))
    if workers.is_blocked_on(identity, task):
        raise Forbidden(not_admitted)
    if not identity.user.is_active:
        raise Forbidden("This worker's account is disabled.")


def _resume(existing: Assignment, hit: Hit) -> Assignment:
    if existing.hit_id != hit.pk:
        raise bad_link("assignmentId", "This assignment id belongs to another HIT.")
    _check_admitted(existing.worker, hit.batch.task, taking_onboarding=hit.batch.mode == Batch.Mode.ONBOARDING)
    if existing.worker_confirmed_at is None and platform_confirms(hit, existing.assignment_id,
                                                                  existing.worker.worker_id):
        confirm_worker(existing)  # the platform could not answer at the first arrival; it does now
    own = existing.session.user  # the arrival's own user until the platform confirms it
    if (hit.batch.mode != Batch.Mode.ONBOARDING and own.pk != existing.worker.user_id
            and onboarding.is_blocked(hit.batch.task, own)):  # it failed the onboarding itself
        raise Forbidden(by_name(hit.batch.platform).refusal(onboarding.blocked_message(hit.batch.task)))
    if existing.status != Assignment.Status.WORKING:
        raise Conflict(SUBMITTED_MESSAGE if existing.status != Assignment.Status.RETURNED
                       else "This assignment ended (it was returned or ran out of time).")
    if existing.deadline <= timezone.now():
        raise Conflict(by_name(hit.batch.platform).refusal("The time for this assignment is up"))
    return existing


def examples_cap(batch: Batch) -> int:
    """The most examples one assignment of ``batch`` may write: the task config's
    ``crowd_limits.examples_per_assignment``, by default twice the HIT's own number
    (room to retract and rewrite), never fewer than the HIT asks for."""
    configured = batch.task.parsed_config.crowd_limits.get("examples_per_assignment")
    return max(batch.examples_per_assignment, configured or 2 * batch.examples_per_assignment)


def unconfirmed_cap(batch: Batch) -> int:
    """The most places one HIT of ``batch`` holds for arrivals its platform has not
    confirmed (``unconfirmed_held``): ``crowd_limits.unconfirmed_per_hit``, by default
    twice the HIT's assignments plus 2."""
    configured = batch.task.parsed_config.crowd_limits.get("unconfirmed_per_hit")
    return configured or 2 * batch.assignments_per_hit + 2


def unconfirmed_held(hit: Hit, now=None):
    """The places on ``hit`` held by arrivals the platform has not confirmed: open ones
    (working, or finished here) that arrived within ``CROWD_UNCONFIRMED_HOLD_SECONDS`` and
    whose deadline has not passed. An older one holds none: its work goes on, but made-up
    ids cannot keep real workers out for longer than that."""
    now = now or timezone.now()
    return Assignment.objects.filter(
        hit=hit, worker_confirmed_at__isnull=True, status__in=[Assignment.Status.WORKING, Assignment.Status.FINISHED],
        accepted_at__gt=now - timedelta(seconds=settings.CROWD_UNCONFIRMED_HOLD_SECONDS), deadline__gt=now)


def _new_assignment(hit: Hit, batch: Batch, assignment_id: str, identity: WorkerIdentity,
                    submit_to: str, *, confirmed: bool = False) -> Assignment:
    """The arrival's assignment and session: the worker's own when the platform ``confirmed``
    it, else a provisional identity's (``workers.arrival_user``), which holds one of the
    HIT's ``unconfirmed_cap`` places for a while."""
    now = timezone.now()
    deadline = now + timedelta(seconds=batch.assignment_duration_seconds)
    cap = examples_cap(batch) if batch.mode == Batch.Mode.CREATE else None
    # MTurk may hand a returned assignment's id to the next worker, so another
    # worker's row with this id is left alone here (a URL proves nothing; ending it
    # would let anyone who learnt the id push its worker out): the sync marks it
    # returned once MTurk lists the id under someone else, or its deadline passes.
    with transaction.atomic():
        Hit.objects.select_for_update().filter(pk=hit.pk).first()  # arrivals on one HIT count one at a time
        if confirmed:
            user = identity.user
        else:
            held = unconfirmed_held(hit, now).count()
            if held >= unconfirmed_cap(batch):
                platform = by_name(batch.platform)
                raise Conflict(platform.refusal(
                    f"This {platform.work_name} already has {held} places taken here that {platform.label} has "
                    "not confirmed, more than it gives out", or_else="try again later"))
            user = workers.arrival_user(identity)
            if batch.task.parsed_config.onboarding:
                onboarding.carry_pass(batch.task, identity.user, user)
        # Provisional: its validations count only once the sync verifies the work.
        session = sessions.start_session(user, batch.task, mturk_assignment_id=assignment_id,
                                         mode=batch.mode, expires_at=deadline, provisional=True,
                                         max_examples=cap)
        try:
            with transaction.atomic():
                return Assignment.objects.create(hit=hit, assignment_id=assignment_id, worker=identity,
                                                 session=session, accepted_at=now, deadline=deadline,
                                                 submit_to=submit_to, worker_confirmed_at=now if confirmed else None)
        except IntegrityError:  # the same arrival twice at once: the first one stands
            session.delete()
            if user.pk != identity.user_id:
                user.delete()
    return Assignment.objects.select_related("session", "worker", "hit").get(assignment_id=assignment_id,
                                                                             worker=identity)


def work_done(assignment: Assignment) -> int:
    """Examples written (not retracted), or validations decided, in the assignment; for
    an onboarding-only HIT, 1 once the worker's onboarding is over (passed, or failed
    for good: the quiz was taken either way)."""
    mode = assignment.hit.batch.mode
    if mode == Batch.Mode.ONBOARDING:  # the session's own user: the worker's account only once confirmed
        state = onboarding.standing(assignment.hit.batch.task, assignment.session.user)
        return int(state.passed or state.blocked)
    if mode == Batch.Mode.CREATE:
        return Example.objects.filter(session=assignment.session, retracted=False).count()
    return Validation.objects.filter(session=assignment.session).exclude(label="").count()


MAX_FEEDBACK = 2000


def clean_feedback(text) -> str:
    """The HIT's feedback box, as stored: text, no NUL, at most ``MAX_FEEDBACK`` characters
    (shown to researchers escaped, as any text)."""
    if text is None:
        return ""
    if not isinstance(text, str) or "\x00" in text:
        raise InvalidInput.field("feedback", "Must be text.")
    text = text.strip()
    if len(text) > MAX_FEEDBACK:
        raise InvalidInput.field("feedback", f"Must be at most {MAX_FEEDBACK} characters (got {len(text)}).")
    return text


def finish(session: AnnotationSession, feedback: str = "", *, platform: str = "mturk") -> Assignment:
    """The worker presses Submit: check the work is done, end the session, and
    return the assignment (its completion token goes to MTurk with the form, or its
    batch's completion code to Prolific), with what they wrote in the feedback box.
    ``platform``: the door it came through; another platform's session is refused."""
    feedback = clean_feedback(feedback)
    with transaction.atomic():
        assignment = Assignment.objects.select_for_update().select_related("hit__batch", "worker", "session") \
            .filter(session=session).first()
        if assignment is None:
            raise NotFound("This session is not an MTurk assignment.")
        if assignment.hit.batch.platform != platform:
            raise Forbidden("This session belongs to a " + ("Prolific study: submit it on the study's page."
                            if assignment.hit.batch.platform == "prolific" else "HIT on MTurk: submit it there."))
        if assignment.status != Assignment.Status.WORKING:
            raise Conflict(SUBMITTED_MESSAGE)
        words = by_name(assignment.hit.batch.platform)
        if assignment.deadline <= timezone.now():
            raise Conflict(words.refusal("The time for this assignment is up"))
        required = assignment.hit.batch.examples_per_assignment
        done = work_done(assignment)
        if done < required:
            mode = assignment.hit.batch.mode
            then = words.hand_in
            if mode == Batch.Mode.ONBOARDING:
                raise NotDoneYet(f"This {words.work_name} asks you to answer the onboarding's items first, "
                                 f"then {then}.", assignment)
            what = "examples" if mode == Batch.Mode.CREATE else "validations"
            raise NotDoneYet(f"This {words.work_name} asks for {required} {what}; you have done {done} so far. "
                             f"Do {required - done} more, then {then}.", assignment)
        assignment.status = Assignment.Status.FINISHED
        assignment.finished_at = timezone.now()
        assignment.worker_feedback = feedback
        assignment.save(update_fields=["status", "finished_at", "worker_feedback"])
        sessions.end_session(assignment.session, SUBMITTED_MESSAGE)
    return assignment
