from django.conf import settings
from django.db import models


class WorkerIdentity(models.Model):
    """Links an MTurk worker id to the platform user that acts for it."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mturk_identity")
    worker_id = models.CharField(max_length=64, unique=True)
    sandbox = models.BooleanField(default=True)
    verified_at = models.DateTimeField(
        null=True, blank=True, help_text="When the id was confirmed against MTurk; no payment before."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "MTurk worker identity"
        verbose_name_plural = "MTurk worker identities"

    def __str__(self):
        return f"MTurk {self.worker_id}"
