"""What the crowd's admin pages share: reporting an MTurk-calling service's outcome,
and the rows shown here that no one writes by hand."""

from django.contrib import messages

from core.errors import DomainError
from crowd.platforms import PlatformError


def report_mturk(modeladmin, request, label: str, run):
    """Run an MTurk-calling service; its report, or its error in words, as a message."""
    try:
        report = run()
    except (PlatformError, DomainError) as exc:
        modeladmin.message_user(request, f"{label}: {exc}", messages.ERROR)
        return
    level = messages.WARNING if getattr(report, "errors", None) else messages.SUCCESS
    modeladmin.message_user(request, f"{label}: {report}", level)


class ReadOnlyAdminMixin:
    """Rows the admin shows and never adds, changes or deletes, not even for a
    superuser: money and MTurk follow them, so every change goes through a crowd
    service (an action, the publish page). Put it before the admin's base class."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
