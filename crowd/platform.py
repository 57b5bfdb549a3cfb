"""What the crowd app asks of a crowd platform (MTurk, Prolific), in one interface.

Everything above the platforms (publishing, the sync, the bonus ledger, blocks)
talks to ``crowd.platforms.for_batch(batch)`` or ``crowd.platforms.by_name(name)``,
never to a platform's client module. The two implementations live in
``crowd/platforms/``: ``MTurkPlatform`` over ``crowd/mturk.py`` (boto3), and
``ProlificPlatform`` over ``crowd/prolific.py`` (HTTP).

This module holds only the shared vocabulary and imports no platform, so that
each client module can make its errors ``PlatformError``\\ s:

- ``PlatformError``: a failed call, whose ``kind`` says what to do about it
  (``throttled``, ``unavailable``, ``connection`` are worth another try later;
  ``connection`` means the call may or may not have happened; the rest need a
  person or a fix).
- ``Listed``: one piece of work as the platform lists it (an MTurk assignment, a
  Prolific submission), normalised.
- ``Platform``: the operations, among them ``confirm_work``: how the platform
  confirms that an assignment is the worker's it claims to be (an arrival's ids prove
  nothing; ``crowd.assignments``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

RETRYABLE_KINDS = frozenset({"throttled", "unavailable", "connection"})


class PlatformError(Exception):
    """A failed call to a crowd platform, with a message a researcher can act on."""

    platform = ""

    def __init__(self, kind: str, message: str, *, operation: str = "", code: str = ""):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.operation = operation
        self.code = code

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE_KINDS

    def __str__(self):
        return f"{self.operation}: {self.message}" if self.operation else self.message


@dataclass
class Listed:
    """One piece of work as the platform lists it.

    ``status`` is one of ``submitted`` (waiting for our decision), ``approved``,
    ``rejected`` or ``other`` (returned, timed out, still working: nothing to decide).
    ``completion`` is what the worker handed in to prove the work was done on our page:
    MTurk's completion token (from the posted answer), Prolific's completion code."""

    SUBMITTED = "submitted"
    APPROVED = "approved"
    REJECTED = "rejected"
    OTHER = "other"

    work_id: str
    worker_id: str
    status: str
    submitted_at: datetime | None = None
    auto_approval_at: datetime | None = None
    completion: str = ""
    raw: dict = field(default_factory=dict, repr=False)


class Platform(ABC):
    """A crowd platform. ``name`` is ``Batch.platform``'s value."""

    name = ""
    label = ""
    # The platform's own error class (a ``PlatformError``).
    error: type[PlatformError] = PlatformError
    # Whether paying a bonus twice with the same request pays once (MTurk's
    # UniqueRequestToken). Prolific's pay call is not: each call pays again.
    idempotent_pay = True
    # Whether the platform shows a worker's work while it is still in progress, so that an
    # arrival can be confirmed as the worker's at once (``confirm_work``): Prolific shows a
    # submission from its start; MTurk shows an assignment only once it is submitted.
    confirms_on_arrival = False
    # The worker's words for the platform (``refusal`` and the work pages): what a piece
    # of work is called there, and how a worker hands back work they cannot do.
    work_name = "HIT"
    work_plural = "HITs"
    hand_in = "submit"  # what the worker does with the work once it is done
    give_back = "please return the HIT"

    def refusal(self, reason: str, *, or_else: str = "") -> str:
        """What a refused worker reads: ``reason``, then how to hand the work back on this
        platform (``or_else``: another way out, such as "try again later")."""
        reason = reason.strip()
        way_out = self.give_back + (f" or {or_else}" if or_else else "")
        if reason.endswith((".", "!", "?")):
            return f"{reason} {way_out[0].upper()}{way_out[1:]}."
        return f"{reason}; {way_out}."

    # --- account and publishing -----------------------------------------------------
    @abstractmethod
    def credentials_found(self) -> bool:
        ...

    @abstractmethod
    def balance(self, *, sandbox: bool, currency: str) -> Decimal | None:
        """The money available to spend, in ``currency``; None when the platform does not tell."""
        ...

    @abstractmethod
    def publish(self, batch) -> None:
        """Post what the batch's ``Hit`` rows that have no id stand for (safe to run again)."""
        ...

    @abstractmethod
    def close(self, batch, hit) -> None:
        """Stop the HIT (or study) taking new workers; work already taken goes on."""
        ...

    # --- work -------------------------------------------------------------------------
    @abstractmethod
    def list_work(self, batch, hit) -> Iterator[Listed]:
        ...

    @abstractmethod
    def confirm_work(self, batch, hit, work_id: str, worker_id: str, *, at_once: bool = False) -> bool | None:
        """Whether the platform says ``work_id`` on ``hit`` is ``worker_id``'s: True (it is),
        False (it is not: another worker's, another HIT's, or no such work where the platform
        would show it), None (the platform does not show it now, so it cannot tell). A failed
        call raises the platform's error; ``at_once``: no retries (a page waits on it). The sync
        confirms listed work by the listing itself (``list_work``: the work id under that
        worker id on that HIT)."""
        ...

    @abstractmethod
    def completion_ok(self, assignment, listed: Listed) -> bool:
        """Whether the worker handed in the proof our page gave them."""
        ...

    @abstractmethod
    def approve(self, batch, work_id: str, feedback: str) -> None:
        ...

    @abstractmethod
    def reject(self, batch, work_id: str, feedback: str, *, reason: str = "") -> None:
        """``feedback`` is what the worker reads; ``reason`` names the rule (``no_record``,
        ``bad_code``, ``not_finished``) for a platform that files rejections by category."""
        ...

    # --- bonuses ----------------------------------------------------------------------
    @abstractmethod
    def longest_call_seconds(self) -> int:
        """The longest one call can take with its retries (a ledger lease outlives it)."""
        ...

    @abstractmethod
    def send_bonus(self, payment) -> None:
        ...

    @abstractmethod
    def bonus_on_record(self, payment) -> bool | None:
        """Whether the platform has the ledger row's bonus on record; None: it cannot tell."""
        ...

    # --- workers ----------------------------------------------------------------------
    @abstractmethod
    def block_everywhere(self, identity, reason: str, *, sandbox: bool) -> None:
        """Keep the worker out of every batch of ours (MTurk: our block qualification)."""
        ...

    @abstractmethod
    def unblock_everywhere(self, identity, *, sandbox: bool) -> None:
        ...

    @abstractmethod
    def block_on_task(self, identity, task, reason: str, *, sandbox: bool) -> None:
        """Keep the worker out of one task's batches on the platform's side, where it can."""
        ...

    @abstractmethod
    def unblock_on_task(self, identity, task, *, sandbox: bool) -> None:
        ...

    @abstractmethod
    def block_account(self, identity, reason: str, *, sandbox: bool) -> None:
        """The platform's own block of the worker (MTurk: CreateWorkerBlock)."""
        ...

    @abstractmethod
    def unblock_account(self, identity, *, sandbox: bool) -> None:
        ...

    @abstractmethod
    def mark_onboarded(self, identity, task, *, sandbox: bool) -> None:
        """Tell the platform the worker passed the task's onboarding, where it can."""
        ...

    @abstractmethod
    def notify(self, worker_ids: list[str], subject: str, message: str, *, sandbox: bool) -> list[dict]:
        ...
