"""A provisional account's work joins the account it turned out to be.

A crowd arrival's link names a worker, but proves nothing: until the platform
confirms that the assignment is that worker's, the arrival works as a user of its
own (``crowd.workers.arrival_user``), and nothing it does reaches the worker's
account: not their page, examples, flags, standing, gold record or blocks. Once
the platform confirms it, ``join(provisional, account)`` moves its work into the
account, as though the account had done it:

- its sessions (a session's token goes on working, now for the account);
- the examples it wrote (the rounds' and writers' counters follow, through
  ``Example.save``) and the flags it raised;
- its validations, gold answers among them: the account's gold record and trust read
  them from then on. One on an example the account wrote or counts as writing, or on
  one the account validated already, is dropped with its share of the counters
  (nobody validates their own example, or one example twice);
- its addresses (``trust.same_person``), its onboarding (``onboarding.join``) and its
  idempotency records.

What is its own alone goes: validation claims, reliability estimates and vouches
(refitted or given to the account anew), writer counters (zero: a provisional
session's examples are not collected), and the user itself. Whether the joined
decisions count is ``validation.confirm_session``'s to say, as for any session.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Max, Min

from . import onboarding, trust
from .models import (
    AccountAddress,
    AnnotationSession,
    Example,
    IdempotentRequest,
    Validation,
    ValidationClaim,
    ValidatorReliability,
    VouchedValidator,
    WriterCounts,
    forget_validations,
)


@dataclass
class Joined:
    examples: int = 0
    validations: int = 0
    dropped_validations: int = 0


def join(provisional, account) -> Joined:
    """Move ``provisional``'s work into ``account`` (the module says what moves), then
    delete ``provisional``. Nothing happens when they are one user."""
    joined = Joined()
    if provisional.pk == account.pk:
        return joined
    with transaction.atomic():
        AnnotationSession.objects.filter(user=provisional).update(
            user=account, auth_hash=account.get_session_auth_hash())
        _join_addresses(provisional, account)
        for example in Example.objects.select_for_update().filter(annotator=provisional).order_by("pk"):
            example.annotator = account
            example.save(update_fields=["annotator", "updated_at"])
            joined.examples += 1
        Example.objects.filter(flagged_by=provisional).update(flagged_by=account)
        theirs = list(Validation.objects.select_related("example").filter(validator=provisional).order_by("pk"))
        already = set(Validation.objects.filter(validator=account, example_id__in=[v.example_id for v in theirs])
                      .values_list("example_id", flat=True))
        dropped = [v for v in theirs if v.example_id in already or trust.counts_as_writer(account, v.example)]
        forget_validations(dropped)
        Validation.objects.filter(pk__in=[v.pk for v in dropped]).delete()
        joined.dropped_validations = len(dropped)
        joined.validations = Validation.objects.filter(validator=provisional).update(validator=account)
        taken = IdempotentRequest.objects.filter(user=account).values("key")
        IdempotentRequest.objects.filter(user=provisional, key__in=taken).delete()
        IdempotentRequest.objects.filter(user=provisional).update(user=account)
        ValidationClaim.objects.filter(validator=provisional).delete()
        ValidatorReliability.objects.filter(validator=provisional).delete()
        VouchedValidator.objects.filter(validator=provisional).delete()
        WriterCounts.objects.filter(annotator=provisional).delete()
        onboarding.join(provisional, account)
        provisional.delete()
    return joined


def _join_addresses(provisional, account) -> None:
    """The addresses ``provisional`` was seen at are ``account``'s too (the earliest and the
    latest sighting of each kept)."""
    rows = (AccountAddress.objects.filter(user=provisional).values("address_hash")
            .annotate(first=Min("first_seen_at"), last=Max("last_seen_at")))
    AccountAddress.objects.bulk_create(
        [AccountAddress(user=account, address_hash=row["address_hash"], first_seen_at=row["first"],
                        last_seen_at=row["last"]) for row in rows],
        update_conflicts=True, unique_fields=["user", "address_hash"], update_fields=["last_seen_at"])
    AccountAddress.objects.filter(user=provisional).delete()
