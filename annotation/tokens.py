"""Signed per-session tokens, for pages inside an MTurk iframe.

Browsers block third-party cookies in iframes, so the annotation pages send
``X-Dynabench-Token: <token>`` instead of relying on the session cookie. A
token is the AnnotationSession key signed with SECRET_KEY and a timestamp;
it expires after ``TOKEN_MAX_AGE`` seconds. Nothing secret is inside it.
"""

from __future__ import annotations

from django.core import signing
from rest_framework import authentication, exceptions

from .models import AnnotationSession

HEADER = "HTTP_X_DYNABENCH_TOKEN"
SALT = "dynabench.annotation-session"
TOKEN_MAX_AGE = 12 * 3600


def make_token(session: AnnotationSession) -> str:
    return signing.TimestampSigner(salt=SALT).sign(str(session.key))


def session_from_token(token: str) -> AnnotationSession:
    try:
        key = signing.TimestampSigner(salt=SALT).unsign(token, max_age=TOKEN_MAX_AGE)
    except signing.SignatureExpired as exc:
        raise exceptions.AuthenticationFailed("The session token has expired; reload the page.") from exc
    except signing.BadSignature as exc:
        raise exceptions.AuthenticationFailed("The session token is not valid.") from exc
    session = AnnotationSession.objects.select_related("user", "task").filter(key=key).first()
    if session is None or not session.user.is_active:
        raise exceptions.AuthenticationFailed("The session token is not valid.")
    return session


class SessionTokenAuthentication(authentication.BaseAuthentication):
    """DRF authentication from the ``X-Dynabench-Token`` header.

    ``request.auth`` is the AnnotationSession, so counters go to the right one.
    No CSRF check is needed: the header cannot be set by a cross-site form.
    """

    def authenticate(self, request):
        token = request.META.get(HEADER)
        if not token:
            return None
        session = session_from_token(token)
        return session.user, session

    def authenticate_header(self, request):
        return "X-Dynabench-Token"
