from django.conf import settings
from django.db import models

from registry.models import ModelVersion


class Evaluation(models.Model):
    """A model's scores on one round's split (accuracy/F1, or EM/F1 for QA)."""

    model_version = models.ForeignKey("registry.ModelVersion", on_delete=models.CASCADE, related_name="evaluations")
    round = models.ForeignKey("tasks.Round", on_delete=models.CASCADE, related_name="evaluations")
    split = models.CharField(max_length=5, default="test")
    num_examples = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    model_error_rate = models.FloatField(
        null=True, blank=True, help_text="Share of the examples the model gets wrong by the task's metric."
    )
    intervals = models.JSONField(
        default=dict, blank=True,
        help_text="95% bootstrap interval per metric: {metric: [low, high]} (seeded; see leaderboard.evaluation).")
    example_ids = models.JSONField(default=list, blank=True, help_text="The examples scored, in order.")
    per_example = models.JSONField(
        default=list, blank=True, help_text="The task metric per example (1/0, or SQuAD F1), in example_ids order.")
    replicates = models.JSONField(
        default=dict, blank=True,
        help_text="The bootstrap's seed, its number of resamples (n) and a digest of the examples resampled.")
    replicate_values = models.BinaryField(
        default=bytes, blank=True,
        help_text="The task metric on each bootstrap resample, as little-endian float32 (the same resamples "
                  "for every model: paired). 4 KB for 1,000 resamples; read with leaderboard.evaluation.unpack.")
    metric_replicate_values = models.BinaryField(
        default=bytes, blank=True,
        help_text="The other metrics (replicates['metrics'] names them, in order) on the same resamples, "
                  "float32 one after another: the Dynascore's interval resamples them with performance.")
    job = models.ForeignKey("jobs.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model_version", "round__number", "split"]
        constraints = [
            models.UniqueConstraint(fields=["model_version", "round", "split"], name="one_evaluation_per_round_split"),
        ]

    def __str__(self):
        return f"{self.model_version} on {self.round} {self.split}"


class Submission(ModelVersion):
    """A model a user uploaded (``ModelVersion.submitted``): the admin's list of them."""

    class Meta:
        proxy = True
        verbose_name = "model submission"


class Promotion(models.Model):
    """A promotion as it was made: the round it opened, the model, who promoted it, the
    checks it was measured against (candidate and target scores on the static test set,
    the majority line) and, when a rule was overridden, the reason stated for it."""

    round = models.ForeignKey("tasks.Round", on_delete=models.CASCADE, related_name="promotions")
    model_version = models.ForeignKey("registry.ModelVersion", on_delete=models.CASCADE, related_name="promotions")
    ensemble_size = models.PositiveSmallIntegerField(default=1)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="+")
    overridden = models.BooleanField(
        default=False, help_text="A promotion rule refused the model and the researcher overrode it.")
    reason = models.TextField(blank=True, help_text="Why the rules were overridden, as the researcher stated it.")
    checks = models.JSONField(default=dict, blank=True,
                              help_text="The scores the rules read and what each rule found "
                                        "(leaderboard.promotion.promotion_checks).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self):
        return f"{self.model_version} promoted into {self.round}" + (" (overridden)" if self.overridden else "")


class ReleaseQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise ImmutableRelease("A release is immutable: its rows are never updated. Make a new release instead.")


class ImmutableRelease(Exception):
    """An attempt to change a release after it was made."""


class Release(models.Model):
    """A published, immutable snapshot of one task's verified data: chosen closed rounds
    and splits, as one Parquet file per split, a data card (README.md with the Hugging
    Face Hub's YAML header) and Croissant metadata, in the artifact store at ``location``
    (``leaderboard.releases``). Made by a job; the row is written once its files are
    stored, with their sha256s, and never changed after (``save`` and ``update``
    refuse): a new snapshot is a new version."""

    task = models.ForeignKey("tasks.Task", on_delete=models.PROTECT, related_name="releases")
    version = models.PositiveIntegerField(help_text="1, 2, ... per task.")
    rounds = models.JSONField(help_text="The round numbers released, ascending.")
    splits = models.JSONField(help_text="The splits released, each one Parquet file.")
    counts = models.JSONField(default=dict, help_text="Rows per split, and per round and label within it.")
    files = models.JSONField(
        default=dict, help_text="Every file of the release by its path in the folder: sha256, bytes (and rows).")
    license = models.CharField(max_length=40, help_text="The task's licence when the release was made.")
    location = models.CharField(
        max_length=500, help_text="The release's folder in the artifact store: a path relative to "
                                  "DYNABENCH_MODELS_DIR, or an s3:// URL.")
    job = models.ForeignKey("jobs.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
                            help_text="The job that made it.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    test_split_released = models.BooleanField(
        default=False,
        help_text="Its researcher released the test split of these rounds on purpose (the leaderboard's test "
                  "data: public from then on, in the browser too). A release without it holds no test split "
                  "that the public may download (leaderboard.releases.test_splits).")

    objects = ReleaseQuerySet.as_manager()

    class Meta:
        ordering = ["task", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["task", "version"], name="release_version_unique_per_task"),
            models.CheckConstraint(condition=models.Q(version__gte=1), name="release_version_from_1"),
        ]

    def __str__(self):
        return f"{self.task.slug} v{self.version}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise ImmutableRelease(f"Release {self} is immutable: it is never changed after it is made. "
                                   "Make a new release instead.")
        super().save(*args, **kwargs)

    @property
    def total_rows(self) -> int:
        return sum(split["rows"] for split in self.counts.get("splits", {}).values())

    @property
    def data_files(self) -> list[str]:
        """The Parquet files' paths in the folder, in the order of ``splits``."""
        return [f"data/{split}.parquet" for split in self.splits]
