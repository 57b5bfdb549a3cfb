"""A Prolific participant's arrival at a study of ours, through the same doors as an
MTurk worker's (``crowd.assignments``).

Prolific opens the study URL (``/prolific/<batch uid>/``) in its own tab with
``PROLIFIC_PID`` (the participant), ``STUDY_ID`` and ``SESSION_ID`` (the submission
id): 24 hexadecimal digits each. None of them is secret or signed, so the arrival
asks Prolific about the submission (``Platform.confirm_work``: ``GET
/api/v1/submissions/{id}/``, which shows it from the moment the participant takes a
place): when it is that participant's in that study, the arrival is confirmed and works
in the participant's account; when Prolific says it is not (another participant's,
another study's, or no such submission), the link is forged and refused (403). When
Prolific cannot answer, the arrival is a provisional identity of its own, as an
unconfirmed MTurk arrival is (``crowd.assignments``), until the sync finds the
submission in the study's list. Either way its work counts (and is paid) only once the
sync finds Prolific's submission awaiting review or approved, with the batch's
completion code.

Refused as on MTurk: unknown batches or studies, ended batches (or past their
lifetime), a hidden task or one with no open round, blocked participants
(everywhere, or on the task), and more than ``MTURK_ARRIVALS_PER_ADDRESS`` new
arrivals per address and window. A batch that requires the task's onboarding admits
only participants who passed it, and an onboarding-only batch only those who have not
(on MTurk, qualifications say so).
"""

from __future__ import annotations

import re
import uuid

from annotation import onboarding
from core.errors import Conflict, Forbidden, NotFound, TooMany
from core.ratelimit import address_key

from . import workers
from .assignments import (
    Arrival,
    _check_admitted,
    _new_assignment,
    _resume,
    arrivals_limiter,
    bad_link,
    check_taking_new,
    check_task_open,
    platform_confirms,
)
from .models import Assignment, Batch, CrowdPlatform, Hit
from .platforms import by_name

PROLIFIC_ID = re.compile(r"[0-9a-f]{24}")
SUBMIT_TO = "https://app.prolific.com"
FINISHED = (Assignment.Status.FINISHED, Assignment.Status.SUBMITTED, Assignment.Status.APPROVED)


def find_batch(batch_uid: str) -> Batch:
    try:
        uid = uuid.UUID(hex=batch_uid or "")
    except ValueError:
        uid = None
    batch = Batch.objects.select_related("task", "round").filter(uid=uid, platform=CrowdPlatform.PROLIFIC).first() \
        if uid else None
    if batch is None:
        raise NotFound("This study is not one of ours, or it was withdrawn.")
    return batch


def arrive(*, batch_uid: str, participant_id: str, study_id: str, session_id: str, address: str = "") -> Arrival:
    """The participant's assignment: created on the first arrival, the same one on every
    return while it is open. A return after finishing gives the finished assignment
    (the page shows its completion code again); ``Arrival.assignment`` is never None."""
    batch = find_batch(batch_uid)
    for name, value in (("PROLIFIC_PID", participant_id), ("STUDY_ID", study_id), ("SESSION_ID", session_id)):
        if not PROLIFIC_ID.fullmatch(value or ""):
            raise bad_link(name, f"The {name} in this link is not a Prolific id; open the study from Prolific.")
    hit = Hit.objects.select_related("batch").filter(batch=batch, hit_id=study_id).first()
    if hit is None:
        raise NotFound("This link's STUDY_ID is not this batch's study; open the study from Prolific.")
    task, words = batch.task, by_name(CrowdPlatform.PROLIFIC)
    check_task_open(batch)
    existing = Assignment.objects.select_related("session__user", "worker__user", "hit__batch").filter(
        hit=hit, assignment_id=session_id, worker__platform=CrowdPlatform.PROLIFIC,
        worker__worker_id=participant_id).first()
    if existing is not None:
        if existing.status in FINISHED:
            return Arrival(hit, batch, existing)
        return Arrival(hit, batch, _resume(existing, hit))
    check_taking_new(batch, "This study has ended")
    wait = arrivals_limiter().take(address_key(address)) if address else None
    if wait:
        raise TooMany(f"Too many new arrivals from this address; try again in {wait} s.", retry_after=wait)
    identity = workers.identity_for(participant_id, sandbox=False, platform=CrowdPlatform.PROLIFIC)
    _check_admitted(identity, task)
    state = onboarding.standing(task, identity.user) if task.parsed_config.onboarding else None
    if batch.require_onboarding and not (state and state.passed):
        raise Forbidden(words.refusal("This study is for participants who passed the task's onboarding"))
    if batch.mode == Batch.Mode.ONBOARDING and state and state.passed:
        raise Conflict(words.refusal("You passed this task's onboarding already"))
    confirmed = platform_confirms(hit, session_id, participant_id)
    return Arrival(hit, batch, _new_assignment(hit, batch, session_id, identity, SUBMIT_TO, confirmed=confirmed))
