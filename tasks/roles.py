"""Who may do what.

- researcher: staff, or an owner of the task in question;
- annotator: any signed-in user (writes and validates examples);
- MTurk worker: a user with a ``crowd.WorkerIdentity``;
- visitor: anonymous; reads public pages and leaderboards only.
"""

from rest_framework import permissions


def is_researcher(user, task=None) -> bool:
    if not (user and user.is_authenticated):
        return False
    if user.is_staff:
        return True
    if task is None:
        return user.owned_tasks.exists()
    return task.owners.filter(pk=user.pk).exists()


def is_mturk_worker(user) -> bool:
    return bool(user and user.is_authenticated and hasattr(user, "mturk_identity"))


class IsResearcherOrReadOnly(permissions.BasePermission):
    """Anyone may read; only staff create; staff or owners change a task."""

    message = "Only researchers (staff or the task's owners) may change tasks."

    def has_permission(self, request, view):
        if request.method in permissions.SAFE_METHODS:
            return True
        if not (request.user and request.user.is_authenticated):
            return False
        if view.action == "create":
            return request.user.is_staff
        return True

    def has_object_permission(self, request, view, obj):
        if request.method in permissions.SAFE_METHODS:
            return True
        task = getattr(obj, "task", obj)
        return is_researcher(request.user, task)


RESEARCHERS_GROUP = "Researchers"
RESEARCHER_APPS = ["tasks", "annotation", "leaderboard", "crowd"]


def make_researcher(user):
    """Staff access to the admin with every permission on the platform's apps."""
    from django.contrib.auth.models import Group, Permission

    group, created = Group.objects.get_or_create(name=RESEARCHERS_GROUP)
    if created or not group.permissions.exists():
        group.permissions.set(Permission.objects.filter(content_type__app_label__in=RESEARCHER_APPS))
    user.is_staff = True
    user.save(update_fields=["is_staff"])
    user.groups.add(group)
    return user
