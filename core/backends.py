"""Sign-in with a password, for everyone but MTurk workers.

An MTurk worker's user (``crowd.WorkerIdentity``) is made with no usable password,
and it stays that way: even if one were set, this backend refuses it, so a worker
reaches the platform only through a HIT's signed per-assignment token. The
sign-in page, ``POST /api/auth/token/`` and the admin's sign-in all go through it.
"""

from django.contrib.auth.backends import ModelBackend


class PasswordBackend(ModelBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        # Checked at sign-in only (get_user, on every signed-in request, costs no query more).
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None and hasattr(user, "mturk_identity"):
            return None
        return user
