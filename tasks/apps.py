from django.apps import AppConfig


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = "Tasks, rounds and contexts"

    def ready(self):
        from django.db.models.signals import post_migrate

        post_migrate.connect(_grant_new_permissions, dispatch_uid="tasks-researcher-permissions")


def _grant_new_permissions(sender, using="default", **kwargs):
    """Permissions of models a migration added (auth creates them just before) go to
    the Researchers group, so existing researchers see new admin pages too."""
    from .roles import RESEARCHER_APPS, grant_researcher_permissions

    if sender.label in RESEARCHER_APPS:
        grant_researcher_permissions(using=using)
