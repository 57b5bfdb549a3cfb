"""Who may do what.

- researcher of a task: a superuser, or an owner of the task. Researchers see
  and manage their own tasks' rows (admin and API), decide validations at once,
  see writers' answers without a blind step, flag and unflag;
- researcher (in general): a staff user in the Researchers group
  (``make_researcher``): may use the admin and create tasks, which they then own;
- annotator: any signed-in user (writes and validates examples);
- MTurk worker: a user with a ``crowd.WorkerIdentity``;
- visitor: anonymous; reads public pages and leaderboards only.
"""

from django.contrib.auth.models import Group, Permission
from rest_framework import permissions


def is_researcher(user, task) -> bool:
    """Whether ``user`` researches ``task``: a superuser, or one of its owners."""
    if not (user and user.is_authenticated and user.is_active):
        return False
    if user.is_superuser:
        return True
    return task.owners.filter(pk=user.pk).exists()


def can_create_tasks(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.is_staff)


def is_mturk_worker(user) -> bool:
    return bool(user and user.is_authenticated and hasattr(user, "mturk_identity"))


class IsResearcherOrReadOnly(permissions.BasePermission):
    """Anyone may read; only staff create; staff or owners change a task."""

    message = "Only researchers (the task's owners) may change tasks; only staff researchers create them."
    anonymous_reads = True  # read in the OpenAPI schema: reading needs no credentials

    def has_permission(self, request, view):
        if request.method in permissions.SAFE_METHODS:
            return True
        if not (request.user and request.user.is_authenticated):
            return False
        if view.action == "create":
            return can_create_tasks(request.user)
        return True

    def has_object_permission(self, request, view, obj):
        if request.method in permissions.SAFE_METHODS:
            return True
        task = getattr(obj, "task", obj)
        return is_researcher(request.user, task)


RESEARCHERS_GROUP = "Researchers"
RESEARCHER_APPS = ["tasks", "jobs", "registry", "annotation", "leaderboard", "crowd"]


def grant_researcher_permissions(group=None, using: str = "default", exclude=()) -> None:
    """Give the Researchers group the platform apps' permissions but ``exclude`` (ids):
    all of them for a new group, those a migrate just created for an existing one."""
    group = group or Group.objects.using(using).filter(name=RESEARCHERS_GROUP).first()
    if group is not None:
        group.permissions.add(*Permission.objects.using(using).filter(content_type__app_label__in=RESEARCHER_APPS)
                              .exclude(pk__in=list(exclude)))


def make_researcher(user):
    """Staff access to the admin with every permission on the platform's apps."""
    group, created = Group.objects.get_or_create(name=RESEARCHERS_GROUP)
    if created or not group.permissions.exists():
        grant_researcher_permissions(group)
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.groups.add(group)
    return user
