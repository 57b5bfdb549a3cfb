"""Jobs: the rows that long work (training, evaluation, exports, releases) reports to.

The engine that runs them is ``jobs/engine.py``. A job may name the task it works
for (``tasks.Task``, by name: this app sits below the task catalogue and never
imports it).
"""

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from core.durations import hours_minutes


class Job(models.Model):
    """A long job (training, evaluation): status, progress, log and heartbeat for pages.

    A worker claims a queued job, beats while it works (``heartbeat_at``, with each
    progress report) and stops at its next report once the job is no longer
    running (cancelled, or failed by the sweeper). See ``jobs/engine.py``.
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
    task = models.ForeignKey("tasks.Task", on_delete=models.SET_NULL, null=True, blank=True, related_name="jobs")
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
        db_table = "tasks_job"  # made in tasks/ before the job engine had its own app; kept, so no data moves
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(progress__lte=100), name="job_progress_at_most_100"),
            # One training job per task at a time: a second is refused (409), never queued behind.
            models.UniqueConstraint(
                fields=["task"], condition=models.Q(kind="train_model", status__in=["queued", "running"]),
                name="one_active_training_per_task",
            ),
        ]
        indexes = [models.Index(fields=["status", "queue", "created_at"], name="tasks_job_status_3e4ba0_idx")]

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
        def minutes(seconds: float) -> str:
            return hours_minutes(max(seconds, 60))  # "about 1 minute" at the least, never "0 minutes"

        kind = {Job.Kind.TRAIN_MODEL: "training", Job.Kind.EVALUATE_MODEL: "evaluation",
                Job.Kind.CHECK_SUBMISSION: "check",
                Job.Kind.RELEASE_DATASET: "release"}.get(self.kind, self.get_kind_display().lower())
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
