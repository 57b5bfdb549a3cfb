"""The pages MTurk workers see: the HIT page (preview, then the work) and Submit.

These are the only pages MTurk may frame (CSP ``frame-ancestors`` names the MTurk
worker sites; every other page keeps ``X-Frame-Options: DENY`` and
``frame-ancestors 'none'``). They never rely on a cookie: third-party iframes do
not send one, so the work page carries the assignment's signed token in
``data-token`` (as the annotation pages do) and Submit posts it back in the form.
"""

from csp.constants import SELF
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from annotation import gold
from annotation.models import Example
from annotation.tokens import InvalidToken, make_token, session_from_token
from annotation.views import frameable_by_mturk, work_page_context
from core.api import http_status
from core.errors import DomainError, Forbidden
from core.ratelimit import client_ip

from . import mturk, prolific, prolific_arrivals
from .api import pages_from
from .assignments import PREVIEW, NotDoneYet, arrive, completion_token, finish, work_done
from .me import worker_page
from .models import Assignment
from .platforms import for_batch

frameable = frameable_by_mturk()
submits_to_mturk = frameable_by_mturk(**{"form-action": [SELF, *mturk.SUBMIT_HOSTS]})
TEMPLATES = {"create": "crowd/hit_create.html", "validate": "crowd/hit_validate.html",
             "onboarding": "crowd/hit_onboarding.html"}


def _refused(request, exc: DomainError):
    """The HIT frame's refusal page, with the status the API would answer (``core.api``)."""
    response = render(request, "crowd/refused.html", {"message": exc.message, "in_frame": True},
                      status=http_status(exc))
    if getattr(exc, "retry_after", None):
        response["Retry-After"] = str(exc.retry_after)
    return response


def _sample(task):
    """A verified model-fooling example of the task, to show in the preview: never a gold
    item in use (its verdict is the validators' answer key) nor a test-split example (the
    leaderboard's test data)."""
    example = (gold.not_in_use(Example.objects.filter(
        task=task, source=Example.Source.ANNOTATION, fooled=True, retracted=False, flagged=False,
        validation_status=Example.ValidationStatus.VERIFIED)).exclude(split=Example.Split.TEST)
               .order_by("-pk").first())  # the newest: an index walk
    if example is None:
        return None
    return {"inputs": example.inputs, "label": task.parsed_config.kind.shown_answer(example.target)}


@never_cache
@frameable
@require_GET
def hit_page(request):
    """The HIT's ExternalURL: a preview, or the assignment's work page."""
    params = request.GET
    try:
        arrival = arrive(hit_id=params.get("hitId", ""), assignment_id=params.get("assignmentId", ""),
                         worker_id=params.get("workerId", ""), submit_to=params.get("turkSubmitTo", ""),
                         address=client_ip(request))
    except DomainError as exc:
        return _refused(request, exc)
    batch = arrival.batch
    if arrival.assignment is None:
        return render(request, "crowd/preview.html", {
            "batch": batch, "task": batch.task, "config": batch.task.parsed_config, "sample": _sample(batch.task),
            "preview": params.get("assignmentId") == PREVIEW, "in_frame": True})
    return _work_page(request, arrival.assignment)


def _work_page(request, assignment, error: str = "", status: int = 200):
    """The assignment's work page (write or validate), with the HIT bar above the work
    and Submit after it; ``error``: why a Submit was refused, shown beside Submit (the
    work stays where it was), and only while the work is still short of what is asked.
    A Prolific study's page is its own tab, never a frame, and submits to its own view."""
    batch, session = assignment.hit.batch, assignment.session
    on_prolific = batch.platform == "prolific"
    context = work_page_context(request, batch.task, session, batch.mode)
    context.update({"assignment": assignment, "batch": batch, "done": work_done(assignment),
                    "token": make_token(session), "in_frame": not on_prolific, "submit_error": error,
                    "prolific": on_prolific, "words": for_batch(batch)})
    return render(request, TEMPLATES[batch.mode], context, status=status)


