# Long on purpose: the examples, their validations, and the counters their save() keeps in step with them,
# in one module (the counters must move in the same transaction as every save).
import uuid
from collections import Counter, defaultdict

from django.conf import settings
from django.db import IntegrityError, models, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

QUEUE_STEP = 2**20
QUEUE_VOTES_CAP = QUEUE_STEP - 1


class Example(models.Model):
    """One example: written by an annotator against a target model, or imported."""

    class ValidationStatus(models.TextChoices):
        PENDING = "pending", "Pending"
        VERIFIED = "verified", "Verified correct"
        REJECTED = "rejected", "Rejected (label incorrect)"
        FLAGGED = "flagged", "Flagged"
        ESCALATED = "escalated", "Waits for a researcher (undecided after the most votes, or flagged on a paid example)"

    class Source(models.TextChoices):
        ANNOTATION = "annotation", "Written on the platform"
        IMPORT = "import", "Imported"
        SEED = "seed", "Shipped seed set"

    class Split(models.TextChoices):
        TRAIN = "train", "Train"
        DEV = "dev", "Dev"
        TEST = "test", "Test"

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    external_uid = models.CharField(max_length=200, blank=True, help_text="Id in the imported source.")
    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="examples")
    round = models.ForeignKey("tasks.Round", on_delete=models.CASCADE, related_name="examples")
    context = models.ForeignKey("tasks.Context", on_delete=models.PROTECT, null=True, blank=True,
                                related_name="examples")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="examples"
    )
    source = models.CharField(max_length=12, choices=Source.choices, default=Source.ANNOTATION)
    split = models.CharField(max_length=5, choices=Split.choices, default=Split.TRAIN)
    inputs = models.JSONField(help_text="What the annotator wrote, by input field.")
    target = models.JSONField(help_text='The annotator\'s answer: {"label": ...} or {"text": ..., "start": ...}.')
    model_predictions = models.JSONField(
        default=dict, blank=True, help_text="Each target model's prediction, keyed by model version id."
    )
    prediction = models.JSONField(null=True, blank=True, help_text="The round's (ensemble) prediction.")
    model_versions = models.ManyToManyField("registry.ModelVersion", blank=True, related_name="examples")
    fooled = models.BooleanField(null=True, blank=True, help_text="Empty when no model answered.")
    retracted = models.BooleanField(default=False)
    flagged = models.BooleanField(default=False)
    flag_reason = models.CharField(max_length=500, blank=True, help_text="The first reason given; never overwritten.")
    flagged_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    validation_status = models.CharField(
        max_length=10, choices=ValidationStatus.choices, default=ValidationStatus.PENDING
    )
    validations_correct = models.PositiveIntegerField(default=0)
    validations_incorrect = models.PositiveIntegerField(default=0)
    validations_flagged = models.PositiveIntegerField(default=0)
    decision_posterior = models.FloatField(
        null=True, blank=True,
        help_text="Adaptive validation: the probability that the writer's answer is right, after the last "
                  "counted vote (annotation.reliability_model).")
    gold_verdict = models.CharField(
        max_length=10, blank=True, default="", choices=[("correct", "The writer is right"),
                                                        ("incorrect", "The writer is wrong")],
        help_text="A known-answer (gold) item: the researchers' verdict on the writer's answer. The validation "
                  "queue mixes gold items in (the task config's validation.gold_rate); answers on them are the "
                  "evidence for a validator's trust (annotation.gold).")
    gold_retired_at = models.DateTimeField(
        null=True, blank=True,
        help_text="A gold item a researcher retired: no longer served as one, and public like any example "
                  "(a gold item in use stays out of the public browser and releases: annotation.gold).")
    latency_ms = models.FloatField(null=True, blank=True, help_text="Model latency when it was written.")
    signature = models.CharField(
        max_length=64, blank=True,
        help_text="HMAC over what was written, the target, the models' answers and fooled; checked before "
                  "an example is used (training data).")
    metadata = models.JSONField(default=dict, blank=True)
    session = models.ForeignKey("AnnotationSession", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="examples", help_text="The sitting it was written in.")
    provisional = models.BooleanField(
        default=False, help_text="Written in an MTurk assignment that MTurk has not confirmed yet (its session is "
                                 "provisional): it is not collected, not counted and not validated until then.")
    queue_priority = models.BigIntegerField(
        null=True, blank=True, editable=False,
        help_text="Its place in the validation queue, lowest first; empty when it is not waiting for validation "
                  "(annotation.queue).")
    queue_priority_adaptive = models.BigIntegerField(
        null=True, blank=True, editable=False,
        help_text="Its place in the queue of a validator whose reliability is known (adaptive validation).")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "external_uid"], condition=~models.Q(external_uid=""),
                name="example_external_uid_unique_per_task",
            ),
        ]
        indexes = [
            models.Index(fields=["round", "source", "retracted"]),
            # The validation queue: the next item is the first entry of one of these.
            models.Index(fields=["task", "queue_priority", "id"], condition=models.Q(queue_priority__isnull=False),
                         name="example_validation_queue"),
            # The task's gold items (a few hundred at most): the queue picks one among them.
            models.Index(fields=["task", "id"], condition=~models.Q(gold_verdict=""), name="example_gold_items"),
            models.Index(fields=["task", "queue_priority_adaptive", "id"],
                         condition=models.Q(queue_priority_adaptive__isnull=False),
                         name="example_validation_queue_known"),
            # What changed since a watermark (decisions, flags, retractions bump updated_at): the
            # crowd's quality check and bonus run read only that (crowd.sync, crowd.bonuses).
            models.Index(fields=["task", "updated_at"], name="example_task_updated"),
            # One writer's examples of a task (the crowd's quality of the writers it judges again).
            models.Index(fields=["annotator", "task"], name="example_annotator_task"),
            # One writer's examples, newest first (their own page, /me/): a page is an index walk.
            models.Index(fields=["annotator", "-id"], name="example_annotator_recent"),
            # The examples list (GET /api/tasks/<slug>/examples/) pages newest id first under
            # any mix of its filters (round, split, status): each mix has an index that
            # starts with exactly its filters and ends with id, so a page is an index walk
            # (no sort of the task's examples, no scan) whatever the task's size; the HIT preview's
            # latest verified fooling example walks (task, validation_status, -id) too. A round
            # belongs to one task: the round's indexes need no task column.
            models.Index(fields=["task", "-id"], name="example_list_task"),
            models.Index(fields=["task", "split", "-id"], name="example_list_task_split"),
            models.Index(fields=["task", "validation_status", "-id"], name="example_list_task_status"),
            models.Index(fields=["task", "split", "validation_status", "-id"], name="example_list_task_split_st"),
            models.Index(fields=["round", "-id"], name="example_list_round"),
            models.Index(fields=["round", "split", "-id"], name="example_list_round_split"),
            models.Index(fields=["round", "validation_status", "-id"], name="example_list_round_status"),
            models.Index(fields=["round", "split", "validation_status", "-id"], name="example_list_round_split_st"),
            # The admin's list: one task's examples, newest first; and the search by external uid.
            # (On PostgreSQL a GIN index on the words of ``inputs`` serves the admin's text
            # search: migration 0009 creates it there only.)
            models.Index(fields=["task", "created_at"], name="example_task_created"),
            # ... and one round's (the round filter; a round is of one task).
            models.Index(fields=["round", "created_at"], name="example_round_created"),
            models.Index(fields=["validation_status", "created_at"], name="example_status_created"),
            # Few rows are flagged or retracted: these lists need not walk the others.
            models.Index(fields=["created_at"], condition=models.Q(flagged=True), name="example_flagged_created"),
            models.Index(fields=["created_at"], condition=models.Q(retracted=True), name="example_retracted_created"),
            models.Index(fields=["external_uid"], name="example_external_uid"),
        ]

    def __str__(self):
        return f"{self.task.slug} example {self.pk}"

    def save(self, *args, **kwargs):
        """Every save keeps the example's place in the validation queue and the round
        counters (``RoundCounts``, ``WriterCounts``) in step with its state, whatever
        fields it writes: the row and its counters change in one transaction."""
        update_fields = kwargs.get("update_fields")
        touched = None if update_fields is None else {self._meta.get_field(name).name for name in update_fields}
        if touched is None or touched & QUEUE_INPUTS:
            self.queue_priority, self.queue_priority_adaptive = self.queue_priorities()
            if touched is not None:
                kwargs["update_fields"] = {*update_fields, "queue_priority", "queue_priority_adaptive"}
        if touched is not None and not touched & COUNTED_INPUTS:
            super().save(*args, **kwargs)
            return
        # Inside a caller's transaction (a new example's, on every write) no savepoint
        # of its own: two statements fewer, and an error here undoes the caller's
        # transaction, which the caller lets propagate (one that catches a database
        # error and goes on wraps this save in an atomic block of its own, as imports do).
        with transaction.atomic(savepoint=False):
            before = None if self._state.adding else self._counted_before()
            super().save(*args, **kwargs)
            after = _example_snapshot(self)
            _tally_example(self.pk, before, after)
            self._counted = after

    def delete(self, *args, **kwargs):
        with transaction.atomic():
            forget_examples([self])
            return super().delete(*args, **kwargs)

    @classmethod
    def from_db(cls, db, field_names, values):
        instance = super().from_db(db, field_names, values)
        if COUNTED_ATTNAMES <= set(field_names):
            instance._counted = _example_snapshot(instance)  # what it adds to the counters as loaded
        return instance

    def refresh_from_db(self, *args, **kwargs):
        super().refresh_from_db(*args, **kwargs)
        self.__dict__.pop("_counted", None)  # read again from the row at the next save

    def _counted_before(self) -> "ExampleSnapshot | None":
        """What the stored row adds to the counters (as loaded, or read now)."""
        if "_counted" in self.__dict__:
            return self._counted
        row = type(self).objects.filter(pk=self.pk).values(*COUNTED_ATTNAMES).first()
        return _example_snapshot(type(self)(**row)) if row else None

    def in_validation_queue(self) -> bool:
        """Whether the example waits for validators: written on the platform, pending,
        not retracted or flagged, and not in an unconfirmed MTurk assignment."""
        return (self.source == self.Source.ANNOTATION and self.validation_status == self.ValidationStatus.PENDING
                and not self.retracted and not self.flagged and not self.provisional)

    def queue_priorities(self) -> tuple[int | None, int | None]:
        """Its places in the validation queue, lowest served first (None: not queued).

        Model-fooling examples first, then those that did not fool it, then those no
        model answered; within each, the fewest validations first (``queue_priority``).
        A validator whose reliability is known gets, after the fooling rank, the
        examples whose posterior is farthest from a coin toss first, where their vote
        is most likely to decide (``queue_priority_adaptive``, posterior distance in
        steps of 1/2000). Ties go to the oldest (the lowest id)."""
        if not self.in_validation_queue():
            return None, None
        fooled_rank = {True: 0, False: 1, None: 2}[self.fooled]
        votes = min(self.validations_total, QUEUE_VOTES_CAP)
        posterior = 0.5 if self.decision_posterior is None else self.decision_posterior
        undecidedness = round((0.5 - min(abs(posterior - 0.5), 0.5)) * 2000)  # 0 (sure) .. 1000 (coin toss)
        return (fooled_rank * QUEUE_STEP + votes,
                (fooled_rank * QUEUE_STEP + undecidedness) * QUEUE_STEP + votes)

    @property
    def validations_total(self) -> int:
        return self.validations_correct + self.validations_incorrect + self.validations_flagged


