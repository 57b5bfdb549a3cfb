"""Onboarding on MTurk: the task's qualifications follow what the onboarding record says
(``annotation.onboarding``, which sends its signals once the record is stored).

- A worker who passes gets the task's *onboarded* qualification: a batch that
  ``require_onboarding`` shows its HITs only to them, and an onboarding-only batch
  only to workers without it.
- A worker who fails every try allowed is blocked on the task as the quality block
  does it (``workers.task_block``: the task's block qualification, and a ``TaskBlock``
  our HIT page refuses them by). Lifting that block lets them try again.

A site account (no MTurk identity) has nothing to give on MTurk. If MTurk cannot be
reached, the record still holds (our pages and the API go by it: a worker blocked
there is refused at the HIT's door, one who passed writes) and the error is logged.
"""

from __future__ import annotations

import logging

from . import workers
from .models import TaskBlock, WorkerIdentity
from .platforms import PlatformError, for_identity

log = logging.getLogger(__name__)

BLOCK_REASON = "Did not pass the task's onboarding within the tries allowed."


def _identity(user) -> WorkerIdentity | None:
    return WorkerIdentity.objects.filter(user=user).first()


def give_onboarded(task, identity: WorkerIdentity) -> None:
    for_identity(identity).mark_onboarded(identity, task, sandbox=identity.sandbox)


def block_failed(task, identity: WorkerIdentity) -> None:
    workers.task_block(identity, task, BLOCK_REASON, sandbox=identity.sandbox)


def on_passed(sender, task, user, **kwargs) -> None:
    identity = _identity(user)
    if identity is None:
        return
    try:
        give_onboarded(task, identity)
    except PlatformError as exc:
        log.warning("onboarding passed by %s on %s, but MTurk refused the qualification: %s",
                    identity.worker_id, task.slug, exc)


def on_blocked(sender, task, user, **kwargs) -> None:
    identity = _identity(user)
    if identity is None:
        return
    try:
        block_failed(task, identity)
    except PlatformError as exc:
        log.warning("onboarding failed by %s on %s, but MTurk refused the block qualification: %s",
                    identity.worker_id, task.slug, exc)


def on_reset(sender, task, user, by, **kwargs) -> None:
    """A researcher let the worker take the onboarding again: lift the task block that
    failing it gave (on the worker's platform and here). If the platform refuses, the block stays and says so in
    the log; it can be lifted by hand (Crowd > Task blocks)."""
    identity = _identity(user)
    block = TaskBlock.objects.filter(worker=identity, task=task, reason=BLOCK_REASON).first() if identity else None
    if block is None:
        return
    try:
        workers.task_unblock(block, by)
    except PlatformError as exc:
        log.warning("onboarding reset for %s on %s, but the platform refused to lift the block: %s",
                    identity.worker_id, task.slug, exc)
