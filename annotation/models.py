import uuid

from django.conf import settings
from django.db import models
from django.utils import timezone


class Example(models.Model):
    """One example: written by an annotator against a target model, or imported."""

    class ValidationStatus(models.TextChoices):
        PENDING = "pending", "Pending"
        VERIFIED = "verified", "Verified correct"
        REJECTED = "rejected", "Rejected (label incorrect)"
        FLAGGED = "flagged", "Flagged"
        ESCALATED = "escalated", "Undecided after the most votes: waits for a researcher"

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
    context = models.ForeignKey("tasks.Context", on_delete=models.PROTECT, null=True, blank=True, related_name="examples")
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
    model_versions = models.ManyToManyField("tasks.ModelVersion", blank=True, related_name="examples")
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
                  "counted vote (annotation.reliability).")
    latency_ms = models.FloatField(null=True, blank=True, help_text="Model latency when it was written.")
    signature = models.CharField(
        max_length=64, blank=True,
        help_text="HMAC over what was written, the target, the models' answers and fooled; checked before "
                  "an example is used (training data).")
    metadata = models.JSONField(default=dict, blank=True)
    session = models.ForeignKey("AnnotationSession", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="examples", help_text="The sitting it was written in.")
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
            models.Index(fields=["round", "split"]),
            models.Index(fields=["round", "source", "retracted"]),
            models.Index(fields=["task", "validation_status", "fooled"]),
            # The admin's list: one task's examples, newest first; and the search by external uid.
            # (On PostgreSQL a GIN index on the words of ``inputs`` serves the admin's text
            # search: migration 0006 creates it there only.)
            models.Index(fields=["task", "created_at"], name="example_task_created"),
            models.Index(fields=["validation_status", "created_at"], name="example_status_created"),
            # Few rows are flagged or retracted: these lists need not walk the others.
            models.Index(fields=["created_at"], condition=models.Q(flagged=True), name="example_flagged_created"),
            models.Index(fields=["created_at"], condition=models.Q(retracted=True), name="example_retracted_created"),
            models.Index(fields=["external_uid"], name="example_external_uid"),
        ]

    def __str__(self):
        return f"{self.task.slug} example {self.pk}"

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
    validator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="validations")
    label = models.CharField(max_length=10, choices=Label.choices, blank=True,
                             help_text="Empty until the validator decides (after their blind answer).")
    mode = models.CharField(max_length=5, choices=Mode.choices, default=Mode.USER)
    reason = models.CharField(max_length=500, blank=True)
    blind_answer = models.JSONField(null=True, blank=True,
                                    help_text="The validator's own answer, given before the writer's was shown.")
    blind_agrees = models.BooleanField(null=True, blank=True,
                                       help_text="Whether the blind answer agrees with the writer's, by the task's metric.")
    session = models.ForeignKey("AnnotationSession", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="validations", help_text="The sitting the decision was made in.")
    class NotCounted(models.TextChoices):
        COUNTED = "", "(counted)"
        PROVISIONAL = "provisional", "Made in an MTurk assignment that MTurk has not confirmed yet"
        NEW_ACCOUNT = "new_account", "The validator's account was too new"
        UNTRUSTED = "untrusted", "A paid example, and the validator had not earned trust on the task"

    counted = models.BooleanField(
        default=True, help_text="Whether the decision counts towards the example's outcome: one made in a "
                                "provisional session counts only once the session is confirmed.")
    not_counted_because = models.CharField(
        max_length=12, choices=NotCounted.choices, blank=True, default="",
        help_text="Why the decision does not count (stored and shown, but it decides nothing).")
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["example", "validator"], name="one_validation_per_validator"),
        ]
        indexes = [models.Index(fields=["created_at", "id"], name="validation_created")]  # the admin's order

    def __str__(self):
        said = self.label or "(blind answer only)"
        return f"{self.validator} says {said} on example {self.example_id}"


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

    def __str__(self):
        return f"example {self.example_id} served to {self.validator} until {self.expires_at:%Y-%m-%d %H:%M}"


class AccountAddress(models.Model):
    """An address an account was seen at (sign-up, sign-in, writing, validating, a HIT
    arrival), kept only as a keyed hash (``services.trust.address_hash``). Accounts that
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

    key = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="annotation_sessions")
    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="annotation_sessions")
    last_context = models.ForeignKey("tasks.Context", on_delete=models.SET_NULL, null=True, blank=True,
                                     related_name="+")
    examples_written = models.PositiveIntegerField(default=0)
    examples_fooled = models.PositiveIntegerField(default=0)
    validations_done = models.PositiveIntegerField(default=0)
    mturk_assignment_id = models.CharField(max_length=64, blank=True)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.ANY, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True,
                                      help_text="When it ends, if set (instead of the default maximum age).")
    provisional = models.BooleanField(
        default=False, help_text="Its validations count only once it is confirmed (an MTurk assignment's, "
                                 "once MTurk shows the worker really did it).")
    end_reason = models.CharField(max_length=300, blank=True, help_text="Why it was ended, as its token's users read it.")
    auth_hash = models.CharField(max_length=128, blank=True, editable=False,
                                 help_text="The user's session auth hash when the session began (password changes end it).")
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
    """The last fit of a task's validator reliability model (``annotation.reliability``):
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
        indexes = [models.Index(fields=["task", "-votes", "-id"], name="reliability_task_votes")]  # the admin's order
        verbose_name_plural = "validator reliabilities"

    def __str__(self):
        return f"{self.validator} on {self.task.slug}: {self.accuracy:.1%} ({self.votes} votes)"
