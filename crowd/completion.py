"""The proof of work our HIT page hands an MTurk worker on Submit (the completion
token posted to MTurk with the form), and its check by the sync."""

from __future__ import annotations

from django.conf import settings
from django.utils.crypto import constant_time_compare, salted_hmac

COMPLETION_SALT = "dynabench.crowd.completion"


def completion_token(assignment, secret: str | None = None) -> str:
    """What the HIT page posts to MTurk on submit; the sync checks it against MTurk's record."""
    value = f"{assignment.assignment_id}|{assignment.worker.worker_id}|{assignment.hit.hit_id}"
    return salted_hmac(COMPLETION_SALT, value, secret=secret, algorithm="sha256").hexdigest()


def completion_ok(assignment, token: str) -> bool:
    """The token matches, signed with SECRET_KEY or one of SECRET_KEY_FALLBACKS: a key
    rotated between a worker's submit and the sync rejects no one."""
    if not token:
        return False
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return any(constant_time_compare(token, completion_token(assignment, key)) for key in keys)
