from django.apps import AppConfig
from django.core.servers.basehttp import WSGIRequestHandler


class TasksConfig(AppConfig):
    name = "tasks"
    verbose_name = "Tasks, rounds and contexts"

    def ready(self):
        from django.core import checks
        from django.db.models.signals import post_migrate, pre_migrate

        from core.cache import redis_without_password

        checks.register(redis_without_password, checks.Tags.security, deploy=True)

        _answer_kept_alive_connections_at_once()

        pre_migrate.connect(_note_permissions, dispatch_uid="tasks-researcher-permissions-before")
        post_migrate.connect(_grant_new_permissions, dispatch_uid="tasks-researcher-permissions")


def _answer_kept_alive_connections_at_once():
    """Django's development server (``runserver``, and the tests' live server) sends a
    response's headers and its body in two writes. With Nagle's algorithm on, the body of
    every response after the first on a kept-alive connection waits for the client's
    delayed ACK, far longer on Linux than the request itself. So its
    connections set TCP_NODELAY (the standard library's switch for a stream handler), as
    gunicorn's do already."""
    WSGIRequestHandler.disable_nagle_algorithm = True


# The permission ids that existed when this migrate began (by database): only those
# created since are granted, so a permission an admin took from the group stays taken.
_known: dict[str, set[int]] = {}


def _note_permissions(sender, using="default", **kwargs):
    if using in _known:
        return
    from django.contrib.auth.models import Permission
    from django.db.utils import DatabaseError

    try:
        _known[using] = set(Permission.objects.using(using).values_list("pk", flat=True))
    except DatabaseError:  # a fresh database: no permission table yet, every permission is new
        _known[using] = set()


def _grant_new_permissions(sender, using="default", **kwargs):
    """Permissions created by this migrate (auth makes them just before) for the
    platform's apps go to the Researchers group, so existing researchers see new admin
    pages; permissions that existed before are left as the admins set them."""
    from .roles import RESEARCHER_APPS, grant_researcher_permissions

    if sender.label in RESEARCHER_APPS:
        grant_researcher_permissions(using=using, exclude=_known.get(using, set()))
