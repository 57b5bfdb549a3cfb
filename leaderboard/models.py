from django.db import models


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
    job = models.ForeignKey("tasks.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model_version", "round__number", "split"]
        constraints = [
            models.UniqueConstraint(fields=["model_version", "round", "split"], name="one_evaluation_per_round_split"),
        ]

    def __str__(self):
        return f"{self.model_version} on {self.round} {self.split}"