class Validation(models.Model):
    """One validator's work on one example: first their own (blind) answer, then
    their decision on the writer's label. A row with a blind answer and no label
    yet counts for nothing until the decision comes."""

    class Label(models.TextChoices):
        CORRECT = "correct", "Correct"
        INCORRECT = "incorrect", "Incorrect"
        FLAGGED = "flagged", "Flagged"

    class Mode(models.TextChoices):
        USER = "user", "User"
        OWNER = "owner", "Owner (decides at once)"

    example = models.ForeignKey(Example, on_delete=models.CASCADE, related_name="validations")
    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="+", editable=False,
                             help_text="The example's task (set on save): a task's validations without a join.")
    validator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="validations")
    label = models.CharField(max_length=10, choices=Label.choices, blank=True,
                             help_text="Empty until the validator decides (after their blind answer).")
    mode = models.CharField(max_length=5, choices=Mode.choices, default=Mode.USER)
    reason = models.CharField(max_length=500, blank=True)
    blind_answer = models.JSONField(null=True, blank=True,
                                    help_text="The validator's own answer, given before the writer's was shown.")
    blind_agrees = models.BooleanField(null=True, blank=True,
                                       help_text="Whether the blind answer agrees with the writer's, "
                                                 "by the task's metric.")
    session = models.ForeignKey("AnnotationSession", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="validations", help_text="The sitting the decision was made in.")
    gold_agrees = models.BooleanField(
        null=True, blank=True, help_text="On a gold item: whether the decision matches the researchers' verdict "
                                         "(a flag never does).")
    class NotCounted(models.TextChoices):
        COUNTED = "", "(counted)"
        PROVISIONAL = "provisional", "Made in an MTurk assignment that MTurk has not confirmed yet"
        NEW_ACCOUNT = "new_account", "The validator's account was too new"
        UNTRUSTED = "untrusted", "The validator had not earned trust on the task"
        SAME_PERSON = "same_person", "A paid example, and the validator (a researcher) counts as its writer"
        GOLD = "gold", "A known-answer (gold) item: the answer is evidence about the validator"
        FAILED_GOLD = "failed_gold", "The validator failed too many of the task's gold items"
        UNVERIFIED = "unverified", "The validator's e-mail address was not confirmed"

    counted = models.BooleanField(
        default=True, help_text="Whether the decision counts towards the example's outcome: one made in a "
                                "provisional session counts only once the session is confirmed.")
    not_counted_because = models.CharField(
        max_length=12, choices=NotCounted.choices, blank=True, default="",
        help_text="Why the decision does not count (stored and shown, but it decides nothing).")
    shown_not_counted_because = models.CharField(
        max_length=12, choices=NotCounted.choices, blank=True, default="",
        help_text="On a gold item: what the validator is told, the reason it would not count on any other "
                  "item (empty: it would count). Nothing they see sets a gold item apart (annotation.gold).")
    in_record = models.BooleanField(
        default=False,
        help_text="Part of the validator's record on checked items: the record moves only once a step of "
                  "CHECKED_RECORD_STEP decisions closes, so no change in it points at one item "
                  "(annotation.record).")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["example", "validator"], name="one_validation_per_validator"),
        ]
        indexes = [
            # A validator's answered-but-undecided items (served first by the queue): a few rows.
            models.Index(fields=["validator", "example"], condition=models.Q(label=""),
                         name="validation_undecided"),
            models.Index(fields=["created_at", "id"], name="validation_created"),  # the admin's order
            models.Index(fields=["validator", "-id"], name="validation_validator_recent"),  # their page, /me/
            models.Index(fields=["task", "created_at", "id"], name="validation_task_created"),  # ... by task
            # The task's answers on gold items since a time (the crowd's quality check).
            models.Index(fields=["task", "decided_at"], condition=models.Q(gold_agrees__isnull=False),
                         name="validation_gold_answers"),
            # A validator's work on a task since their record's last step (a few rows).
            models.Index(fields=["validator", "task"], condition=models.Q(in_record=False),
                         name="validation_outside_record"),
        ]

    def __str__(self):
        said = self.label or "(blind answer only)"
        return f"{self.validator} says {said} on example {self.example_id}"

    def save(self, *args, **kwargs):
        """Every save keeps the round counters in step: the decisions and blind answers
        on collected examples, and the counted votes the reliability model reads."""
        if self.task_id is None:
            self.task_id = self.example.task_id
        with transaction.atomic():
            before = None
            if not self._state.adding:
                before = self.__dict__.get("_counted")
                if before is None:
                    row = type(self).objects.filter(pk=self.pk).values(*VALIDATION_COUNTED_ATTNAMES).first()
                    before = _validation_snapshot(type(self)(**row)) if row else None
            super().save(*args, **kwargs)
            after = _validation_snapshot(self)
            _tally_validation(self.example, before, after)
            self._counted = after

    @classmethod
    def from_db(cls, db, field_names, values):
        instance = super().from_db(db, field_names, values)
        if VALIDATION_COUNTED_ATTNAMES <= set(field_names):
            instance._counted = _validation_snapshot(instance)
        return instance

    def refresh_from_db(self, *args, **kwargs):
        super().refresh_from_db(*args, **kwargs)
        self.__dict__.pop("_counted", None)


