# Long on purpose: the crowd tables (batches, HITs, assignments, worker identities, the ledgers) and the
# constraints that tie them together, in the one models module Django expects of an app.
"""Crowd work on Amazon Mechanical Turk: batches of HITs, the assignments workers
take, who those workers are, and the ledger of bonuses paid to them.

Money moves in three places only, each written down before MTurk is asked:
approving an assignment (its reward), sending a bonus (a ``BonusPayment`` row,
unique per assignment and reason), and the fees MTurk adds to both
(``crowd.costs``). How much may be promised at all is bounded by each task's
``CrowdBudget`` and the account's balance (``crowd.budgets``).
"""

import uuid
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from .money import usd


class CrowdPlatform(models.TextChoices):
    MTURK = "mturk", "Mechanical Turk"
    PROLIFIC = "prolific", "Prolific"


class Currency(models.TextChoices):
    USD = "USD", "US dollars"
    GBP = "GBP", "Pounds sterling"


class WorkerIdentity(models.Model):
    """Links an MTurk worker id (or a Prolific participant id) to the platform user that
    is the worker's account.

    An identity is *provisional* from the worker's first arrival until MTurk itself
    reports one of their assignments as submitted by that worker, with our
    completion token: a worker id typed into a URL proves nothing. Nothing is paid
    to a provisional identity. An arrival acts as the account only once the platform
    confirms its assignment is the worker's (``Assignment.worker_confirmed_at``)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mturk_identity")
    platform = models.CharField(max_length=10, choices=CrowdPlatform.choices, default=CrowdPlatform.MTURK,
                                help_text="The platform the worker id belongs to (ids are unique per platform).")
    worker_id = models.CharField(max_length=64)
    sandbox = models.BooleanField(default=True, help_text="Whether the worker was first seen in the sandbox.")
    verified_at = models.DateTimeField(
        null=True, blank=True, help_text="When the id was confirmed against MTurk; no payment before.")
    soft_blocked_at = models.DateTimeField(
        null=True, blank=True, help_text="Given our block qualification: our HITs no longer admit the worker.")
    hard_blocked_at = models.DateTimeField(
        null=True, blank=True, help_text="Blocked through MTurk (CreateWorkerBlock): no HIT of ours at all.")
    block_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "crowd worker identity"
        verbose_name_plural = "crowd worker identities"
        constraints = [models.UniqueConstraint(fields=["platform", "worker_id"], name="worker_id_unique_per_platform")]

    def __str__(self):
        return f"{'Prolific' if self.platform == CrowdPlatform.PROLIFIC else 'MTurk'} {self.worker_id}"

    @property
    def is_verified(self) -> bool:
        return self.verified_at is not None


class Batch(models.Model):
    """One publication: N HITs of one HIT type, for writing or for validating
    examples of one task, with the money and the limits it was published with."""

    class Mode(models.TextChoices):
        CREATE = "create", "Write examples"
        VALIDATE = "validate", "Validate examples"
        # The task's onboarding only: workers who passed get its qualification, which a
        # writing or validation batch may require (``require_onboarding``).
        ONBOARDING = "onboarding", "Onboarding only"

    class Status(models.TextChoices):
        AWAITING_APPROVAL = "awaiting_approval", "Awaiting a superuser's approval"
        PUBLISHING = "publishing", "Publishing"
        PUBLISHED = "published", "Published"
        # Its HITs were expired on MTurk (lifetime over, every assignment decided, or by
        # hand): nobody new can accept them; work already taken is still synced and paid.
        FINISHED = "finished", "Closed to new workers"
        CANCELLED = "cancelled", "Cancelled (never published)"

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False,
                           help_text="Makes the HITs' UniqueRequestTokens, so a retried publish posts nothing twice.")
    task = models.ForeignKey("tasks.Task", on_delete=models.PROTECT, related_name="mturk_batches")
    round = models.ForeignKey("tasks.Round", on_delete=models.PROTECT, related_name="mturk_batches",
                              help_text="The round workers write for (create) or whose examples they validate.")
    mode = models.CharField(max_length=10, choices=Mode.choices)
    platform = models.CharField(max_length=10, choices=CrowdPlatform.choices, default=CrowdPlatform.MTURK,
                                help_text="Where the batch is published: MTurk (HITs) or Prolific (one study).")
    currency = models.CharField(max_length=3, choices=Currency.choices, default=Currency.USD,
                                help_text="Of the reward, the bonuses and the fees. MTurk pays in USD only.")
    completion_code = models.CharField(
        max_length=32, blank=True,
        help_text="Prolific: the study's completion code, shown only to a participant whose work meets the "
                  "batch's requirement; the sync approves only submissions that carry it.")
    estimated_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="Prolific: the study's estimated completion time, which its hourly rate "
                                         "is judged by.")
    sandbox = models.BooleanField(help_text="Published to the MTurk sandbox (no real money).")
    title = models.CharField(max_length=128)
    description = models.CharField(max_length=2000)
    keywords = models.CharField(max_length=1000, blank=True)
    hits = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(1000)])
    assignments_per_hit = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(100)])
    examples_per_assignment = models.PositiveIntegerField(
        default=5, validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Examples to write (or validate) before the worker may submit.")
    reward = models.DecimalField(max_digits=7, decimal_places=2, validators=[MinValueValidator(Decimal("0.01"))],
                                 help_text="Paid per approved assignment, in USD.")
    bonus_per_example = models.DecimalField(
        max_digits=7, decimal_places=2, default=Decimal("0.00"), validators=[MinValueValidator(Decimal("0"))],
        help_text="Paid per example that fooled the model and was then verified (create batches).")
    assignment_duration_seconds = models.PositiveIntegerField(
        default=3600, validators=[MinValueValidator(30), MaxValueValidator(365 * 24 * 3600)])
    lifetime_seconds = models.PositiveIntegerField(
        default=3 * 24 * 3600, validators=[MinValueValidator(30), MaxValueValidator(365 * 24 * 3600)])
    auto_approval_delay_seconds = models.PositiveIntegerField(
        default=3 * 24 * 3600, validators=[MinValueValidator(3600), MaxValueValidator(30 * 24 * 3600)],
        help_text="MTurk approves a submitted assignment by itself after this; bonuses are settled before it.")
    locales = models.JSONField(default=list, blank=True, help_text='Worker locales admitted, e.g. ["US", "GB"].')
    min_approval_rate = models.PositiveIntegerField(null=True, blank=True, validators=[MaxValueValidator(100)],
                                                    help_text="Percent of the worker's past work approved.")
    min_approved_count = models.PositiveIntegerField(null=True, blank=True)
    quality_block_threshold = models.FloatField(
        null=True, blank=True, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Soft-block a worker whose examples are validated correct less often than this "
                  "(once enough are decided); on a validation batch, set to anything, it blocks validators "
                  "whose votes carry next to no evidence (the reliability estimate). Empty: never.")
    require_onboarding = models.BooleanField(
        default=False, help_text="Only workers who passed the task's onboarding (its MTurk qualification) see the "
                                 "HITs.")
    hit_type_id = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.PUBLISHING)
    max_cost = models.DecimalField(max_digits=12, decimal_places=2, default=Decimal("0"),
                                   help_text="Rewards, the most bonuses could come to, and MTurk's fees.")
    last_error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="The superuser (another person than its creator) who let a batch over CROWD_APPROVAL_THRESHOLD "
                  "be published.")
    approved_at = models.DateTimeField(null=True, blank=True)
    # The reference rule (crowd.publishing.check_target): a writing batch pays for fooling
    # the round's target, so its target must clear the task's reference line, unless a
    # superuser overrides the rule with a reason.
    reference_checks = models.JSONField(
        default=dict, blank=True,
        help_text="What the reference rule read when the batch was published: the round's targets on the static "
                  "test set, the reference line (majority-class answer, or for QA the sliding-window baseline) "
                  "and the problems found. Empty for a validation batch.")
    reference_override_reason = models.TextField(
        blank=True, help_text="Why a superuser published this writing batch although its target does not clear "
                              "the reference line. Empty: the rule was not overridden.")
    reference_overridden_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="The superuser who overrode the reference rule (empty with a reason: the command line).")
    published_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="When its HITs stop taking workers.")
    finished_at = models.DateTimeField(null=True, blank=True)
    last_synced_at = models.DateTimeField(null=True, blank=True)
    # The sync's lock (crowd.sync.SyncLock): the running sync's token, and until when it
    # holds the batch unless it renews. Taken, renewed and released by compare-and-set.
    sync_holder = models.CharField(max_length=32, blank=True, editable=False)
    sync_held_until = models.DateTimeField(null=True, blank=True, editable=False)
    quality_checked_until = models.DateTimeField(
        null=True, blank=True,
        help_text="The quality check's watermark: evidence stamped before this (less an overlap) was judged "
                  "already; the next check re-judges only workers whose evidence changed since. Empty: judge all.")

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "batches"

    def __str__(self):  # no related rows: admin filters list many batches
        return f"Batch {self.pk} ({self.mode}, {self.hits} HITs)"

    @property
    def review_until(self):
        """Until when MTurk may still hold submissions of this batch to decide: its HITs'
        end, plus an assignment's duration, plus the auto-approval delay."""
        ended = self.finished_at or self.expires_at
        if ended is None:
            return None
        return ended + timedelta(seconds=self.assignment_duration_seconds + self.auto_approval_delay_seconds)