@csrf_exempt  # no cookie is involved: the signed token in the form is the credential
@never_cache
@submits_to_mturk
@require_POST
def hit_submit(request):
    """Submit: check the work is done, end the token, and hand the completion token
    to the worker's browser, which posts it to MTurk's externalSubmit."""
    try:
        session = session_from_token(request.POST.get("token", ""))
    except InvalidToken as exc:
        return _refused(request, Forbidden(exc.message))
    try:
        assignment = finish(session, request.POST.get("feedback", ""))
    except NotDoneYet as exc:  # back to the work, with what is left to do
        return _work_page(request, exc.assignment, error=exc.message, status=http_status(exc))
    except DomainError as exc:
        return _refused(request, exc)
    return render(request, "crowd/submit.html", {
        "assignment": assignment, "action": f"{assignment.submit_to}/mturk/externalSubmit",
        "completion_token": completion_token(assignment), "in_frame": True})


# --- Prolific: the study's page, in Prolific's own tab (never framed: the default headers,
# X-Frame-Options DENY and frame-ancestors 'none', stay on these pages) ----------------------


def _prolific_refused(request, exc: DomainError):
    response = render(request, "crowd/refused.html", {"message": exc.message}, status=http_status(exc))
    if getattr(exc, "retry_after", None):
        response["Retry-After"] = str(exc.retry_after)
    return response


def _prolific_done(request, assignment: Assignment):
    """The completion code, and the way back to Prolific that records it."""
    code = assignment.hit.batch.completion_code
    return render(request, "crowd/prolific_done.html", {
        "assignment": assignment, "completion_code": code, "completion_url": prolific.completion_url(code)})


@never_cache
@require_GET
def prolific_entry(request, batch_uid: str):
    """The study URL: the participant's work page, or (finished) their completion code."""
    params = request.GET
    try:
        arrival = prolific_arrivals.arrive(
            batch_uid=batch_uid, participant_id=params.get("PROLIFIC_PID", ""), study_id=params.get("STUDY_ID", ""),
            session_id=params.get("SESSION_ID", ""), address=client_ip(request))
    except DomainError as exc:
        return _prolific_refused(request, exc)
    if arrival.assignment.status in prolific_arrivals.FINISHED:
        return _prolific_done(request, arrival.assignment)
    return _work_page(request, arrival.assignment)


@csrf_exempt  # no cookie is involved: the signed token in the form is the credential
@never_cache
@require_POST
def prolific_submit(request):
    """Finish a Prolific session: the same rule as a HIT's Submit (the work asked for is
    done), then the completion code and the redirect to Prolific."""
    try:
        session = session_from_token(request.POST.get("token", ""))
    except InvalidToken as exc:
        return _prolific_refused(request, Forbidden(exc.message))
    try:
        assignment = finish(session, request.POST.get("feedback", ""), platform="prolific")
    except NotDoneYet as exc:
        return _work_page(request, exc.assignment, error=exc.message, status=http_status(exc))
    except DomainError as exc:
        return _prolific_refused(request, exc)
    return _prolific_done(request, assignment)


def _my_page_context(request, user, *, token: str = "") -> dict:
    return {"page": worker_page(user, pages_from(request.POST if token else request.GET)), "token": token,
            "in_frame": bool(token), "verify_email": not token and not user.is_anonymous}


@never_cache
@require_GET
def my_page(request):
    """``/me/``: the signed-in user's own work, pay and standing (``crowd.me``)."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    try:
        context = _my_page_context(request, request.user)
    except DomainError as exc:
        return render(request, "crowd/refused.html", {"message": exc.message}, status=http_status(exc))
    return render(request, "crowd/me.html", context)


@csrf_exempt  # no cookie is involved: the signed token in the form is the credential
@never_cache
@frameable
@require_POST
def hit_my_page(request):
    """The same page inside a HIT: the worker has no sign-in, so the assignment's token
    (posted, never in the address) says whose page it is."""
    token = request.POST.get("token", "")
    try:
        session = session_from_token(token)
    except InvalidToken as exc:
        return _refused(request, Forbidden(exc.message))
    try:
        context = _my_page_context(request, session.user, token=token)
    except DomainError as exc:
        return _refused(request, exc)
    return render(request, "crowd/me.html", context)