class ValidationClaim(models.Model):
    """The validation queue served ``example`` to ``validator``: only then may they answer
    it and decide it, until ``expires_at``. Validators are assigned, not self-chosen: ten
    accounts cannot pick one writer's examples by id."""

    example = models.ForeignKey(Example, on_delete=models.CASCADE, related_name="claims")
    validator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="validation_claims")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["example", "validator"], name="one_claim_per_validator")]
        indexes = [
            # A validator's live claims (the queue serves what they hold again: serving.held_claim).
            models.Index(fields=["validator", "expires_at"], name="claim_validator_live"),
        ]

    def __str__(self):
        return f"example {self.example_id} served to {self.validator} until {self.expires_at:%Y-%m-%d %H:%M}"


class AccountAddress(models.Model):
    """An address an account was seen at (sign-up, sign-in, writing, validating, a HIT
    arrival), kept only as a keyed hash (``trust.address_hash``). Accounts that
    share one count as one person: none of them may validate the others' examples."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    address_hash = models.CharField(max_length=64, db_index=True)
    first_seen_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "address_hash"], name="one_row_per_account_address")]
        verbose_name_plural = "account addresses"

    def __str__(self):
        return f"{self.user} at {self.address_hash[:12]}…"


class AccountEmail(models.Model):
    """The e-mail address an account gave at sign-up, and when it was confirmed (the
    link in the e-mail: Django's token generator). Only accounts that signed up on the
    site have a row: until ``verified_at`` is set they may write, but their votes never
    count (``trust.why_not_counted``). Accounts an administrator or a command
    made, and MTurk workers' accounts (MTurk vouches for them), have none and are not
    held back."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="account_email")
    email = models.EmailField(blank=True, help_text="Erased when the account is deleted (the inbox hash stays).")
    inbox = models.CharField(
        max_length=64, blank=True, db_index=True, editable=False,
        help_text="A keyed hash of the inbox the address delivers to (core.inboxes: case, plus tags and Gmail's "
                  "dots folded): one inbox confirms at most ACCOUNTS_PER_INBOX accounts, deleted ones included.")
    verified_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return f"{self.email} ({'confirmed' if self.verified_at else 'not confirmed'})"


class VouchedValidator(models.Model):
    """A validator a task's researcher vouches for (their own lab's annotators, say): a
    researcher's decision, so trusted on the task without a record of checked answers
    (``trust.standing``). Their weight in the adaptive fit is still capped at a
    newcomer's until gold items or researchers' decisions support more."""

    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="+")
    validator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    vouched_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "validator"], name="one_vouch_per_task_validator")]

    def __str__(self):
        return f"{self.validator} vouched for on {self.task}"


