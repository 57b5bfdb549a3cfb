"""Signed per-session tokens, for pages inside an MTurk iframe.

Browsers block third-party cookies in iframes, so the annotation pages send
``X-Dynabench-Token: <token>`` instead of relying on the session cookie. A token
is an AnnotationSession's key signed with SECRET_KEY; nothing secret is inside
it. It is good only while its session is (``sessions.session_problem``: not
revoked by a sign-out, no password change since, at most
``ANNOTATION_SESSION_MAX_AGE`` after the session began), only on the endpoints
that declare a ``token_scope`` (the annotation endpoints), and only for its own
task (``annotation.access``). It cannot mint another token, edit a task or reach
anything else. A session with a ``mode`` (an MTurk assignment's) works only on
the endpoints of that kind of work: ``token_scope`` "create" or "validate"
(endpoints of either kind say "task").
"""

from __future__ import annotations

import uuid

from django.core import signing
from rest_framework import authentication, exceptions

from .models import AnnotationSession
from .sessions import mode_problem, session_problem

HEADER = "HTTP_X_DYNABENCH_TOKEN"
SALT = "dynabench.annotation-session"


class InvalidToken(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def make_token(session: AnnotationSession) -> str:
    return signing.Signer(salt=SALT).sign(str(session.key))


def session_from_token(token: str) -> AnnotationSession:
    """The working session ``token`` names, with its user, its task and the context it
    was served last (the one its next example is about); else InvalidToken."""
    try:
        key = uuid.UUID(signing.Signer(salt=SALT).unsign(token))
    except (signing.BadSignature, ValueError):
        raise InvalidToken("The session token is not valid.") from None
    try:  # the key is unique: get(), not first(), which would sort by the model's ordering
        session = AnnotationSession.objects.select_related("user", "task", "last_context").get(key=key)
    except AnnotationSession.DoesNotExist:
        raise InvalidToken("The session token is not valid.") from None
    problem = session_problem(session)
    if problem:
        raise InvalidToken(problem)
    return session


class SessionTokenAuthentication(authentication.BaseAuthentication):
    """DRF authentication from the ``X-Dynabench-Token`` header.

    ``request.auth`` is the AnnotationSession, so counters go to the right one. No
    CSRF check is needed: the header cannot be set by a cross-site form. A view that
    does not declare a ``token_scope`` refuses tokens with 403.
    """

    def authenticate(self, request):
        token = request.META.get(HEADER)
        if not token:
            return None
        try:
            session = session_from_token(token)
        except InvalidToken as exc:
            raise exceptions.AuthenticationFailed(exc.message) from None
        view = (request.parser_context or {}).get("view")
        scope = getattr(view, "token_scope", None)
        if scope is None:
            raise exceptions.PermissionDenied(
                "A session token works only on the annotation endpoints of its own task; "
                "this endpoint needs a sign-in or an API token.")
        problem = mode_problem(session, scope)
        if problem:
            raise exceptions.PermissionDenied(problem)
        return session.user, session

    def authenticate_header(self, request):
        return "X-Dynabench-Token"
