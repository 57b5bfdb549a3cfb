"""A worker's arrival at a HIT, their work, and their submission.

MTurk opens our ExternalURL with ``assignmentId``, ``hitId``, ``workerId`` and
``turkSubmitTo``. None of them is secret or signed, so nothing they claim is
trusted for money: an arrival creates a *provisional* identity and an
assignment row, and the sync pays only once MTurk itself lists that
(assignment, worker, HIT) as submitted with our completion token.

- A preview (``ASSIGNMENT_ID_NOT_AVAILABLE``) writes nothing and gets no token.
- Unknown HITs, ended batches, blocked workers (on every task, or on the HIT's
  task) and foreign ``turkSubmitTo``
  hosts are refused; an address (IPv6: its /64) may open at most ``MTURK_ARRIVALS_PER_ADDRESS``
  new assignments per ``MTURK_ARRIVAL_WINDOW``.
- The session is *provisional*: its validations count only once MTurk confirms
  the assignment (so made-up worker ids cannot decide anyone's examples).
- Made-up worker ids on a public HIT id are bounded: a writing assignment writes
  at most ``examples_cap`` examples (each costs a model pass), and a HIT holds at
  most ``unconfirmed_cap`` open assignments MTurk has not confirmed; one more
  arrival is a 409 (the task config's ``crowd_limits``).
- The assignment's session token works on its task's annotation endpoints for
  the batch's kind of work only, until the assignment's deadline; submitting
  ends it, so a replayed assignment cannot write again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation import onboarding, sessions
from annotation.models import AnnotationSession, Example, Validation
from core.errors import Conflict, Forbidden, Gone, InvalidInput, NotFound, TooMany
from core.ratelimit import Limiter, address_key

from . import mturk, workers
from .completion import completion_ok, completion_token  # noqa: F401  (their home before crowd.completion)
from .models import Assignment, Batch, Hit, WorkerIdentity
from .platforms import by_name

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
    existing = Assignment.objects.select_related("session", "worker__user", "hit").filter(
        assignment_id=assignment_id, worker__platform="mturk", worker__worker_id=worker_id).first()
    if existing is not None:  # a return to work already taken, which goes on after an early expiry
        return Arrival(hit, batch, _resume(existing, hit))
    if batch.status != Batch.Status.PUBLISHED:
        raise Gone(by_name(batch.platform).refusal("This batch of HITs has ended"))
    # Checked and counted in one step: a script's arrivals sent at once get no more.
    wait = arrivals_limiter().take(address_key(address)) if address else None
    if wait:
        raise TooMany(f"Too many new assignments from this address; try again in {wait} s.", retry_after=wait)
    identity = workers.identity_for(worker_id, sandbox=batch.sandbox)
    _check_admitted(identity, batch.task)
    return Arrival(hit, batch, _new_assignment(hit, batch, assignment_id, identity, submit_to))


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
    """The most open assignments (working, or finished here) that MTurk has not
    confirmed, on one HIT of ``batch``: ``crowd_limits.unconfirmed_per_hit``, by
    default twice the HIT's assignments plus 2 (returned ones stay open here until
    their deadline or the next sync)."""
    configured = batch.task.parsed_config.crowd_limits.get("unconfirmed_per_hit")
    return configured or 2 * batch.assignments_per_hit + 2


def _new_assignment(hit: Hit, batch: Batch, assignment_id: str, identity: WorkerIdentity,
                    submit_to: str) -> Assignment:
    now = timezone.now()
    deadline = now + timedelta(seconds=batch.assignment_duration_seconds)
    cap = examples_cap(batch) if batch.mode == Batch.Mode.CREATE else None
    # MTurk may hand a returned assignment's id to the next worker, so another
    # worker's row with this id is left alone here (a URL proves nothing; ending it
    # would let anyone who learnt the id push its worker out): the sync marks it
    # returned once MTurk lists the id under someone else, or its deadline passes.
    with transaction.atomic():
        Hit.objects.select_for_update().filter(pk=hit.pk).first()  # arrivals on one HIT count one at a time
        unconfirmed = Assignment.objects.filter(hit=hit, verified_at__isnull=True, status__in=[
            Assignment.Status.WORKING, Assignment.Status.FINISHED]).count()
        if unconfirmed >= unconfirmed_cap(batch):
            platform = by_name(batch.platform)
            raise Conflict(platform.refusal(
                f"This {platform.work_name} already has {unconfirmed} places taken here that {platform.label} has "
                "not confirmed, more than it gives out", or_else="try again later"))
        # Provisional: its validations count only once MTurk confirms the assignment.
        session = sessions.start_session(identity.user, batch.task, mturk_assignment_id=assignment_id,
                                         mode=batch.mode, expires_at=deadline, provisional=True,
                                         max_examples=cap)
        try:
            with transaction.atomic():
                return Assignment.objects.create(hit=hit, assignment_id=assignment_id, worker=identity,
                                                 session=session, accepted_at=now, deadline=deadline,
                                                 submit_to=submit_to)
        except IntegrityError:  # the same arrival twice at once: the first one stands
            session.delete()
    return Assignment.objects.select_related("session", "worker", "hit").get(assignment_id=assignment_id,
                                                                             worker=identity)


def work_done(assignment: Assignment) -> int:
    """Examples written (not retracted), or validations decided, in the assignment; for
    an onboarding-only HIT, 1 once the worker's onboarding is over (passed, or failed
    for good: the quiz was taken either way)."""
    mode = assignment.hit.batch.mode
    if mode == Batch.Mode.ONBOARDING:
        state = onboarding.standing(assignment.hit.batch.task, assignment.worker.user)
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