class AnnotationSession(models.Model):
    """One sitting of an annotator on a task: counters, the last context served,
    and the key that a signed per-session token carries (for pages in an MTurk
    iframe, where third-party cookies are blocked).

    A token stops working when the session is revoked (sign-out), when the user's
    password changes (``auth_hash`` no longer matches) and, at the latest,
    ``ANNOTATION_SESSION_MAX_AGE`` after the session was created, or at
    ``expires_at`` when that is set. A session with a ``mode`` works only on
    that kind of work (an MTurk assignment's session: writing or validating).
    A *provisional* session's validations are stored but do not count until the
    session is confirmed (``validation.confirm_session``)."""

    class Mode(models.TextChoices):
        ANY = "", "Any annotation work"
        CREATE = "create", "Writing examples only"
        VALIDATE = "validate", "Validating examples only"
        ONBOARDING = "onboarding", "The task's onboarding only"

    key = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="annotation_sessions")
    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="annotation_sessions")
    last_context = models.ForeignKey("tasks.Context", on_delete=models.SET_NULL, null=True, blank=True,
                                     related_name="+")
    examples_written = models.PositiveIntegerField(default=0)
    examples_fooled = models.PositiveIntegerField(default=0)
    validations_done = models.PositiveIntegerField(default=0)
    mturk_assignment_id = models.CharField(max_length=64, blank=True)
    max_examples = models.PositiveIntegerField(
        null=True, blank=True, help_text="The most examples this session may write, retracted ones included "
                                         "(an MTurk assignment's cap); empty: no cap.")
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.ANY, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True,
                                      help_text="When it ends, if set (instead of the default maximum age).")
    provisional = models.BooleanField(
        default=False, help_text="Its validations count only once it is confirmed (an MTurk assignment's, "
                                 "once MTurk shows the worker really did it).")
    end_reason = models.CharField(max_length=300, blank=True,
                                  help_text="Why it was ended, as its token's users read it.")
    auth_hash = models.CharField(max_length=128, blank=True, editable=False,
                                 help_text="The user's session auth hash when the session began "
                                           "(password changes end it).")
    login_key = models.CharField(max_length=64, blank=True, editable=False,
                                 help_text="A hash of the sign-in session it was started from (sign-out ends it).")
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["user", "task", "-created_at"]),
            models.Index(fields=["created_at", "id"], name="session_created"),  # the admin's order
        ]

    def __str__(self):
        return f"{self.user} on {self.task.slug} ({self.created_at:%Y-%m-%d %H:%M})"


