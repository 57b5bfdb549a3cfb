"""Tasks, their rounds and contexts, the model registry the rounds point at, and Jobs.

The registry (``ModelVersion``) sits here, next to ``Round``, because a round's
target models are part of what a round is; training and evaluating models is the
business of the apps above (docs/architecture.md).
"""

import json
from datetime import timedelta
from functools import lru_cache
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import reverse
from django.utils import timezone

from core.errors import InvalidInput

from . import artifacts
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
    target_models = models.ManyToManyField("ModelVersion", blank=True, related_name="target_of_rounds")
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


class Job(models.Model):
    """A long job (training, evaluation): status, progress, log and heartbeat for pages.

    A worker claims a queued job, beats while it works (``heartbeat_at``, with each
    progress report) and stops at its next report once the job is no longer
    running (cancelled, or failed by the sweeper). See ``tasks/jobs.py``.
    """

    class Kind(models.TextChoices):
        TRAIN_MODEL = "train_model", "Train a model"
        EVALUATE_MODEL = "evaluate_model", "Evaluate a model"
        HEALTH_CHECK = "health_check", "Health check"
        CHECK_SUBMISSION = "check_submission", "Check a submitted model"
        EXPORT_EXAMPLES = "export_examples", "Export examples"
        RELEASE_DATASET = "release_dataset", "Release a data set"

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE = (Status.QUEUED, Status.RUNNING)
    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)

    kind = models.CharField(max_length=30, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0, help_text="0-100")
    task = models.ForeignKey(Task, on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs")
    params = models.JSONField(default=dict, blank=True)
    result = models.JSONField(default=dict, blank=True)
    log = models.TextField(blank=True)
    error = models.TextField(blank=True)
    celery_task_id = models.CharField(max_length=100, blank=True)
    celery_task_name = models.CharField(max_length=100, blank=True, help_text="What runs it (for re-runs).")
    queue = models.CharField(max_length=30, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Times a worker has started it.")
    rerun_of = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="reruns")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(progress__lte=100), name="job_progress_at_most_100"),
            # One training job per task at a time: a second is refused (409), never queued behind.
            models.UniqueConstraint(
                fields=["task"], condition=models.Q(kind="train_model", status__in=["queued", "running"]),
                name="one_active_training_per_task",
            ),
        ]
        indexes = [models.Index(fields=["status", "queue", "created_at"])]

    def __str__(self):
        return f"{self.get_kind_display()} #{self.pk} ({self.status})"

    def get_absolute_url(self):
        return reverse("job-detail", args=[self.pk])

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE

    @property
    def seconds_left(self) -> float | None:
        """Time left, from the pace so far (None until it has made progress)."""
        if self.status != self.Status.RUNNING or not self.started_at or not 0 < self.progress < 100:
            return None
        elapsed = (timezone.now() - self.started_at).total_seconds()
        return max(0.0, elapsed * (100 - self.progress) / self.progress)

    def queue_position(self) -> int | None:
        """1 = next to start on its queue; None once it has started."""
        if self.status != self.Status.QUEUED:
            return None
        ahead = Job.objects.filter(status=self.Status.QUEUED, queue=self.queue, created_at__lt=self.created_at)
        return ahead.count() + 1

    def estimated_start(self):
        """When a queued job should start, assuming one worker on its queue: the time
        left of the running jobs there, plus the typical run time (the median of
        the last 20 finished jobs of their kind) of each job queued ahead. None
        once started, or with no history to go by."""
        if self.status != self.Status.QUEUED:
            return None
        on_queue = Job.objects.filter(queue=self.queue)
        ahead = list(on_queue.filter(status=self.Status.QUEUED, created_at__lt=self.created_at)
                     .values_list("kind", flat=True))
        running = list(on_queue.filter(status=self.Status.RUNNING))
        typical = {}
        for kind in {*ahead, *(job.kind for job in running)}:
            done = (Job.objects.filter(kind=kind, status=self.Status.SUCCEEDED, started_at__isnull=False,
                                       finished_at__isnull=False)
                    .order_by("-finished_at").values_list("started_at", "finished_at")[:20])
            durations = sorted((end - start).total_seconds() for start, end in done)
            if not durations:
                return None
            typical[kind] = durations[len(durations) // 2]
        wait = sum(typical[kind] for kind in ahead)
        for job in running:
            left = job.seconds_left
            wait += left if left is not None else typical[job.kind]
        return timezone.now() + timedelta(seconds=wait)

    def describe_progress(self) -> str:
        """Where an active job stands, in words a page can show: its place in the queue and
        when it should start (``estimated_start``), or how far it is and the time left."""
        from core.durations import hours_minutes

        def minutes(seconds: float) -> str:
            return hours_minutes(max(seconds, 60))  # "about 1 minute" at the least, never "0 minutes"

        kind = {Job.Kind.TRAIN_MODEL: "training", Job.Kind.EVALUATE_MODEL: "evaluation",
                Job.Kind.CHECK_SUBMISSION: "check", Job.Kind.RELEASE_DATASET: "release"}.get(self.kind, self.get_kind_display().lower())
        what = f"{kind} job #{self.pk}"
        if self.status == Job.Status.QUEUED:
            position = self.queue_position()
            text = f"{what} is queued, {'next' if position == 1 else f'number {position}'} in line"
            start = self.estimated_start()
            if start is not None:
                text += f", to start in about {minutes((start - timezone.now()).total_seconds())}"
            return text
        left = self.seconds_left
        return f"{what} is {self.progress}% done" + (f", about {minutes(left)} left" if left is not None else "")


def resolve_artifact_path(artifact_path: str) -> Path:
    """Where a stored artifact path points in this process, without fetching it: a
    relative one is under this process's DYNABENCH_MODELS_DIR (workers on other
    machines have their own), an s3:// one in this machine's cache (tasks.artifacts)."""
    return artifacts.local_path(artifact_path)


class ModelVersion(models.Model):
    """A trained model artifact registered for a task (the registry rounds point at)."""

    class Status(models.TextChoices):
        READY = "ready", "Ready"
        RETIRED = "retired", "Retired"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="model_versions")
    name = models.CharField(max_length=100)
    artifact_path = models.CharField(
        max_length=500, help_text="Artifact directory; relative paths are under DYNABENCH_MODELS_DIR."
    )
    sha256 = models.CharField(max_length=64, help_text="Digest over the artifact's files, checked on load.")
    backbone = models.CharField(max_length=200, blank=True)
    parent = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="children",
        help_text="The model this one was fine-tuned from, if any.",
    )
    trained_on_rounds = models.ManyToManyField(Round, blank=True, related_name="trained_models")
    training_data = models.JSONField(default=dict, blank=True, help_text="Sources and counts per split and label.")
    metrics = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.READY)
    is_public = models.BooleanField(
        "public", default=True,
        help_text="Shown on the public leaderboard; a private one only to its owner and the task's researchers.")
    submitted = models.BooleanField(default=False, help_text="Uploaded by a user (not trained on the platform).")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["task", "name"], name="model_name_unique_per_task"),
        ]

    def __str__(self):
        return f"{self.task.slug}/{self.name}"

    @property
    def artifact_dir(self) -> Path:
        """The artifact's folder on this machine, downloaded first from object storage
        if it is not here yet (``tasks.artifacts.ensure_local``)."""
        return artifacts.ensure_local(self.artifact_path, self.sha256)
