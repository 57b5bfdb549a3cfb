import json
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import reverse

from .config import TASK_TYPES, TaskConfig, validate_task_config


@lru_cache(maxsize=256)
def _parsed_config(task_type: str, config_json: str) -> TaskConfig:
    """Schema checks run once per distinct config in a process, not per request."""
    return validate_task_config(task_type, json.loads(config_json))


class TaskQuerySet(models.QuerySet):
    def public(self):
        return self.filter(is_active=True, is_hidden=False)

    def visible_to(self, user):
        """Public tasks, plus hidden ones the user researches."""
        if user.is_authenticated and user.is_staff:
            return self.all()
        if user.is_authenticated:
            return self.filter(models.Q(is_active=True, is_hidden=False) | models.Q(owners=user)).distinct()
        return self.public()


class Task(models.Model):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    task_type = models.CharField("type", max_length=20, choices=TASK_TYPES)
    config = models.JSONField(help_text="Checked against the task config schema (see tasks/config.py).")
    goal = models.CharField(max_length=300, blank=True)
    instructions = models.TextField(blank=True)
    content_warning = models.CharField(max_length=300, blank=True)
    is_active = models.BooleanField("active", default=True)
    is_hidden = models.BooleanField("hidden", default=False, help_text="Hidden tasks are visible only to their researchers.")
    owners = models.ManyToManyField(
        settings.AUTH_USER_MODEL, blank=True, related_name="owned_tasks",
        help_text="Researchers who own the task: they can edit it and their validations decide at once.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TaskQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("tasks:detail", args=[self.slug])

    def clean(self):
        super().clean()
        validate_task_config(self.task_type, self.config)

    @property
    def parsed_config(self) -> TaskConfig:
        # Keyed by the config's JSON text: every request loads a fresh Task, and an
        # in-place edit of ``config`` gives a new key rather than a stale answer.
        return _parsed_config(self.task_type, json.dumps(self.config, sort_keys=True))

    def is_owned_by(self, user) -> bool:
        return bool(user and user.is_authenticated) and (
            user.is_staff or self.owners.filter(pk=user.pk).exists()
        )

    def open_round(self):
        # Not ``self.rounds``: Round's default ordering (task, number) would join the
        # task table to sort by its name; at most one round is open anyway.
        return Round.objects.filter(task_id=self.pk, status=Round.Status.OPEN).order_by("pk").first()


class Round(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        OPEN = "open", "Open"
        CLOSED = "closed", "Closed"

    class EnsembleMode(models.TextChoices):
        SINGLE = "single", "Single model"
        MEAN = "mean", "Ensemble: mean of probabilities (best span for QA)"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="rounds")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.DRAFT)
    target_models = models.ManyToManyField("leaderboard.ModelVersion", blank=True, related_name="target_of_rounds")
    ensemble_mode = models.CharField(max_length=10, choices=EnsembleMode.choices, default=EnsembleMode.SINGLE)
    description = models.TextField(blank=True)
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    opened_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Counters, kept with F() updates by the annotation services.
    examples_collected = models.PositiveIntegerField(default=0)
    examples_fooled = models.PositiveIntegerField(default=0)
    examples_verified_fooled = models.PositiveIntegerField(default=0)
    validations_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task", "number"]
        constraints = [
            models.UniqueConstraint(fields=["task", "number"], name="round_number_unique_per_task"),
            models.UniqueConstraint(
                fields=["task"], condition=models.Q(status="open"), name="one_open_round_per_task"
            ),
            models.CheckConstraint(condition=models.Q(number__gte=1), name="round_number_positive"),
        ]

    def __str__(self):
        return f"{self.task.slug} round {self.number}"

    def clean(self):
        super().clean()
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            raise ValidationError({"ends_at": "The round must end after it starts."})

    @property
    def model_error_rate(self) -> float | None:
        return self.examples_fooled / self.examples_collected if self.examples_collected else None

    @property
    def verified_model_error_rate(self) -> float | None:
        if not self.examples_collected:
            return None
        return self.examples_verified_fooled / self.examples_collected


class Context(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="contexts")
    round = models.ForeignKey(
        Round, on_delete=models.SET_NULL, null=True, blank=True, related_name="contexts",
        help_text="Empty: usable in every round.",
    )
    external_id = models.CharField(
        max_length=200, blank=True, help_text="Id in the source it was imported from; unique per task."
    )
    fields = models.JSONField(help_text="The context's text fields, as named in the task config.")
    tag = models.CharField(max_length=100, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    is_active = models.BooleanField(default=True)
    times_used = models.PositiveIntegerField(default=0)
    times_fooled = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "external_id"], condition=~models.Q(external_id=""),
                name="context_external_id_unique_per_task",
            ),
        ]
        indexes = [models.Index(fields=["task", "is_active", "times_used"])]

    def __str__(self):
        first = next(iter(self.fields.values()), "") if isinstance(self.fields, dict) else ""
        return f"{self.task.slug} context {self.pk}: {str(first)[:60]}"

    def clean(self):
        super().clean()
        if self.round_id and self.task_id and self.round.task_id != self.task_id:
            raise ValidationError({"round": "The round belongs to another task."})
        if not isinstance(self.fields, dict):
            raise ValidationError({"fields": "Fields must be a JSON object of text fields."})
        if self.task_id:
            expected = set(self.task.parsed_config.context_field_names)
            missing = expected - set(self.fields)
            unknown = set(self.fields) - expected
            if missing or unknown:
                raise ValidationError({"fields": (
                    f"Expected the fields {sorted(expected)}; missing {sorted(missing)}, unknown {sorted(unknown)}."
                )})
            bad = [k for k, v in self.fields.items() if not isinstance(v, str)]
            if bad:
                raise ValidationError({"fields": f"Fields must be text: {sorted(bad)}."})


class Job(models.Model):
    """A long job (training, evaluation, import): status and progress for pages."""

    class Kind(models.TextChoices):
        TRAIN_MODEL = "train_model", "Train a model"
        EVALUATE_MODEL = "evaluate_model", "Evaluate a model"
        IMPORT_DATASET = "import_dataset", "Import a data set"
        HEALTH_CHECK = "health_check", "Health check"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"

    kind = models.CharField(max_length=30, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0, help_text="0-100")
    task = models.ForeignKey(Task, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs")
    params = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    celery_task_id = models.CharField(max_length=100, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(progress__lte=100), name="job_progress_at_most_100"),
        ]

    def __str__(self):
        return f"{self.get_kind_display()} #{self.pk} ({self.status})"
