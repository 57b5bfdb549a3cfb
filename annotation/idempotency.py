"""``Idempotency-Key`` for the API's writes (``POST examples/`` and ``POST validations/``).

A client that sends a key gets, for a retry with the same key, the first answer
again, and nothing is stored twice: the answer is recorded in the same transaction
as the write it answers (the service's ``within_transaction`` hook). Two copies of
the same request racing each other both reach the write; the second one's record
collides with the first's, its transaction rolls back, and it answers with the
first's answer. The same key with a different request (method, path or body) gets
409: the key is already bound to another request. Keys are per user, printable ASCII of 1 to
255 characters, and are kept for ``IDEMPOTENCY_KEY_TTL`` seconds (pruned by the beat schedule).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from rest_framework.response import Response

from core.errors import Conflict, InvalidInput

from .models import IdempotentRequest

HEADER = "HTTP_IDEMPOTENCY_KEY"
KEY_PATTERN = re.compile(r"^[\x21-\x7e]{1,255}$")
REPLAYED_HEADER = "Idempotent-Replayed"


class AlreadyAnswered(Exception):
    """Another request with the same key committed first: answer as it did."""


class Idempotency:
    def __init__(self, request, key: str):
        self.user = request.user
        self.key = key
        body = json.dumps(request.data, sort_keys=True, separators=(",", ":"), default=str)  # ASCII: \\u escapes
        request_line = f"{request.method} {request.path}\n{body}"
        self.fingerprint = hashlib.sha256(request_line.encode("utf-8", "surrogatepass")).hexdigest()

    @classmethod
    def from_request(cls, request) -> Idempotency | None:
        key = request.META.get(HEADER)
        if key is None:
            return None
        if not KEY_PATTERN.match(key):
            raise InvalidInput.field("Idempotency-Key", "Must be 1 to 255 printable ASCII characters, no spaces.")
        return cls(request, key)

    def replay(self) -> Response | None:
        """The recorded answer for this key, if there is one."""
        cutoff = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
        try:  # (user, key) is unique: get(), not first(), which would sort
            record = IdempotentRequest.objects.get(user=self.user, key=self.key, created_at__gt=cutoff)
        except IdempotentRequest.DoesNotExist:
            return None
        if record.fingerprint != self.fingerprint:
            raise Conflict("This Idempotency-Key was used for a different request; use a new key.")
        return Response(record.body, status=record.status_code, headers={REPLAYED_HEADER: "true"})

    def record(self, status_code: int, body: dict) -> None:
        """Record the answer; call inside the write's transaction. The key's record may
        still be there past its time (the prune job comes by now and then): only when
        the insert collides is an expired one removed to make way, so a fresh key, every
        write's, costs the insert alone."""
        try:
            self._insert(status_code, body)
        except IntegrityError as exc:
            cutoff = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
            expired, _ = IdempotentRequest.objects.filter(user=self.user, key=self.key,
                                                          created_at__lte=cutoff).delete()
            if not expired:
                raise AlreadyAnswered() from exc
            try:
                self._insert(status_code, body)
            except IntegrityError as again:
                raise AlreadyAnswered() from again

    def _insert(self, status_code: int, body: dict) -> None:
        with transaction.atomic():
            IdempotentRequest.objects.create(user=self.user, key=self.key, fingerprint=self.fingerprint,
                                             status_code=status_code, body=body)


def run(request, write, respond, status_code: int) -> Response:
    """``write(within_transaction)`` once per ``Idempotency-Key``; ``respond(result)``
    builds the answer's body (inside the write's transaction when a key is sent)."""
    idempotency = Idempotency.from_request(request)
    if idempotency is None:
        return Response(respond(write(None)), status=status_code)
    replayed = idempotency.replay()
    if replayed is not None:
        return replayed
    answered = {}

    def record(result):
        answered["body"] = respond(result)
        idempotency.record(status_code, answered["body"])

    try:
        write(record)
    except AlreadyAnswered:
        return idempotency.replay()
    except Conflict:
        # A copy of this request that committed first (it held the row lock we waited
        # on) is why this one conflicts: answer as that copy did.
        replayed = idempotency.replay()
        if replayed is None:
            raise
        return replayed
    return Response(answered["body"], status=status_code)


def prune() -> int:
    """Forget keys older than ``IDEMPOTENCY_KEY_TTL``; returns how many."""
    cutoff = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_KEY_TTL)
    deleted, _ = IdempotentRequest.objects.filter(created_at__lte=cutoff).delete()
    return deleted
