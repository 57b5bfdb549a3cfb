from django.apps import AppConfig


class LeaderboardConfig(AppConfig):
    name = "leaderboard"
    verbose_name = "Models and leaderboards"

    def ready(self):
        from django.db.models.signals import post_delete, post_save

        from jobs.models import Job
        from registry.models import ModelVersion

        from . import signals
        from .models import Evaluation, Submission

        # A proxy's save is sent with the proxy as its sender: Submission (the admin's
        # list of uploads) needs its own connection.
        for sender, receiver in ((Evaluation, signals.evaluation_changed), (ModelVersion, signals.model_changed),
                                 (Submission, signals.model_changed), (Job, signals.job_changed)):
            post_save.connect(receiver, sender=sender, dispatch_uid=f"board-{sender.__name__}-save")
            post_delete.connect(receiver, sender=sender, dispatch_uid=f"board-{sender.__name__}-delete")