class IdempotentRequest(models.Model):
    """The first answer to a write sent with an ``Idempotency-Key``: a retry with the
    same key gets this answer again, and nothing is stored twice. Written in the
    same transaction as the write it answers."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="sha256 of the method, path and body.")
    status_code = models.PositiveSmallIntegerField()
    body = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotency_key_unique_per_user")]

    def __str__(self):
        return f"{self.user} key {self.key[:20]}"


class ReliabilityFit(models.Model):
    """The last fit of a task's validator reliability model (``annotation.reliability_model``):
    when, on how much, and each stratum's share of right writers. Its validators' rows
    are ``ValidatorReliability``."""

    task = models.OneToOneField("tasks.Task", on_delete=models.CASCADE, related_name="reliability_fit")
    fitted_at = models.DateTimeField(null=True, blank=True)
    votes = models.PositiveIntegerField(default=0, help_text="Counted decisions the fit read.")
    anchors = models.PositiveIntegerField(default=0, help_text="Examples a researcher decided (known truths).")
    validators = models.PositiveIntegerField(default=0)
    iterations = models.PositiveIntegerField(default=0)
    converged = models.BooleanField(default=False)
    seconds = models.FloatField(default=0.0, help_text="Reading, fitting and storing, all together.")
    fit_seconds = models.FloatField(default=0.0, help_text="The EM itself.")
    prior_right = models.JSONField(default=dict, blank=True,
                                   help_text="By stratum (fooled, not_fooled, no_model): the share of right writers.")
    overall_prior_right = models.FloatField(null=True, blank=True)

    def __str__(self):
        when = f"{self.fitted_at:%Y-%m-%d %H:%M}" if self.fitted_at else "never"
        return f"reliability of {self.task.slug}'s validators (fitted {when})"


class ValidatorReliability(models.Model):
    """One validator's estimated reliability on one task: Beta posteriors over
    sensitivity (says correct when the writer is right) and specificity (says
    incorrect when the writer is wrong), as pseudo-counts, and the accuracy they
    imply with a 95% interval. Researchers see these; validators never see each
    other's."""

    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="validator_reliabilities")
    validator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    s_hits = models.FloatField()
    s_misses = models.FloatField()
    t_hits = models.FloatField()
    t_misses = models.FloatField()
    votes = models.PositiveIntegerField(default=0)
    sensitivity = models.FloatField()
    specificity = models.FloatField()
    accuracy = models.FloatField()
    accuracy_low = models.FloatField()
    accuracy_high = models.FloatField()
    weight = models.FloatField(help_text="How much one vote moves a decision (log odds, the smaller of the two "
                                         "ways; 0 for a validator no better than chance).")
    fitted_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["task", "validator"], name="one_reliability_per_validator")]
        indexes = [
            # The estimates refitted since a watermark (the crowd's quality check of validation batches).
            models.Index(fields=["task", "fitted_at"], name="reliability_task_fitted"),
            models.Index(fields=["task", "-votes", "-id"], name="reliability_task_votes"),  # the admin's order
        ]
        verbose_name_plural = "validator reliabilities"

    def __str__(self):
        return f"{self.validator} on {self.task.slug}: {self.accuracy:.1%} ({self.votes} votes)"


