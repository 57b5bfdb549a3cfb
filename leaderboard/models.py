from pathlib import Path

from django.conf import settings
from django.db import models


def resolve_artifact_path(artifact_path: str) -> Path:
    """Where a stored artifact path points in this process: a relative one is under
    this process's DYNABENCH_MODELS_DIR (workers on other machines have their own)."""
    path = Path(artifact_path)
    return path if path.is_absolute() else Path(settings.DYNABENCH_MODELS_DIR) / path


class ModelVersion(models.Model):
    """A trained model artifact registered for a task."""

    class Status(models.TextChoices):
        READY = "ready", "Ready"
        RETIRED = "retired", "Retired"

    task = models.ForeignKey("tasks.Task", on_delete=models.CASCADE, related_name="model_versions")
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
    trained_on_rounds = models.ManyToManyField("tasks.Round", blank=True, related_name="trained_models")
    training_data = models.JSONField(default=dict, blank=True, help_text="Sources and counts per split and label.")
    metrics = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.READY)
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
        return resolve_artifact_path(self.artifact_path)


class Evaluation(models.Model):
    """A model's scores on one round's split (accuracy/F1, or EM/F1 for QA)."""

    model_version = models.ForeignKey(ModelVersion, on_delete=models.CASCADE, related_name="evaluations")
    round = models.ForeignKey("tasks.Round", on_delete=models.CASCADE, related_name="evaluations")
    split = models.CharField(max_length=5, default="test")
    num_examples = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    model_error_rate = models.FloatField(
        null=True, blank=True, help_text="Share of the examples the model gets wrong by the task's metric."
    )
    job = models.ForeignKey("tasks.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model_version", "round__number", "split"]
        constraints = [
            models.UniqueConstraint(fields=["model_version", "round", "split"], name="one_evaluation_per_round_split"),
        ]

    def __str__(self):
        return f"{self.model_version} on {self.round} {self.split}"
