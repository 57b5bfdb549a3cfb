"""The admin's list of onboarding records (Annotation > Onboarding records): who took a
task's onboarding, their tries and last score, who passed and who is blocked.

The rows are the onboarding service's to write; here they are read, and one action
lets a blocked worker try again (``onboarding.let_try_again``: the task's researchers
only; for an MTurk worker the crowd app also lifts the task block there).
"""

from django.contrib import admin, messages

from core.errors import DomainError
from tasks.admin_lists import TASK_FILTER, TaskScopedAdmin

from . import onboarding
from .models import OnboardingRecord


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request, model_admin):
        return [("passed", "Passed"), ("blocked", "Blocked (every try failed)"), ("trying", "Still trying")]

    def queryset(self, request, queryset):
        if self.value() == "passed":
            return queryset.filter(passed_at__isnull=False)
        if self.value() == "blocked":
            return queryset.filter(blocked_at__isnull=False, passed_at__isnull=True)
        if self.value() == "trying":
            return queryset.filter(blocked_at__isnull=True, passed_at__isnull=True)
        return queryset


@admin.action(description="Let the selected blocked workers take the onboarding again")
def let_try_again(modeladmin, request, queryset):
    lifted = 0
    for record in queryset.select_related("task", "user"):
        try:
            lifted += onboarding.let_try_again(record.task, record.user, by=request.user)
        except DomainError as exc:
            modeladmin.message_user(request, f"{record}: {exc}", messages.ERROR)
    modeladmin.message_user(request, f"{lifted} worker{'s' if lifted != 1 else ''} may take the onboarding again"
                            + ("" if lifted == queryset.count() else " (the others were not blocked)") + ".")


@admin.register(OnboardingRecord)
class OnboardingRecordAdmin(TaskScopedAdmin):
    list_display = ["user", "task", "state", "tries", "last_score", "passed_at", "blocked_at", "updated_at"]
    list_filter = [TASK_FILTER, StateFilter]
    list_select_related = ["user", "task"]
    search_fields = exact_search_fields = ["user__username"]
    search_help_text = "A worker's username (exact)."
    ordering = ["-id"]  # the primary key's index: newest first, whatever the table holds
    actions = [let_try_again]
    readonly_fields = ["user", "task", "answers", "seen", "tries", "last_score", "passed_at", "blocked_at",
                       "updated_at"]

    @admin.display(description="state")
    def state(self, obj):
        if obj.passed_at:
            return "passed"
        return "blocked" if obj.blocked_at else "trying"

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
