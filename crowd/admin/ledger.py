"""The record of work and pay in the admin, read-only: assignments (what each worker
wrote, validated and fooled) and the bonus ledger, whose totals follow its filters."""

from django.contrib import admin

from crowd import costs
from crowd.models import Assignment, BonusPayment
from tasks.admin_lists import ScopedRelatedFilter, TaskScopedAdmin

from .common import ReadOnlyAdminMixin


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdminMixin, TaskScopedAdmin):
    task_path = "hit__batch__task"
    list_display = ["assignment_id", "worker", "batch", "status", "work", "accepted_at", "verified_at",
                    "decided_at", "feedback", "worker_feedback"]
    list_filter = ["status", ("hit__batch", ScopedRelatedFilter)]
    list_select_related = ["worker", "hit__batch", "session"]
    sortable_by = ["accepted_at"]  # the order an index serves
    search_fields = exact_search_fields = ["assignment_id", "worker__worker_id"]
    search_help_text = "An MTurk assignment id or worker id (exact)."
    readonly_fields = [f.name for f in Assignment._meta.fields]

    @admin.display(description="batch")
    def batch(self, obj):
        return obj.hit.batch_id

    @admin.display(description="written / validated / fooled")
    def work(self, obj):
        s = obj.session
        return f"{s.examples_written} / {s.validations_done} / {s.examples_fooled}"


class ZeroSettlementFilter(admin.SimpleListFilter):
    """Settlements at $0, each with its note saying why (examples rejected, undecided...)."""

    title = "amount"
    parameter_name = "amount"

    def lookups(self, request, model_admin):
        return [("zero", "Settled at $0"), ("paid", "More than $0")]

    def queryset(self, request, queryset):
        if self.value() == "zero":
            return queryset.filter(amount=0)
        if self.value() == "paid":
            return queryset.filter(amount__gt=0)
        return queryset


@admin.register(BonusPayment)
class BonusPaymentAdmin(ReadOnlyAdminMixin, TaskScopedAdmin):
    """The ledger, read-only: the totals above the list follow its filters."""

    task_path = "assignment__hit__batch__task"
    list_display = ["id", "worker", "batch", "amount", "example_count", "status", "attempts", "paid_at",
                    "note", "last_error"]
    list_filter = ["status", ZeroSettlementFilter, ("assignment__hit__batch", ScopedRelatedFilter)]
    list_select_related = ["assignment__worker", "assignment__hit"]
    sortable_by = ["id"]
    search_fields = exact_search_fields = ["assignment__worker__worker_id", "assignment__assignment_id",
                                           "unique_request_token"]
    search_help_text = "An MTurk worker id, assignment id or bonus request token (exact)."
    readonly_fields = [f.name for f in BonusPayment._meta.fields]

    @admin.display(description="worker")
    def worker(self, obj):
        return obj.assignment.worker.worker_id

    @admin.display(description="batch")
    def batch(self, obj):
        return obj.assignment.hit.batch_id

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        if hasattr(response, "context_data") and "cl" in response.context_data:
            response.context_data["totals"] = costs.bonus_totals(response.context_data["cl"].queryset)
        return response