class RoundCounts(models.Model):
    """The numbers a round's pages show, kept as counters beside the rows
    (``services.counters``): each write that changes one updates it in the same
    transaction, and ``manage.py reconcile_counts`` recounts them from the rows.

    *Collected* examples were written on the platform (``source="annotation"``), not
    retracted, and not in an unconfirmed MTurk assignment (``Example.provisional``).
    *Usable* examples, by split, are those training and evaluation read: verified, not
    flagged, not retracted, of any source. Signed: a counter that drifted below zero
    never fails a write; the reconcile repairs it."""

    round = models.OneToOneField("tasks.Round", on_delete=models.CASCADE, primary_key=True, related_name="counts")
    collected = models.BigIntegerField(default=0)
    fooled = models.BigIntegerField(default=0, help_text="Collected examples that fooled the model.")
    verified = models.BigIntegerField(default=0, help_text="Collected examples validated correct.")
    verified_fooled = models.BigIntegerField(default=0)
    rejected = models.BigIntegerField(default=0, help_text="Collected examples validated incorrect.")
    rejected_fooled = models.BigIntegerField(default=0)
    decisions = models.BigIntegerField(default=0, help_text="Validators' decisions on collected examples, "
                                                            "counted towards the outcome or not.")
    blind_answers = models.BigIntegerField(default=0, help_text="Blind answers on collected examples.")
    blind_agreeing = models.BigIntegerField(default=0, help_text="Those that agreed with the writer's answer.")
    counted_votes = models.BigIntegerField(
        default=0, help_text="Counted correct/incorrect decisions of validators (not researchers) on written "
                             "examples: what the reliability model learns from.")
    usable_train = models.BigIntegerField(default=0)
    usable_dev = models.BigIntegerField(default=0)
    usable_test = models.BigIntegerField(default=0)
    usable_fooled_train = models.BigIntegerField(default=0)
    usable_fooled_dev = models.BigIntegerField(default=0)
    usable_fooled_test = models.BigIntegerField(default=0)
    reconciled_at = models.DateTimeField(null=True, blank=True, help_text="When the rows were last recounted.")

    class Meta:
        verbose_name_plural = "round counts"

    def __str__(self):
        return f"counts of round {self.round_id}"


class WriterCounts(models.Model):
    """One writer's counters in one round (``services.counters``): their collected
    examples, how many fooled the model and were verified, the blind answers
    validators gave to them, and their record (``in_record``): what a crowd quality
    check reads, in rows per writer instead of the writer's whole history."""

    round = models.ForeignKey("tasks.Round", on_delete=models.CASCADE, related_name="writer_counts")
    annotator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    collected = models.BigIntegerField(default=0)
    fooled = models.BigIntegerField(default=0)
    verified = models.BigIntegerField(default=0)
    verified_fooled = models.BigIntegerField(default=0)
    blind_answers = models.BigIntegerField(default=0)
    blind_agreeing = models.BigIntegerField(default=0)
    record_decided = models.BigIntegerField(
        default=0, help_text="Their confirmed examples the writer's quality is judged on: verified, rejected, "
                             "or retracted on the way to rejection (retracted or not).")
    record_verified = models.BigIntegerField(
        default=0, help_text="Of their confirmed examples, those verified (retracted or not).")

    class Meta:
        verbose_name_plural = "writer counts"
        constraints = [models.UniqueConstraint(fields=["round", "annotator"], name="one_count_per_round_writer")]
        indexes = [models.Index(fields=["round", "-verified_fooled", "-fooled", "annotator"],
                                name="writer_counts_ranking")]

    def __str__(self):
        return f"counts of {self.annotator_id} in round {self.round_id}"


# --- keeping the counters ------------------------------------------------------------------
# What each example and each validation adds to its round's counters, and the F() updates
# that move them. Example.save and Validation.save call these; services.counters adds the
# bulk paths (imports, deletes) and the reconcile.

VERIFIED, REJECTED = Example.ValidationStatus.VERIFIED, Example.ValidationStatus.REJECTED
SPLITS = tuple(Example.Split.values)
DECISIONS = (Validation.Label.CORRECT, Validation.Label.INCORRECT)
EXAMPLE_COUNTS = ("collected", "fooled", "verified", "verified_fooled", "rejected", "rejected_fooled",
                  *(f"usable_{split}" for split in SPLITS), *(f"usable_fooled_{split}" for split in SPLITS))
