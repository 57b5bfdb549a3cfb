"""Money has limits that a researcher cannot lift alone.

- **A budget per task** (``CrowdBudget``), set by superusers only: what the task's
  batches may spend and commit together, in USD, on each MTurk site separately. A
  task with none set may commit ``CROWD_DEFAULT_TASK_BUDGET`` on the live site
  (default $0: no live batch until a superuser sets one) and is not limited by a
  budget in the sandbox, where no real money moves.
- **Money already promised counts.** A batch is *committed* for the most it may
  still cost (``costs.committed_by_batch``): the task's budget must hold what was
  spent, what every batch of the task has committed, and the new batch's most;
  the account's balance must hold what every batch on the site (all tasks) has
  committed and the new batch's most. Spent money has already left the balance.
- **One at a time.** The count and the new batch's row are written under a lock on
  the site's ``RequesterAccount`` row, so two publishes (or approvals) at once
  cannot both promise the same dollars.
- **Two people for large batches.** A batch whose most exceeds
  ``CROWD_APPROVAL_THRESHOLD`` waits for a superuser's approval, another person's
  than its creator's (``publishing.approve``), and the money is checked again then.
  What counts is the new batch's most *plus* what the same person published alone
  on the same task and site in the last 24 hours (``published_alone``), so ten
  batches just under the threshold wait as one large one would. The same person is
  every account seen at one of the creator's addresses (``trust.same_person``), for
  the sum and for who may approve: a second account, or a deleted one's successor at
  its address, is not a second person.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Q, Sum
from django.utils import timezone

from annotation import trust
from core.errors import Conflict, Forbidden, InvalidInput
from tasks.models import Task

from . import costs
from .models import Batch, CrowdBudget, RequesterAccount


def _site(sandbox: bool) -> str:
    return "sandbox" if sandbox else "live site"


@dataclass
class Standing:
    """A task's budget on one MTurk site, and where its money stands."""

    task: Task
    sandbox: bool
    amount: Decimal | None  # None: no budget limits the task (the sandbox, none set)
    is_default: bool  # no budget was set: the default applies
    committed: Decimal
    spent: Decimal

    @property
    def left(self) -> Decimal | None:
        return None if self.amount is None else self.amount - self.spent - self.committed

    def __str__(self):
        if self.amount is None:
            return (f"no budget ({_site(self.sandbox)}); ${self.spent:.2f} spent, ${self.committed:.2f} committed")
        return (f"${self.amount:.2f} budget{' (the default: none set)' if self.is_default else ''} on the "
                f"{_site(self.sandbox)}: ${self.spent:.2f} spent, ${self.committed:.2f} committed, "
                f"${self.left:.2f} left")


def amount_for(task: Task, sandbox: bool) -> tuple[Decimal | None, bool]:
    """The task's budget on a site, and whether it is the default (none was set)."""
    budget = CrowdBudget.objects.filter(task=task).only("amount").first()
    if budget is not None:
        return budget.amount, False
    return (None if sandbox else Decimal(settings.CROWD_DEFAULT_TASK_BUDGET)), True


def budget_currency(task: Task) -> str:
    """The currency of the task's budget (the default budget's: USD)."""
    return CrowdBudget.objects.filter(task=task).values_list("currency", flat=True).first() or "USD"


def site_batches(sandbox: bool):
    return Batch.objects.filter(sandbox=sandbox)


def standing(task: Task, sandbox: bool, *, excluding: Batch | None = None, currency: str = "USD") -> Standing:
    """The task's budget and its batches in ``currency`` (a budget holds one currency)."""
    amount, is_default = amount_for(task, sandbox)
    batches = site_batches(sandbox).filter(task=task, currency=currency)
    mine = batches.exclude(pk=excluding.pk) if excluding is not None else batches
    return Standing(task=task, sandbox=sandbox, amount=amount, is_default=is_default,
                    committed=costs.committed(mine), spent=costs.spend(batches).total)


def check_currency(task: Task, sandbox: bool, currency: str) -> None:
    """Conflict when a batch in ``currency`` cannot count against the task's budget."""
    held = budget_currency(task)
    if currency != held and (not sandbox or CrowdBudget.objects.filter(task=task).exists()):
        raise Conflict(f"Task {task.slug}'s crowd budget is in {held}, and this batch pays in {currency}: a batch "
                       f"spends from its task's budget in that budget's currency only. A superuser can set the "
                       f"task's budget in {currency} (Crowd work > Crowd budgets), or publish the batch in {held}.")


