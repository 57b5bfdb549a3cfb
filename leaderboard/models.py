from django.db import models

from tasks.models import ModelVersion


class Evaluation(models.Model):
    """A model's scores on one round's split (accuracy/F1, or EM/F1 for QA)."""

    model_version = models.ForeignKey("tasks.ModelVersion", on_delete=models.CASCADE, related_name="evaluations")
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
    job = models.ForeignKey("tasks.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
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