VALIDATION_COUNTS = ("decisions", "blind_answers", "blind_agreeing")
ROUND_COUNTS = (*EXAMPLE_COUNTS, *VALIDATION_COUNTS, "counted_votes")
RECORD_COUNTS = ("record_decided", "record_verified")
WRITER_COUNTS = ("collected", "fooled", "verified", "verified_fooled", "blind_answers", "blind_agreeing",
                 *RECORD_COUNTS)
# The example fields its counters and its place in the queue depend on.
COUNTED_INPUTS = frozenset({"round", "annotator", "source", "retracted", "provisional", "fooled",
                            "validation_status", "flagged", "split", "validations_correct",
                            "validations_incorrect"})
COUNTED_ATTNAMES = frozenset({"id", "round_id", "annotator_id", "source", "retracted", "provisional", "fooled",
                              "validation_status", "flagged", "split", "validations_correct",
                              "validations_incorrect"})
QUEUE_INPUTS = frozenset({"source", "validation_status", "retracted", "flagged", "provisional", "fooled",
                          "validations_correct", "validations_incorrect", "validations_flagged",
                          "decision_posterior"})
VALIDATION_COUNTED_ATTNAMES = frozenset({"id", "example_id", "label", "blind_answer", "blind_agrees", "counted",
                                         "mode"})


def is_collected(example) -> bool:
    """Written on the platform, not retracted, and not in an unconfirmed MTurk assignment."""
    return example.source == Example.Source.ANNOTATION and not example.retracted and not example.provisional


def counts_against_writer(example) -> bool:
    """Rejected, or retracted while heading for rejection: undecided, with at least one
    counted "incorrect" vote and no more "correct" ones. (A retracted example whose votes
    so far agreed with the writer, or that had none, leaves the record.)"""
    if example.validation_status == REJECTED:
        return True
    return bool(example.retracted and example.validation_status in (Example.ValidationStatus.PENDING,
                                                                    Example.ValidationStatus.ESCALATED)
                and 0 < example.validations_incorrect and example.validations_correct <= example.validations_incorrect)


def in_record(example) -> bool:
    """Confirmed work the writer's quality is judged on: written on the platform, not in an
    unconfirmed MTurk assignment, and verified or ``counts_against_writer``."""
    return (example.source == Example.Source.ANNOTATION and not example.provisional
            and (example.validation_status == VERIFIED or counts_against_writer(example)))


def example_share(example) -> Counter:
    """What ``example`` adds to its round's counters (and its writer's) by its own fields."""
    share = Counter()
    fooled = example.fooled is True
    if in_record(example):
        share.update(record_decided=1, record_verified=example.validation_status == VERIFIED)
    if is_collected(example):
        verified, rejected = example.validation_status == VERIFIED, example.validation_status == REJECTED
        share.update(collected=1, fooled=fooled, verified=verified, verified_fooled=verified and fooled,
                     rejected=rejected, rejected_fooled=rejected and fooled)
    if example.validation_status == VERIFIED and not example.flagged and not example.retracted:
        share[f"usable_{example.split}"] += 1
        share[f"usable_fooled_{example.split}"] += fooled
    return +share


class ExampleSnapshot:
    __slots__ = ("round_id", "annotator_id", "collected", "share")

    def __init__(self, example):
        self.round_id, self.annotator_id = example.round_id, example.annotator_id
        self.collected, self.share = is_collected(example), example_share(example)


def _example_snapshot(example) -> ExampleSnapshot:
    return ExampleSnapshot(example)


class Tally:
    """Counter changes gathered for one write: by round, and by round and writer."""

    def __init__(self):
        self.rounds: dict[int, Counter] = defaultdict(Counter)
        self.writers: dict[tuple[int, int], Counter] = defaultdict(Counter)

    def add(self, round_id: int, annotator_id: int | None, share: Counter, sign: int = 1) -> None:
        for name, n in share.items():
            if name in ROUND_COUNTS:
                self.rounds[round_id][name] += sign * n
            if annotator_id is not None and name in WRITER_COUNTS:
                self.writers[(round_id, annotator_id)][name] += sign * n

    def apply(self) -> None:
        """Move the counters by the gathered changes (``F()`` updates, in the caller's transaction)."""
        for round_id, delta in sorted(self.rounds.items()):
            _bump(RoundCounts, {"round_id": round_id}, delta)
        for (round_id, annotator_id), delta in sorted(self.writers.items()):
            _bump(WriterCounts, {"round_id": round_id, "annotator_id": annotator_id}, delta)


def _bump(model, key: dict, delta: Counter) -> None:
    changes = {name: F(name) + n for name, n in delta.items() if n}
    if not changes or model.objects.filter(**key).update(**changes):
        return
    try:
        with transaction.atomic():
            model.objects.create(**key)
    except IntegrityError:
        pass  # made meanwhile by another writer
    model.objects.filter(**key).update(**changes)


