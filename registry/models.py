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


class Endpoint(models.Model):
    """A model version served elsewhere, reached over HTTP (``registry/endpoints.py``).

    Its ``ModelVersion`` has no artifact (empty path and sha256); this row says how
    to reach it. The secret is never stored: ``secret_env`` names a key of the
    operator's key map (``ENDPOINT_SECRETS``), which says which environment variable
    holds it and which hosts it may be sent to."""

    class Protocol(models.TextChoices):
        OPENAI = "openai", "OpenAI-compatible chat completions"
        V2 = "v2", "Open Inference Protocol (KServe v2)"

    model_version = models.OneToOneField(ModelVersion, on_delete=models.CASCADE, related_name="endpoint")
    protocol = models.CharField(max_length=10, choices=Protocol.choices)
    url = models.URLField(max_length=500, help_text="Base URL (e.g. http://host:8000 or https://api.example.com/v1).")
    remote_model = models.CharField(max_length=200, blank=True,
                                    help_text="The model's name at the endpoint (chat: 'model'; v2: the path's name).")
    secret_env = models.CharField(
        "key", max_length=100, blank=True,
        help_text="The name of a key of the server's key map (ENDPOINT_SECRETS), never the key itself; empty: "
                  "no key is sent. Only a superuser changes it; changing the URL or the model clears it.")
    timeout_s = models.FloatField(default=10.0, help_text="Seconds one request may take.")
    max_concurrency = models.PositiveIntegerField(default=4, help_text="Requests in flight at once, across workers.")
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True,
                                                        help_text="Requests per minute, across workers (empty: none).")
    price_per_call = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    price_per_1k_prompt_tokens = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    price_per_1k_completion_tokens = models.DecimalField(max_digits=12, decimal_places=6, null=True, blank=True)
    round_budget = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True,
        help_text="The most its calls may cost per round (set by a superuser; empty: ENDPOINT_DEFAULT_BUDGET).")
    evaluation_budget = models.DecimalField(
        max_digits=12, decimal_places=2, null=True, blank=True,
        help_text="The most its calls outside rounds (evaluations and health checks) may cost in all "
                  "(set by a superuser; empty: ENDPOINT_DEFAULT_BUDGET).")
    healthy_at = models.DateTimeField(null=True, blank=True, help_text="When its last health check passed.")

    class Meta:
        db_table = "registry_endpoint"

    def __str__(self):
        return f"{self.model_version} ({self.protocol} at {self.url})"


class EndpointUsage(models.Model):
    """Calls, tokens and cost of one endpoint in one round, capped by its
    ``round_budget``; round None: outside any round (evaluations and health checks),
    capped by its ``evaluation_budget``. ``reserved`` is what the calls in flight may
    still cost: held against the budget before they are sent, settled when they end."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="usage")
    round = models.ForeignKey("tasks.Round", on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    calls = models.PositiveBigIntegerField(default=0)
    failed_calls = models.PositiveBigIntegerField(default=0)
    unparseable = models.PositiveBigIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=14, decimal_places=6, default=0)
    reserved = models.DecimalField(max_digits=14, decimal_places=6, default=0,
                                   help_text="Held for calls in flight: the most they may cost.")

    class Meta:
        db_table = "registry_endpointusage"
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "round"], name="endpoint_usage_per_round"),
            models.UniqueConstraint(fields=["endpoint"], condition=models.Q(round=None),
                                    name="endpoint_usage_outside_rounds"),
        ]

    def __str__(self):
        return f"{self.endpoint.model_version} in round #{self.round_id}: {self.calls} calls"


def endpoint_of(model_version: ModelVersion) -> Endpoint | None:
    """The version's endpoint row, or None for a model with an artifact."""
    try:
        return model_version.endpoint
    except Endpoint.DoesNotExist:
        return None
