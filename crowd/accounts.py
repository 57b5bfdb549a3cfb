"""Deleting an account: what the money rules need stays, the person is wiped.

A user deletes their own account (``/accounts/delete/``); a superuser deletes another's
in the admin (the user list's action: the admin never deletes an account's row,
which would blank every record that names it and cut its links). Either way:

- **Wiped**: the username (replaced by the account's stable pseudonym,
  ``deleted_name``), e-mail address (on the account and its sign-up record), first
  and last name, password (unusable: every web and annotation session ends, and no
  reset can reach it), API tokens, stored idempotent answers, staff and superuser
  flags, groups and permissions. The account is inactive and never signs in again.
- **Kept, because money and trust rules read them**: the account's row; its address
  hashes (``AccountAddress``: accounts seen at one of them count as one person, so a
  new sign-up at the same address is still the deleted account's writer and cannot
  validate its examples, approve its batch or verify its bonus); the keyed hash of
  its e-mail inbox (one inbox confirms ``ACCOUNTS_PER_INBOX`` accounts, deleted ones
  included); its examples, still linked to it (the validation queue, the gold draw
  and the two-people rule read the writer), and its validations, so no decision,
  counter or bonus moves; and every record that names it (batches created or
  approved, budgets set, bonuses settled, validators vouched for, jobs, models),
  which now show the pseudonym.

What it wrote stays in the data anonymised: the account that is linked to it has no
name, no address and no password, and releases name its writer by their keyed
pseudonym, as before (``leaderboard.releases.rows.pseudonym``). Examples of accounts
deleted before links were kept were cut off from them and carry that pseudonym in
their metadata (``deleted_pseudonym``).

A crowd worker's account is not deleted here: it holds the record of what they were
paid, which the platform's own records must match.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import render
from django.utils.crypto import salted_hmac
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token

from annotation.accounts import DELETED_PREFIX
from annotation.models import AccountEmail, Example, IdempotentRequest
from annotation.sessions import revoke_sessions
from core.errors import DomainError, Forbidden

from .models import WorkerIdentity

CONFIRM_WORD = "delete"


def deleted_name(user_id: int) -> str:
    """The name a deleted account's records show: ``deleted-`` and a keyed hash of its id,
    the same on every record and every page, leading to nobody."""
    digest = salted_hmac("dynabench.crowd.deleted-account", str(user_id), secret=settings.ADDRESS_HASH_KEY,
                         algorithm="sha256").hexdigest()
    return f"{DELETED_PREFIX}{digest[:16]}"


def delete_account(user, by=None) -> int:
    """Delete ``user``'s account as the module says, by themselves (``by`` None) or by
    ``by``, a superuser; the number of examples they wrote (which stay)."""
    if WorkerIdentity.objects.filter(user=user).exists():
        raise Forbidden("A crowd worker's account keeps the record of what they were paid; it is not deleted "
                        "here. Write to the requester through the platform.")
    if by is None:
        if user.is_superuser:
            raise Forbidden("A superuser's account is deleted by another superuser, in the admin.")
    elif not (by.is_authenticated and by.is_active and by.is_superuser):
        raise Forbidden("Only a superuser deletes another person's account.")
    elif by.pk == user.pk:
        raise Forbidden("Delete your own account from your page (/accounts/delete/), or ask another superuser.")
    with transaction.atomic():
        AccountEmail.objects.filter(user=user).update(email="")  # the inbox's keyed hash stays
        Token.objects.filter(user=user).delete()
        IdempotentRequest.objects.filter(user=user).delete()
        revoke_sessions(user)
        user.username = deleted_name(user.pk)
        user.email = ""
        user.first_name = user.last_name = ""
        user.is_active = user.is_staff = user.is_superuser = False
        user.set_unusable_password()  # and web sessions end: their hash no longer matches
        user.save()
        user.groups.clear()
        user.user_permissions.clear()
    return Example.objects.filter(annotator=user).count()


@login_required
@require_http_methods(["GET", "POST"])
def delete_page(request):
    """What deleting does, said before the user confirms by typing a word."""
    error = ""
    if request.method == "POST":
        if request.POST.get("confirm", "").strip().lower() != CONFIRM_WORD:
            error = f'Type "{CONFIRM_WORD}" to confirm.'
        else:
            try:
                count = delete_account(request.user)
            except DomainError as exc:
                error = exc.message
            else:
                logout(request)
                return render(request, "registration/account_deleted.html", {"count": count})
    examples = Example.objects.filter(annotator=request.user).count()
    identity = WorkerIdentity.objects.filter(user=request.user).exists()
    return render(request, "registration/delete_account.html", {
        "examples": examples, "error": error, "word": CONFIRM_WORD, "mturk": identity})
