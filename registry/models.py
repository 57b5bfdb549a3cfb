"""The model registry: trained model artifacts registered for a task.

Rounds point at their target models here (``tasks.Round.target_models``); this app
sits below the task catalogue and names ``tasks.Task`` and ``tasks.Round`` by string,
never importing them. Registering a model and the references inference passes
around are ``registry/services.py``; where artifacts are kept, ``registry/artifacts.py``.
"""

from pathlib import Path

from django.conf import settings
from django.db import models

from . import artifacts


def resolve_artifact_path(artifact_path: str) -> Path:
    """Where a stored artifact path points in this process, without fetching it: a
    relative one is under this process's DYNABENCH_MODELS_DIR (workers on other
    machines have their own), an s3:// one in this machine's cache (registry.artifacts)."""
    return artifacts.local_path(artifact_path)


class ModelVersion(models.Model):
    """A trained model artifact registered for a task (the registry rounds point at)."""

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
    is_public = models.BooleanField(
        "public", default=True,
        help_text="Shown on the public leaderboard; a private one only to its owner and the task's researchers.")
    submitted = models.BooleanField(default=False, help_text="Uploaded by a user (not trained on the platform).")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "tasks_modelversion"  # made in tasks/ before the registry had its own app; kept, so no data moves
        ordering = ["task", "-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["task", "name"], name="model_name_unique_per_task"),
        ]

    def __str__(self):
        return f"{self.task.slug}/{self.name}"

    @property
    def artifact_dir(self) -> Path:
        """The artifact's folder on this machine, downloaded first from object storage
        if it is not here yet (``registry.artifacts.ensure_local``)."""
        return artifacts.ensure_local(self.artifact_path, self.sha256)
