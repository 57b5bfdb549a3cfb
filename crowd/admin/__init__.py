"""The crowd in the admin: publish a batch, watch its assignments, approvals and
bonuses flow, see what it costs per verified model-fooling example, and manage
workers (blocks, messages, quality).

Batches, assignments, the ledger, budgets and task blocks are scoped to the
researcher's own tasks; worker identities span tasks, so only superusers manage
them. Budgets are set by superusers only (researchers see theirs), and only a
superuser other than its creator approves a batch over
``CROWD_APPROVAL_THRESHOLD``. Nothing here edits money rows by hand: every
change goes through a crowd service (``common.ReadOnlyAdminMixin`` keeps the
rows that follow money read-only).

One module per concern; importing them registers their admins:
- ``batches``: the publish page and the batch actions;
- ``ledger``: assignments and the bonus ledger;
- ``budgets``: what each task may spend;
- ``workers``: task blocks and worker identities;
- ``accounts``: Django's user pages, whose delete keeps the row (``crowd.accounts``).
"""

from . import accounts, batches, budgets, ledger, workers

__all__ = ["accounts", "batches", "budgets", "ledger", "workers"]
