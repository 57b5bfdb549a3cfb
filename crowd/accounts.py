"""A user deletes their own account.

What they wrote stays (the tasks' data depend on it), anonymised: each example is cut
off from the account, and only the pseudonym a data release gives its writer
(``leaderboard.releases.rows.pseudonym``, a keyed hash) is kept with it, so the
releases still count one writer where there was one and nothing leads back to the
person. With no ``RELEASE_PSEUDONYM_KEY`` configured there is no pseudonym to keep,
and the examples keep none.

The account row itself stays as an empty shell: no username (a random one), no
e-mail, no password, inactive, so it can never sign in again. The validations it
made stay attached to that shell: they decided examples, and the counters and
bonuses that rest on them must not move. Its addresses, e-mail record and API token
are deleted; every session ends (the password changed).

An MTurk worker's account is not deleted here: it holds the ledger of what they
were paid, which MTurk's own records must match.
"""

from __future__ import annotations

import uuid

from django.contrib.auth import logout
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import render
from django.views.decorators.http import require_http_methods
from rest_framework.authtoken.models import Token

from annotation.exporting import DELETED_ANNOTATOR_KEY
from annotation.models import AccountAddress, AccountEmail, Example
from core.errors import DomainError, Forbidden, Unavailable
from leaderboard.releases.rows import pseudonym

from .models import WorkerIdentity

CHUNK = 500
CONFIRM_WORD = "delete"


def release_pseudonym(user) -> str | None:
    try:
        return pseudonym(user.pk)
    except Unavailable:  # no RELEASE_PSEUDONYM_KEY: releases carry no writer pseudonym
        return None


def delete_account(user) -> int:
    """Delete ``user``'s account as the module says; the number of examples anonymised."""
    if WorkerIdentity.objects.filter(user=user).exists():
        raise Forbidden("An MTurk worker's account keeps the record of what they were paid; it is not deleted "
                        "here. Write to the requester through MTurk.")
    if user.is_superuser:
        raise Forbidden("A superuser's account is deleted by another superuser, in the admin.")
    kept = release_pseudonym(user)
    anonymised = 0
    with transaction.atomic():
        while True:
            # The writer's examples a chunk at a time (index walk on the annotator).
            chunk = list(Example.objects.filter(annotator=user).only("id", "metadata").order_by("id")[:CHUNK])
            if not chunk:
                break
            for example in chunk:
                metadata = dict(example.metadata) if isinstance(example.metadata, dict) else {}
                if kept:
                    metadata[DELETED_ANNOTATOR_KEY] = kept
                example.metadata = metadata
                example.annotator = None
            # No save(): the counters stay as they were (what was written does not change).
            Example.objects.bulk_update(chunk, ["annotator", "metadata"])
            anonymised += len(chunk)
        AccountAddress.objects.filter(user=user).delete()
        AccountEmail.objects.filter(user=user).delete()
        Token.objects.filter(user=user).delete()
        user.username = f"deleted-{uuid.uuid4().hex[:16]}"
        user.email = ""
        user.first_name = user.last_name = ""
        user.is_active = user.is_staff = False
        user.set_unusable_password()  # ends every annotation session (the password's hash changed)
        user.save()
    return anonymised


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
