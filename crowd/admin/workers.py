"""Workers in the admin: blocks on one task (the task's researchers lift them) and
worker identities, which span tasks, so only superusers manage them (soft and hard
blocks, messages, quality and earnings)."""

from django import forms
from django.contrib import admin
from django.template.response import TemplateResponse

from crowd import costs, workers
from crowd.models import TaskBlock, WorkerIdentity
from crowd.money import usd
from tasks.admin_lists import TASK_FILTER, LargeListAdmin, TaskScopedAdmin

from .common import ReadOnlyAdminMixin, report_mturk


@admin.action(description="Lift the block on this task")
def lift_task_blocks(modeladmin, request, queryset):
    for block in queryset.select_related("task", "worker"):
        report_mturk(modeladmin, request, block.worker.worker_id,
                      lambda b=block: workers.task_unblock(b, request.user) or "unblocked")


@admin.register(TaskBlock)
class TaskBlockAdmin(ReadOnlyAdminMixin, TaskScopedAdmin):
    """Workers kept out of one task by its batches' quality thresholds; the task's
    researchers may lift a block (blocks on every task are the identities' soft blocks)
    with the action, never by deleting it: MTurk's qualification goes too."""

    list_display = ["worker", "task", "sandbox", "batch", "reason", "blocked_at"]
    list_filter = ["sandbox", TASK_FILTER]
    list_select_related = ["worker", "task"]
    search_fields = exact_search_fields = ["worker__worker_id"]
    search_help_text = "An MTurk worker id (exact)."
    readonly_fields = [f.name for f in TaskBlock._meta.fields]
    actions = [lift_task_blocks]


class WorkerMessageForm(forms.Form):
    subject = forms.CharField(max_length=200)
    message = forms.CharField(max_length=4096, widget=forms.Textarea)


class BlockReasonForm(forms.Form):
    reason = forms.CharField(max_length=500, help_text="MTurk shows it to the worker.")


def _worker_form_action(modeladmin, request, queryset, form_class, title, run):
    applied = "apply" in request.POST
    form = form_class(request.POST if applied else None)
    if applied and form.is_valid():
        for identity in queryset:
            report_mturk(modeladmin, request, identity.worker_id,
                          lambda i=identity: run(i, form.cleaned_data) or "done")
        return None
    return TemplateResponse(request, "admin/crowd/worker_form.html", {
        **modeladmin.admin_site.each_context(request), "title": title, "form": form,
        "opts": modeladmin.model._meta, "action": request.POST.get("action", ""), "workers": queryset,
        "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME)})


@admin.action(description="Soft block (our qualification: our HITs no longer admit them)")
def soft_block(modeladmin, request, queryset):
    return _worker_form_action(modeladmin, request, queryset, BlockReasonForm, "Soft block",
                               lambda identity, data: workers.soft_block(identity, data["reason"]))


@admin.action(description="Lift the soft block")
def soft_unblock(modeladmin, request, queryset):
    for identity in queryset.filter(soft_blocked_at__isnull=False):
        report_mturk(modeladmin, request, identity.worker_id,
                      lambda i=identity: workers.soft_unblock(i) or "unblocked")


@admin.action(description="Hard block on MTurk (CreateWorkerBlock)")
def hard_block(modeladmin, request, queryset):
    return _worker_form_action(modeladmin, request, queryset, BlockReasonForm, "Hard block on MTurk",
                               lambda identity, data: workers.hard_block(identity, data["reason"]))


@admin.action(description="Lift the hard block")
def hard_unblock(modeladmin, request, queryset):
    for identity in queryset.filter(hard_blocked_at__isnull=False):
        report_mturk(modeladmin, request, identity.worker_id,
                      lambda i=identity: workers.hard_unblock(i) or "unblocked")


@admin.action(description="Send a message (MTurk email)")
def notify_workers(modeladmin, request, queryset):
    applied = "apply" in request.POST
    form = WorkerMessageForm(request.POST if applied else None)
    if not (applied and form.is_valid()):
        return _worker_form_action(modeladmin, request, queryset, WorkerMessageForm, "Message workers", None)
    # One NotifyWorkers call per 100 workers (crowd.mturk.notify), not one per worker.
    identities = list(queryset)
    report_mturk(modeladmin, request, f"{len(identities)} workers", lambda: "; ".join(
        f"{f.get('WorkerId')}: {f.get('NotifyWorkersFailureMessage', 'failed')}"
        for f in workers.notify(identities, form.cleaned_data["subject"], form.cleaned_data["message"]))
        or "sent")


@admin.register(WorkerIdentity)
class WorkerIdentityAdmin(LargeListAdmin):
    """Worker identities span tasks, so only superusers manage them."""

    list_display = ["worker_id", "platform", "user", "sandbox", "verified_at", "soft_blocked_at", "hard_blocked_at",
                    "correct_share", "agreement", "earned"]
    list_filter = ["platform", "sandbox", ("verified_at", admin.EmptyFieldListFilter),
                   ("soft_blocked_at", admin.EmptyFieldListFilter), ("hard_blocked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["user"]
    search_fields = exact_search_fields = ["worker_id", "user__username"]
    search_help_text = "An MTurk worker id, or the account's username (exact)."
    raw_id_fields = ["user"]
    readonly_fields = [f.name for f in WorkerIdentity._meta.fields]  # money follows these: no hand edits
    actions = [soft_block, soft_unblock, hard_block, hard_unblock, notify_workers]

    def get_queryset(self, request):
        return costs.with_earnings(workers.with_quality(super().get_queryset(request)))

    @admin.display(description="examples validated correct", ordering="verified")
    def correct_share(self, obj):
        share = workers.correct_share(obj)
        return "—" if share is None else f"{share:.0%} of {obj.decided}"

    @admin.display(description="agrees with other validators", ordering="agreeing")
    def agreement(self, obj):
        share = workers.agreement(obj)
        return "—" if share is None else f"{share:.0%} of {obj.judged}"

    @admin.display(description="earned (rewards + bonuses)")
    def earned(self, obj):
        return usd(obj.earned_rewards + obj.earned_bonuses)

    def has_module_permission(self, request):
        return request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_add_permission(self, request):
        return False  # identities are made by workers' arrivals

    def has_delete_permission(self, request, obj=None):
        return False  # assignments and the ledger point at it