def validation_totals(example_ids) -> dict[int, Counter]:
    """What each example's validations add to the counters while it is collected."""
    rows = (Validation.objects.filter(example_id__in=list(example_ids)).order_by().values("example_id")
            .annotate(n_decisions=Count("pk", filter=~Q(label="")),
                      n_blind=Count("pk", filter=Q(blind_answer__isnull=False)),
                      n_agreeing=Count("pk", filter=Q(blind_answer__isnull=False, blind_agrees=True))))
    return {row["example_id"]: +Counter(decisions=row["n_decisions"], blind_answers=row["n_blind"],
                                        blind_agreeing=row["n_agreeing"]) for row in rows}


def _tally_example(pk: int, before: ExampleSnapshot | None, after: ExampleSnapshot) -> None:
    tally = Tally()
    if before is not None:
        tally.add(before.round_id, before.annotator_id, before.share, -1)
    tally.add(after.round_id, after.annotator_id, after.share)
    if before is not None and (before.collected or after.collected) and (
            before.collected != after.collected
            or (before.round_id, before.annotator_id) != (after.round_id, after.annotator_id)):
        was = before.collected
        validations = validation_totals([pk]).get(pk)  # (a new example has none)
        if validations:
            if was:
                tally.add(before.round_id, before.annotator_id, validations, -1)
            if after.collected:
                tally.add(after.round_id, after.annotator_id, validations)
    tally.apply()


def forget_examples(examples) -> None:
    """``examples`` are about to be deleted: they and their validations leave the counters."""
    examples = list(examples)
    validations = validation_totals([e.pk for e in examples if is_collected(e)])
    tally = Tally()
    for example in examples:
        tally.add(example.round_id, example.annotator_id, example_share(example), -1)
        if example.pk in validations:
            tally.add(example.round_id, example.annotator_id, validations[example.pk], -1)
    counted = (Validation.objects.filter(example__in=[e.pk for e in examples],
                                         example__source=Example.Source.ANNOTATION,
                                         counted=True, mode=Validation.Mode.USER, label__in=DECISIONS)
               .order_by().values("example__round_id").annotate(n=Count("pk")))
    for row in counted:
        tally.rounds[row["example__round_id"]]["counted_votes"] -= row["n"]
    tally.apply()


def forget_validations(validations) -> None:
    """``validations`` (each with its ``example``) are about to be deleted: their shares
    (decisions, blind answers, counted votes) leave the counters."""
    for validation in validations:
        _tally_validation(validation.example, _validation_snapshot(validation), Counter())


def _validation_snapshot(validation) -> Counter:
    """What a validation adds, if its example is collected (decisions, blind answers) or
    written on the platform (counted votes)."""
    blind = validation.blind_answer is not None
    return +Counter(decisions=bool(validation.label), blind_answers=blind,
                    blind_agreeing=blind and validation.blind_agrees is True,
                    counted_votes=validation.counted and validation.mode == Validation.Mode.USER
                    and validation.label in DECISIONS)


def _tally_validation(example, before: Counter | None, after: Counter) -> None:
    delta = Counter(after)
    delta.subtract(before or Counter())
    if not any(delta.values()):
        return
    tally = Tally()
    if not is_collected(example):
        delta = Counter({name: n for name, n in delta.items() if name == "counted_votes"})
    if example.source != Example.Source.ANNOTATION:
        delta.pop("counted_votes", None)
    tally.add(example.round_id, example.annotator_id, delta)
    tally.apply()


class OnboardingRecord(models.Model):
    """A worker's onboarding on a task (its config's ``onboarding``): the try under way
    (``answers``: item number -> whether it was right), the items served in the tries
    finished (``seen``: never served to them again), the tries finished, and whether
    they passed or failed every try allowed (``blocked_at``: then they may not write or
    validate on the task). One row per user and task, for site accounts and MTurk
    workers alike (``annotation.onboarding``)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="onboarding_records")
    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="onboarding_records")
    answers = models.JSONField(default=dict, blank=True,
                               help_text="The try under way: item number -> whether the answer was right.")
    seen = models.JSONField(default=list, blank=True,
                            help_text="The items of the tries finished (numbers in the task's pool): each was "
                                      "answered with feedback, so no later try of this worker serves it.")
    tries = models.PositiveIntegerField(default=0, help_text="Tries finished (every item answered).")
    last_score = models.PositiveIntegerField(null=True, blank=True, help_text="Items right in the last finished try.")
    passed_at = models.DateTimeField(null=True, blank=True)
    blocked_at = models.DateTimeField(null=True, blank=True,
                                      help_text="Failed every try allowed: kept out of the task's work.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "task"], name="one_onboarding_per_user_and_task")]
        # What changed since a watermark (the crowd's resync of the platforms' grants).
        indexes = [models.Index(fields=["updated_at"], name="onboarding_updated_at")]

    def __str__(self):
        state = "passed" if self.passed_at else "blocked" if self.blocked_at else f"{self.tries} tries"
        return f"{self.user} on {self.task.slug}: {state}"
