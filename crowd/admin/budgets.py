"""Crowd budgets in the admin: what each task may spend on MTurk."""

from django import forms
from django.conf import settings
from django.contrib import admin

from crowd import budgets
from crowd.models import CrowdBudget
from crowd.money import usd
from tasks.admin_lists import TaskScopedAdmin


class CrowdBudgetForm(forms.ModelForm):
    class Meta:
        model = CrowdBudget
        fields = ["task", "amount", "note"]


@admin.register(CrowdBudget)
class CrowdBudgetAdmin(TaskScopedAdmin):
    """What each task may spend on MTurk: superusers set it, researchers see their own
    tasks' (with what is committed and spent), and no one else changes it."""

    form = CrowdBudgetForm
    list_display = ["task", "amount_shown", "spent", "committed", "left", "set_by", "updated_at", "note"]
    list_select_related = ["task", "set_by"]
    readonly_fields = ["standing", "set_by", "updated_at"]

    def get_fields(self, request, obj=None):
        return ["task", "amount", "note", "standing", "set_by", "updated_at"] if obj else ["task", "amount", "note"]

    def get_readonly_fields(self, request, obj=None):
        if obj is not None:  # the task of a budget stays its task
            return ["task", *self.readonly_fields]
        return self.readonly_fields

    def _standing(self, obj) -> budgets.Standing:
        if not hasattr(obj, "_standing_now"):
            obj._standing_now = budgets.standing(obj.task, settings.MTURK_SANDBOX)
        return obj._standing_now

    @admin.display(description="budget", ordering="amount")
    def amount_shown(self, obj):
        return usd(obj.amount)

    @admin.display(description="spent")
    def spent(self, obj):
        return usd(self._standing(obj).spent)

    @admin.display(description="committed")
    def committed(self, obj):
        return usd(self._standing(obj).committed)

    @admin.display(description="left")
    def left(self, obj):
        return usd(self._standing(obj).left)

    @admin.display(description="where it stands (the MTurk site in use)")
    def standing(self, obj):
        return str(self._standing(obj))

    def save_model(self, request, obj, form, change):
        # Through the service: it checks the superuser again and writes under the publish lock.
        saved = budgets.set_budget(form.cleaned_data.get("task") or obj.task, form.cleaned_data["amount"],
                                   request.user, form.cleaned_data.get("note", ""))
        obj.pk = saved.pk

    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser
