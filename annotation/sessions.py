"""Annotation sessions: one sitting of an annotator on a task.

A session carries the counters a page shows and the key its signed token holds.
``session_problem`` is the one rule for whether a session (and so its token)
still works: not revoked, not past ``ANNOTATION_SESSION_MAX_AGE`` since it was
created, the user still active, and their password unchanged since.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from tasks.models import Task

from .models import AnnotationSession

SESSION_COUNTERS = ("examples_written", "examples_fooled", "validations_done")
LOGIN_KEY_SALT = "dynabench.annotation.login-session"


def login_key(django_session_key: str | None) -> str:
    """A hash naming the sign-in session a page was opened in (never the key itself)."""
    if not django_session_key:
        return ""
    return salted_hmac(LOGIN_KEY_SALT, django_session_key, algorithm="sha256").hexdigest()


def max_age() -> timedelta:
    return timedelta(seconds=settings.ANNOTATION_SESSION_MAX_AGE)


def start_session(user, task: Task, *, login_key: str = "", mturk_assignment_id: str = "",
                  mode: str = AnnotationSession.Mode.ANY, expires_at=None,
                  provisional: bool = False, max_examples: int | None = None) -> AnnotationSession:
    return AnnotationSession.objects.create(
        user=user, task=task, login_key=login_key, mturk_assignment_id=mturk_assignment_id,
        mode=mode, expires_at=expires_at, provisional=provisional, auth_hash=user.get_session_auth_hash(),
        max_examples=max_examples,
    )


def example_cap_problem(session: AnnotationSession, *, lock: bool = False) -> str | None:
    """Why ``session`` may write no more examples (its ``max_examples`` is reached), or
    None. With ``lock`` (inside the transaction that stores the example), the count is
    read under a lock on the session's row, so requests at once cannot pass it together."""
    if session.max_examples is None:
        return None
    written = session.examples_written
    if lock:
        written = AnnotationSession.objects.select_for_update().filter(pk=session.pk).values_list(
            "examples_written", flat=True).first() or 0
    if written >= session.max_examples:
        return (f"This assignment may write at most {session.max_examples} examples (retracted ones count), and "
                f"{written} are written: submit the HIT.")
    return None


def expires_at(session: AnnotationSession):
    """When the session (and its token) stops working: its own ``expires_at`` if it
    has one (an MTurk assignment's deadline), else the default maximum age."""
    return session.expires_at or session.created_at + max_age()


def mode_problem(session: AnnotationSession, work: str) -> str | None:
    """Why ``session`` may not do ``work`` ("create" or "validate"), or None."""
    if session.mode and work in (AnnotationSession.Mode.CREATE, AnnotationSession.Mode.VALIDATE) \
            and session.mode != work:
        if session.mode == AnnotationSession.Mode.ONBOARDING:
            return "This session is for the task's onboarding only."
        doing = "writing" if session.mode == AnnotationSession.Mode.CREATE else "validating"
        return f"This session is for {doing} examples only."
    return None


def session_problem(session: AnnotationSession) -> str | None:
    """Why ``session`` no longer works, or None when it does."""
    if session.revoked_at is not None:
        return session.end_reason or "This session was ended (its user signed out); open the page again."
    if expires_at(session) <= timezone.now():
        return "This session has expired; open the page again."
    user = session.user
    if not user.is_active:
        return "This account is disabled."
    if not constant_time_compare(session.auth_hash, user.get_session_auth_hash()):
        return "This session ended when the account's password changed; open the page again."
    return None


def _live(queryset):
    """Sessions still working by age and revocation, open to any work (an MTurk
    assignment's session is reached through its token only)."""
    return queryset.filter(revoked_at__isnull=True, created_at__gt=timezone.now() - max_age(),
                           mode=AnnotationSession.Mode.ANY, expires_at__isnull=True)


def session_for_page(user, task: Task, login_key: str) -> AnnotationSession:
    """The session a signed-in user's page uses: their newest working one on ``task``
    from the same sign-in, else a new one (opening a page again starts nothing new)."""
    candidates = _live(AnnotationSession.objects.filter(user=user, task=task, login_key=login_key))
    for session in candidates.select_related("user").order_by("-created_at")[:1]:
        if session_problem(session) is None:
            return session
    return start_session(user, task, login_key=login_key)


def current_session(user, task: Task, session: AnnotationSession | None = None) -> AnnotationSession:
    """The caller's session on ``task``: the token's, else their newest working one, else a new one."""
    if session is not None and session.task_id == task.pk and session.user_id == user.pk:
        return session
    latest = _live(AnnotationSession.objects.filter(user=user, task=task)).order_by("-created_at").first()
    return latest or start_session(user, task)


def bump(session: AnnotationSession, **deltas: int) -> None:
    """Add ``deltas`` to the session's counters in the database, then read all three
    back onto ``session``: exact even when the same session writes from two tabs."""
    unknown = set(deltas) - set(SESSION_COUNTERS)
    if unknown:
        raise ValueError(f"not session counters: {sorted(unknown)}")
    updated = AnnotationSession.objects.filter(pk=session.pk).update(
        last_seen_at=timezone.now(), **{name: F(name) + value for name, value in deltas.items()})
    if not updated:
        raise AnnotationSession.DoesNotExist(f"annotation session {session.pk} is gone")
    session.refresh_from_db(fields=SESSION_COUNTERS)


def end_session(session: AnnotationSession, reason: str) -> None:
    """End one session now; its token answers ``reason`` from then on."""
    AnnotationSession.objects.filter(pk=session.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), end_reason=reason[:300])


def revoke_sessions(user, *, login_key: str | None = None) -> int:
    """End the user's working sessions (those of one sign-in, with ``login_key``)."""
    sessions = AnnotationSession.objects.filter(user=user, revoked_at__isnull=True)
    if login_key is not None:
        sessions = sessions.filter(login_key=login_key)
    return sessions.update(revoked_at=timezone.now())
