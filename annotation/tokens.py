"""Signed per-session tokens, for pages inside an MTurk iframe.

Browsers block third-party cookies in iframes, so the annotation pages send
``X-Dynabench-Token: <token>`` instead of relying on the session cookie. A
token is the AnnotationSession key signed with SECRET_KEY and a timestamp;
it expires after ``TOKEN_MAX_AGE`` seconds. Nothing secret is inside it.
"""

from __future__ import annotations

from functools import lru_cache

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
    session = load_session(key)
    if session is None or not session.user.is_active:
        raise exceptions.AuthenticationFailed("The session token is not valid.")
    return session


@lru_cache(maxsize=4)
def _session_sql(vendor: str) -> str:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from dynabench import rawrows
    from tasks.models import Task

    User = get_user_model()
    q = connection.ops.quote_name
    meta = AnnotationSession._meta
    return (
        f"SELECT {rawrows.columns(AnnotationSession, 's')}, {rawrows.columns(User, 'u')}, "
        f"{rawrows.columns(Task, 't')} FROM {q(meta.db_table)} s "
        f"JOIN {q(User._meta.db_table)} u ON u.{q(User._meta.pk.column)} = s.{q(meta.get_field('user').column)} "
        f"JOIN {q(Task._meta.db_table)} t ON t.{q(Task._meta.pk.column)} = s.{q(meta.get_field('task').column)} "
        f"WHERE s.{q(meta.get_field('key').column)} = %s"
    )


def load_session(key: str) -> AnnotationSession | None:
    """The session with ``key``, its user and task loaded: one query on every API
    call made with a token, so it runs as SQL built once (see dynabench.rawrows)."""
    import uuid

    from django.contrib.auth import get_user_model
    from django.db import connection

    from dynabench import rawrows
    from tasks.models import Task

    try:
        key = uuid.UUID(key)
    except ValueError:
        return None
    User = get_user_model()
    prepared = AnnotationSession._meta.get_field("key").get_db_prep_value(key, connection)
    rows = rawrows.fetch(_session_sql(connection.vendor), [prepared])
    if not rows:
        return None
    row = rows[0]
    n_session, n_user = rawrows.width(AnnotationSession), rawrows.width(User)
    session = rawrows.build(AnnotationSession, row[:n_session])
    session.user = rawrows.build(User, row[n_session:n_session + n_user])
    session.task = rawrows.build(Task, row[n_session + n_user:])
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
