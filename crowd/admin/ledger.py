"""The record of work and pay in the admin, read-only: assignments (what each worker
wrote, validated and fooled) and the bonus ledger, whose totals follow its filters.
Both lists say how many bonuses wait for a researcher's decision (a flagged or
escalated example: ``crowd.bonuses``); the assignments' filter "bonus held for a
researcher" lists them, each with a link to the examples to decide."""

from django.contrib import admin, messages
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from core.errors import DomainError
from crowd import bonuses, costs, sent_bonuses
from crowd.models import Assignment, BonusPayment
from tasks.admin_lists import ScopedRelatedFilter, TaskScopedAdmin

from .common import ReadOnlyAdminMixin


class HeldFilter(admin.SimpleListFilter):
    """Assignments whose bonus waits for a researcher's decision (the index on
    ``bonus_held_since``: a few rows), longest held first."""

    title = "bonus held for a researcher"
    parameter_name = "held"

    def lookups(self, request, model_admin):
        return [("yes", "Bonus held for a researcher's decision")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(pk__in=bonuses.held_for_researchers().values("pk")).order_by("bonus_held_since",
                                                                                                 "pk")
        return queryset


def warn_held(modeladmin, request, queryset) -> None:
    """Say how many bonuses of ``queryset`` (the list's own scope) a researcher's decision holds."""
    held = len(queryset.filter(pk__in=bonuses.held_for_researchers().values("pk")).order_by()
               .values_list("pk", flat=True)[:100])
    if held:
        modeladmin.message_user(
            request, f"{held if held < 100 else '100 or more'} bonus(es) wait for a researcher's decision on a "
                     "flagged or escalated example; no deadline settles them. Assignments, filter 'bonus held for "
                     "a researcher', links each example to decide.", messages.WARNING)


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdminMixin, TaskScopedAdmin):
    task_path = "hit__batch__task"
    list_display = ["assignment_id", "worker", "batch", "status", "work", "held_examples", "accepted_at",
                    "worker_confirmed_at", "verified_at", "decided_at", "feedback", "worker_feedback"]
    list_filter = ["status", HeldFilter, ("hit__batch", ScopedRelatedFilter)]
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

    @admin.display(description="bonus held by")
    def held_examples(self, obj):
        """The examples a researcher must decide before the bonus settles (only for the
        few assignments marked held: one small read each)."""
        if obj.bonus_held_since is None:
            return ""
        return format_html_join(", ", '<a href="{}">example {}</a>', (
            (reverse("admin:annotation_example_change", args=[e.pk]), e.pk) for e in bonuses.held(obj))) \
            or format_html("{}", "nothing now (settled at the next run)")

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        if hasattr(response, "context_data") and "cl" in response.context_data:
            warn_held(self, request, self.get_queryset(request))
        return response


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


class UnconfirmedFilter(admin.SimpleListFilter):
    """Prolific bonuses whose pay call's answer was lost and that Prolific's records have
    not shown paid for ``PROLIFIC_UNCONFIRMED_AFTER_HOURS``: a person must settle them."""

    title = "sent, unconfirmed"
    parameter_name = "unconfirmed"

    def lookups(self, request, model_admin):
        return [("yes", "Sent, unconfirmed (settle by hand)")]

    def queryset(self, request, queryset):
        if self.value() == "yes":
            return queryset.filter(sent_bonuses.unconfirmed_q())
        return queryset


def _settle(modeladmin, request, queryset, *, paid: bool):
    done = 0
    for payment in queryset:
        try:
            # Who settled it is the row's settled_by (a deleted account shows its pseudonym there);
            # a name copied into the note would outlive the account's deletion.
            sent_bonuses.settle_by_hand(payment, request.user, paid=paid, note="Settled in the admin.")
            done += 1
        except DomainError as exc:
            modeladmin.message_user(request, f"Bonus {payment.pk}: {exc}", messages.ERROR)
    if done:
        modeladmin.message_user(request, f"{done} bonus(es) settled as " + (
            "paid on Prolific." if paid else "not paid: each is set up and sent again by the next run."),
            messages.SUCCESS)


@admin.action(description="Settle: paid on Prolific (it shows there)", permissions=["settle"])
def settle_paid(modeladmin, request, queryset):
    _settle(modeladmin, request, queryset, paid=True)


@admin.action(description="Settle: not paid on Prolific (may be sent again)", permissions=["settle"])
def settle_not_paid(modeladmin, request, queryset):
    _settle(modeladmin, request, queryset, paid=False)


@admin.register(BonusPayment)
class BonusPaymentAdmin(ReadOnlyAdminMixin, TaskScopedAdmin):
    """The ledger, read-only: the totals above the list follow its filters. A superuser
    settles a Prolific bonus whose pay call's answer was lost (sent, unconfirmed) by hand,
    after checking Prolific's site; the row keeps who did and when."""

    actions = [settle_paid, settle_not_paid]

    task_path = "assignment__hit__batch__task"
    list_display = ["id", "worker", "batch", "amount", "example_count", "status", "attempts", "paid_at",
                    "note", "last_error"]
    list_filter = ["status", UnconfirmedFilter, ZeroSettlementFilter, ("assignment__hit__batch", ScopedRelatedFilter)]
    list_select_related = ["assignment__worker", "assignment__hit"]
    sortable_by = ["id"]
    search_fields = exact_search_fields = ["assignment__worker__worker_id", "assignment__assignment_id",
                                           "unique_request_token"]
    search_help_text = "A worker or participant id, assignment or submission id, or bonus request token (exact)."
    readonly_fields = [f.name for f in BonusPayment._meta.fields]

    def has_settle_permission(self, request):
        return request.user.is_active and request.user.is_superuser

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
            scope = Assignment.objects.all()
            if not request.user.is_superuser:  # the assignments of the tasks they research
                scope = scope.filter(hit__batch__task__in=self.researched_task_ids(request))
            warn_held(self, request, scope)
            # At most 100 counted (the big list's counts are bounded): through the index on status.
            waiting = len(self.get_queryset(request).filter(sent_bonuses.unconfirmed_q()).order_by()
                          .values_list("pk", flat=True)[:100])
            if waiting:
                self.message_user(request, f"{waiting if waiting < 100 else '100 or more'} Prolific bonus(es) were "
                                           "sent and Prolific's answer was lost; "
                                           "its records do not show them paid. " + sent_bonuses.CHECK_ON_SITE
                                  + " (Filter: 'sent, unconfirmed'; a superuser settles them with the actions.)",
                                  messages.WARNING)
        return response
