"""The task catalogue: tasks, their rounds and contexts.

A round's target models are ``registry.ModelVersion`` rows (the app below this
one); jobs are ``jobs.Job`` rows (below that). Neither app imports this one: they
point at ``Task`` and ``Round`` by name (docs/architecture.md).
"""

import json
from functools import lru_cache

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import reverse

from core.errors import InvalidInput

from .config import TASK_TYPES, TaskConfig, validate_task_config


@lru_cache(maxsize=256)
def _parsed_config(task_type: str, config_json: str) -> TaskConfig:
    """Schema checks run once per distinct config in a process, not per request."""
    return validate_task_config(task_type, json.loads(config_json))


class TaskQuerySet(models.QuerySet):
    def public(self):
        return self.filter(is_active=True, is_hidden=False)

    def visible_to(self, user):
        """Public tasks, plus the ones the user researches (all of them for superusers)."""
        if user.is_authenticated and user.is_superuser:
            return self.all()
        if user.is_authenticated:
            return self.filter(models.Q(is_active=True, is_hidden=False) | models.Q(owners=user)).distinct()
        return self.public()

    def researched_by(self, user):
        """The tasks whose rows ``user`` may manage: all for superusers, else the ones they own."""
        if user.is_authenticated and user.is_superuser:
            return self.all()
        if user.is_authenticated:
            return self.filter(owners=user)
        return self.none()


class Task(models.Model):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    task_type = models.CharField("type", max_length=20, choices=TASK_TYPES)
    config = models.JSONField(help_text="Checked against the task config schema (see tasks/config.py).")
    goal = models.CharField(max_length=300, blank=True)
    instructions = models.TextField(blank=True)
    content_warning = models.CharField(max_length=300, blank=True)
    is_active = models.BooleanField("active", default=True)
    is_hidden = models.BooleanField("hidden", default=False,
                                    help_text="Hidden tasks are visible only to their researchers.")
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
        return reverse("task-detail", args=[self.slug])

    def clean(self):
        super().clean()
        validate_task_config(self.task_type, self.config)

    @property
    def parsed_config(self) -> TaskConfig:
        # Keyed by the config's JSON text: every request loads a fresh Task, and an
        # in-place edit of ``config`` gives a new key rather than a stale answer.
        return _parsed_config(self.task_type, json.dumps(self.config, sort_keys=True))

    @property
    def is_public(self) -> bool:
        return self.is_active and not self.is_hidden

    def open_round(self):
        # Not ``self.rounds``: Round's default ordering (task, number) would join the
        # task table to sort by its name; at most one round is open anyway.
        return Round.objects.filter(task_id=self.pk, status=Round.Status.OPEN).order_by("pk").first()


STATIC_ROUND = 0


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
    target_models = models.ManyToManyField("registry.ModelVersion", blank=True, related_name="target_of_rounds")
    ensemble_mode = models.CharField(max_length=10, choices=EnsembleMode.choices, default=EnsembleMode.SINGLE)
    description = models.TextField(blank=True)
    starts_at = models.DateTimeField(null=True, blank=True)
    ends_at = models.DateTimeField(null=True, blank=True)
    opened_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task", "number"]
        constraints = [
            models.UniqueConstraint(fields=["task", "number"], name="round_number_unique_per_task"),
            models.UniqueConstraint(
                fields=["task"], condition=models.Q(status="open"), name="one_open_round_per_task"
            ),
            models.CheckConstraint(condition=models.Q(number__gte=0), name="round_number_not_negative"),
            # Round 0 holds the static data a task starts from; nobody collects into it.
            models.CheckConstraint(condition=~models.Q(number=0, status="open"), name="round_zero_never_open"),
        ]

    def __str__(self):
        return f"{self.task.slug} round {self.number}"

    @property
    def is_static(self) -> bool:
        """Round 0: the static data (MNLI, SST-2, Davidson...) the first target learns from."""
        return self.number == STATIC_ROUND

    def clean(self):
        super().clean()
        if self.starts_at and self.ends_at and self.ends_at <= self.starts_at:
            raise ValidationError({"ends_at": "The round must end after it starts."})


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
        indexes = [
            models.Index(fields=["task", "is_active", "times_used"]),
            # The admin's list: one task's contexts in order, and the search by external id or tag.
            models.Index(fields=["task", "id"], name="context_task_id"),
            models.Index(fields=["external_id"], name="context_external_id"),
            models.Index(fields=["tag"], name="context_tag"),
        ]

    def __str__(self):
        first = next(iter(self.fields.values()), "") if isinstance(self.fields, dict) else ""
        return f"{self.task.slug} context {self.pk}: {str(first)[:60]}"

    def clean(self):
        super().clean()
        if self.round_id and self.task_id and self.round.task_id != self.task_id:
            raise ValidationError({"round": "The round belongs to another task."})
        if self.task_id:
            try:
                self.task.parsed_config.clean_context_fields(self.fields)
            except InvalidInput as exc:
                raise ValidationError({"fields": str(exc)}) from None