class Hit(models.Model):
    batch = models.ForeignKey(Batch, on_delete=models.CASCADE, related_name="hit_rows")
    number = models.PositiveIntegerField(help_text="1..N within the batch; part of its UniqueRequestToken.")
    hit_id = models.CharField(max_length=64, unique=True, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["batch", "number"]
        constraints = [models.UniqueConstraint(fields=["batch", "number"], name="hit_number_unique_per_batch")]

    def __str__(self):
        return self.hit_id or f"HIT {self.number} of batch {self.batch_id} (not posted)"


class Assignment(models.Model):
    """A worker's turn at a HIT, from their arrival on our page to MTurk's verdict.

    MTurk may hand a returned assignment's id to the next worker, so the row is
    unique per (assignment id, worker), never per assignment id alone.

    ``worker`` is the identity the arrival's link *claims*. Until the platform confirms
    that the assignment is that worker's (``worker_confirmed_at``), its session belongs to
    a user of its own (``crowd.workers.arrival_user``), which reaches nothing of the
    worker's account; once confirmed, its work joins the account (``annotation.joining``)."""

    class Status(models.TextChoices):
        WORKING = "working", "Working"
        FINISHED = "finished", "Finished here, not yet seen as submitted on MTurk"
        SUBMITTED = "submitted", "Submitted (verified against MTurk)"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        RETURNED = "returned", "Returned or abandoned"

    hit = models.ForeignKey(Hit, on_delete=models.CASCADE, related_name="assignments")
    assignment_id = models.CharField(max_length=64)
    worker = models.ForeignKey(WorkerIdentity, on_delete=models.PROTECT, related_name="assignments")
    session = models.OneToOneField("annotation.AnnotationSession", on_delete=models.PROTECT,
                                   related_name="mturk_assignment",
                                   help_text="The sitting the worker's examples and validations were made in.")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.WORKING)
    submit_to = models.CharField(max_length=64, help_text="The MTurk site the worker submits to (turkSubmitTo).")
    accepted_at = models.DateTimeField(default=timezone.now)
    deadline = models.DateTimeField(help_text="Arrival plus the batch's assignment duration; the token ends then.")
    finished_at = models.DateTimeField(null=True, blank=True, help_text="When the worker pressed Submit here.")
    submitted_at = models.DateTimeField(null=True, blank=True, help_text="SubmitTime on MTurk.")
    auto_approval_at = models.DateTimeField(null=True, blank=True, help_text="AutoApprovalTime on MTurk.")
    worker_confirmed_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When the platform confirmed that this assignment is the worker's (listed under them on the HIT, "
                  "or their submission in the study): its work joined the worker's account then. Empty: the "
                  "arrival's own provisional identity, which reaches nothing of the account's.")
    verified_at = models.DateTimeField(
        null=True, blank=True,
        help_text="When MTurk listed this (assignment, worker, HIT) as submitted with our completion token.")
    decided_at = models.DateTimeField(null=True, blank=True)
    feedback = models.CharField(max_length=1024, blank=True, help_text="Sent to the worker with the decision.")
    worker_feedback = models.TextField(
        blank=True, max_length=2000,
        help_text="What the worker wrote in the HIT's feedback box when they submitted (for the researchers).")
    bonus_settle_by = models.DateTimeField(
        null=True, blank=True,
        help_text="When its bonus is settled at the latest (crowd.bonuses.deadline), written once a bonus run "
                  "found it waiting: a later run finds the deadlines that passed since it last ran.")
    bonus_held_since = models.DateTimeField(
        null=True, blank=True,
        help_text="Since when its bonus waits for a researcher's decision on a flagged or escalated example "
                  "(crowd.bonuses.held): no deadline settles it meanwhile. Empty when nothing holds it.")

    class Meta:
        ordering = ["-accepted_at"]
        constraints = [
            models.UniqueConstraint(fields=["assignment_id", "worker"], name="assignment_unique_per_worker"),
        ]
        indexes = [
            models.Index(fields=["status", "deadline"]),
            # What changed since a watermark: confirmations (quality), approvals and deadlines (bonuses).
            models.Index(fields=["verified_at"], name="assignment_verified_at"),
            models.Index(fields=["status", "decided_at"], name="assignment_status_decided"),
            models.Index(fields=["bonus_settle_by"], name="assignment_bonus_settle_by"),
            # The bonuses waiting for a researcher (the admin's due list, the reminder): a few rows.
            models.Index(fields=["bonus_held_since", "id"], name="assignment_bonus_held",
                         condition=models.Q(bonus_held_since__isnull=False)),
            models.Index(fields=["accepted_at", "id"], name="assignment_accepted"),  # the admin's order
            # One worker's assignments, newest first (their own page, /me/).
            models.Index(fields=["worker", "-accepted_at", "-id"], name="assignment_worker_recent"),
            # ... those confirmed as theirs (their page lists no made-up assignment under their id).
            models.Index(fields=["worker", "-accepted_at", "-id"], name="assignment_worker_confirmed",
                         condition=models.Q(worker_confirmed_at__isnull=False)),
            # Confirmations since a watermark (the quality check re-judges those workers).
            models.Index(fields=["worker_confirmed_at"], name="assignment_confirmed_at"),
        ]

    def __str__(self):
        return f"{self.assignment_id} by {self.worker.worker_id}"