def check_budget(task: Task, sandbox: bool, most: Decimal, *, excluding: Batch | None = None,
                 currency: str = "USD") -> Standing:
    """Conflict when the task's budget cannot hold ``most`` more; its standing otherwise."""
    check_currency(task, sandbox, currency)
    found = standing(task, sandbox, excluding=excluding, currency=currency)
    if found.amount is not None and most > found.left:
        if found.is_default:
            why = (f"Task {task.slug} has no crowd budget, and on the {_site(sandbox)} a task without one may "
                   f"commit ${found.amount:.2f} (CROWD_DEFAULT_TASK_BUDGET). ")
        else:
            why = f"Task {task.slug} has a crowd budget of ${found.amount:.2f} on the {_site(sandbox)}. "
        raise Conflict(why + f"${found.spent:.2f} is spent and ${found.committed:.2f} is committed to its open "
                             f"batches, so ${max(found.left, Decimal('0')):.2f} is left; this batch may cost up "
                             f"to ${most:.2f}. A superuser can raise the budget (Crowd work > Crowd budgets).")
    return found


def check_balance(sandbox: bool, balance: Decimal, most: Decimal, *, excluding: Batch | None = None) -> None:
    """Conflict when the MTurk account's balance cannot hold every open batch's most plus ``most``."""
    batches = site_batches(sandbox).filter(platform="mturk")
    if excluding is not None:
        batches = batches.exclude(pk=excluding.pk)
    promised = costs.committed(batches)
    if balance < promised + most:
        raise Conflict(f"The MTurk account holds ${balance:.2f}; ${promised:.2f} of it is committed to open "
                       f"batches, and this batch may cost up to ${most:.2f} (rewards, bonuses and MTurk's fees). "
                       "Add funds, wait for open batches to finish, or publish fewer HITs.")


def lock_account(sandbox: bool) -> None:
    """Inside a transaction: hold the site's account row until it ends."""
    RequesterAccount.objects.get_or_create(sandbox=sandbox)
    RequesterAccount.objects.select_for_update().get(sandbox=sandbox)


def check_money(task: Task, sandbox: bool, most: Decimal, balance: Decimal | None, *,
                excluding: Batch | None = None, currency: str = "USD") -> None:
    """Both checks, under the site's lock; call it inside the transaction that writes
    the batch (its row is then committed money for the next one to count)."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("check_money must run inside the transaction that writes the batch")
    lock_account(sandbox)
    check_budget(task, sandbox, most, excluding=excluding, currency=currency)
    if balance is not None:  # None: the platform does not show its balance (Prolific)
        check_balance(sandbox, balance, most, excluding=excluding)


# The window in which one person's batches on one task add up toward the threshold.
APPROVAL_WINDOW = timedelta(hours=24)


def published_alone(task: Task, sandbox: bool, user) -> Decimal:
    """The most that the batches ``user`` (None: the command line) published on
    ``task`` in the last ``APPROVAL_WINDOW`` without a second person may cost:
    batches a superuser approved, and cancelled ones, do not count."""
    batches = site_batches(sandbox).filter(task=task, created_at__gte=timezone.now() - APPROVAL_WINDOW,
                                           approved_by__isnull=True)
    if user is None:
        batches = batches.filter(created_by__isnull=True)
    else:  # the same person's other accounts too (trust.same_person: accounts seen at one address)
        batches = batches.filter(Q(created_by=user) | Q(created_by__in=trust.same_person(user)))
    batches = batches.exclude(status__in=[Batch.Status.CANCELLED, Batch.Status.AWAITING_APPROVAL])
    return batches.aggregate(total=Sum("max_cost"))["total"] or Decimal("0")


def needs_approval(most: Decimal, *, task: Task, sandbox: bool, user) -> bool:
    """Whether a new batch that may cost ``most`` waits for a second person: with what
    its creator published alone on the task in the rolling day, it exceeds
    ``CROWD_APPROVAL_THRESHOLD``. Call it under the site's lock (``check_money``), so
    two batches published at once are counted together."""
    threshold = Decimal(settings.CROWD_APPROVAL_THRESHOLD)
    return most > threshold or published_alone(task, sandbox, user) + most > threshold


def set_budget(task: Task, amount: Decimal, user, note: str = "", currency: str = "USD") -> CrowdBudget:
    """Set the task's budget, in ``currency`` (USD or GBP): superusers only (a researcher
    cannot lift their own limit)."""
    if not (user and user.is_authenticated and user.is_active and user.is_superuser):
        raise Forbidden("Only a superuser sets a task's crowd budget.")
    if currency not in ("USD", "GBP"):
        raise InvalidInput.field("currency", "Must be USD or GBP.")
    if not isinstance(amount, Decimal) or not amount.is_finite() or amount < 0 or amount != costs.cents(amount):
        raise InvalidInput.field("amount", "Must be an amount in USD of 0.00 or more, in whole cents.")
    with transaction.atomic():  # after any publish counting under the old amount
        lock_account(False)
        lock_account(True)
        budget, _ = CrowdBudget.objects.update_or_create(
            task=task, defaults={"amount": amount, "currency": currency, "note": note[:500], "set_by": user,
                                 "updated_at": timezone.now()})
    return budget