class BonusPayment(models.Model):
    """The ledger: a row is written before MTurk is asked to pay, so a bonus is
    sent at most once per (assignment, reason), whatever fails in between."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending (to send or to reconcile)"
        # Prolific: the pay call went out and its answer was lost. Prolific's pay call is
        # not idempotent, so the row is never sent again by itself: a run reconciles it
        # from Prolific's records, or a person settles it (``settled_by``).
        SENT = "sent", "Sent, answer not known (never sent again by itself)"
        PAID = "paid", "Paid"
        FAILED = "failed", "Failed (will be retried)"
        GAVE_UP = "gave_up", "Failed for good (a person must look)"

    class Reason(models.TextChoices):
        VERIFIED_FOOLING = "verified-fooling", "Verified model-fooling examples"

    assignment = models.ForeignKey(Assignment, on_delete=models.PROTECT, related_name="bonuses")
    reason = models.CharField(max_length=32, choices=Reason.choices)
    amount = models.DecimalField(max_digits=9, decimal_places=2)
    example_count = models.PositiveIntegerField()
    example_ids = models.JSONField(default=list)
    message = models.CharField(max_length=1024, help_text="The reason the worker reads.")
    unique_request_token = models.CharField(max_length=64, unique=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.TextField(blank=True)
    note = models.CharField(max_length=500, blank=True,
                            help_text="How the amount was reached: the examples that counted, and why the others "
                                      "did not (a $0 settlement says why).")
    created_at = models.DateTimeField(default=timezone.now)
    paid_at = models.DateTimeField(null=True, blank=True)
    # Prolific: the bulk bonus the row set up (set-up moves no money; paying it does),
    # and what Prolific said it costs, in the batch's currency.
    platform_ref = models.CharField(max_length=64, blank=True,
                                    help_text="Prolific's bulk bonus id, once set up (empty: none set up).")
    fees = models.DecimalField(max_digits=9, decimal_places=2, null=True, blank=True,
                               help_text="Prolific's fees on the bonus, as its set-up answered.")
    total = models.DecimalField(max_digits=9, decimal_places=2, null=True, blank=True,
                                help_text="The bonus and its fees, as Prolific's set-up answered.")
    sent_at = models.DateTimeField(null=True, blank=True, help_text="When the pay call went out (Prolific).")
    bonuses_before = models.JSONField(
        default=list, blank=True, help_text="Prolific: the bonuses (minor units) its records showed on the "
                                            "participant's submission just before the pay call; a new one of the "
                                            "row's amount is this row's payment.")
    settled_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+", help_text="The superuser who settled a sent row by hand.")
    settled_at = models.DateTimeField(null=True, blank=True)
    settled_note = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["assignment", "reason"], name="one_bonus_per_assignment_and_reason"),
        ]
        indexes = [
            # The rows due for a (re)try: pending or failed, next_attempt_at passed.
            models.Index(fields=["status", "next_attempt_at"], name="bonus_due"),
            models.Index(fields=["created_at", "id"], name="bonus_created"),  # the admin's order
        ]

    def __str__(self):
        return f"{usd(self.amount)} to {self.assignment.worker.worker_id} ({self.get_status_display()})"


class Qualification(models.Model):
    """A qualification type we own on MTurk (a block), created once per endpoint: the
    platform-wide one (no task; superusers give it), and one per task (its
    researchers' quality thresholds give it); and each task's participant groups of
    ours on Prolific (purposes ``prolific-blocked`` and ``prolific-onboarded``, sandbox
    false, the group id in ``qualification_type_id``; ``crowd.prolific_groups``)."""

    purpose = models.CharField(max_length=32)
    sandbox = models.BooleanField()
    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, null=True, blank=True,
                             related_name="mturk_qualifications", help_text="Empty: every task.")
    qualification_type_id = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["purpose", "sandbox"], condition=models.Q(task__isnull=True),
                                    name="one_qualification_per_purpose"),
            models.UniqueConstraint(fields=["purpose", "sandbox", "task"], condition=models.Q(task__isnull=False),
                                    name="one_qualification_per_purpose_and_task"),
        ]

    def __str__(self):
        scope = f" for task {self.task_id}" if self.task_id else ""
        return f"{self.purpose}{scope} ({'sandbox' if self.sandbox else 'live'}): {self.qualification_type_id}"


class TaskBlock(models.Model):
    """A worker kept out of one task's HITs: the task's block qualification on MTurk,
    given when their quality fell below a batch's threshold, and refused by our HIT
    page too. Other tasks still admit them; a block on every task is the identity's
    soft block, which only superusers give."""

    worker = models.ForeignKey(WorkerIdentity, on_delete=models.CASCADE, related_name="task_blocks")
    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="mturk_worker_blocks")
    sandbox = models.BooleanField(help_text="The MTurk site whose qualification was given.")
    batch = models.ForeignKey(Batch, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                              help_text="The batch whose quality threshold blocked the worker.")
    reason = models.CharField(max_length=500)
    blocked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-blocked_at"]
        constraints = [models.UniqueConstraint(fields=["worker", "task"], name="one_block_per_worker_and_task")]

    def __str__(self):
        return f"{self.worker.worker_id} blocked on {self.task.slug}"


class CrowdBudget(models.Model):
    """What one task may spend on MTurk, in USD, set by superusers only. Every batch
    of the task, published or awaiting approval, counts against it with the most it
    may still cost; on each MTurk site (sandbox, live) separately."""

    task = models.OneToOneField("tasks.Task", on_delete=models.CASCADE, related_name="crowd_budget")
    amount = models.DecimalField(max_digits=12, decimal_places=2, validators=[MinValueValidator(Decimal("0"))],
                                 help_text="Rewards, bonuses and the platforms' fees, spent and committed together, "
                                           "in the budget's currency.")
    currency = models.CharField(max_length=3, choices=Currency.choices, default=Currency.USD,
                                help_text="Only batches in this currency may spend from the budget.")
    note = models.CharField(max_length=500, blank=True)
    set_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                               related_name="+")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["task__slug"]
        verbose_name = "crowd budget"

    def __str__(self):
        return f"{usd(self.amount)} for {self.task.name} ({self.task.slug})"


class RequesterAccount(models.Model):
    """The MTurk requester account on one site (sandbox or live). Publishing and
    approving lock its row, so that the money every open batch has committed is
    counted, and a new batch added to it, by one at a time."""

    sandbox = models.BooleanField(unique=True)

    def __str__(self):
        return "sandbox account" if self.sandbox else "live account"


class Watermark(models.Model):
    """How far a periodic job has read what changed: its next run reads only what was
    stamped since ``until`` (less an overlap, for work committed late). One row per
    job; the bonus run's is ``bonuses`` (``crowd.bonuses``). The row
    ``bonus-decision-reminder`` holds when the bonus run last reminded researchers of the
    bonuses held for their decision (``crowd.bonuses.remind_researchers``)."""

    name = models.CharField(max_length=64, primary_key=True)
    until = models.DateTimeField()

    def __str__(self):
        return f"{self.name} read until {self.until:%Y-%m-%d %H:%M:%S}"
