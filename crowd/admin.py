# Long on purpose: the crowd's admin pages (batches, the publish form, assignments, the bonus ledger, workers) share their forms and actions.
"""The crowd in the admin: publish a batch, watch its assignments, approvals and
bonuses flow, see what it costs per verified model-fooling example, and manage
workers (blocks, messages, quality).

Batches, assignments, the ledger, budgets and task blocks are scoped to the
researcher's own tasks; worker identities span tasks, so only superusers manage
them. Budgets are set by superusers only (researchers see theirs), and only a
superuser other than its creator approves a batch over
``CROWD_APPROVAL_THRESHOLD``. Nothing here edits money rows by hand: every
change goes through a crowd service.
"""

from decimal import Decimal

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import Count, Q
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.errors import DomainError
from leaderboard.promotion import round_target_checks
from tasks.admin_lists import TASK_FILTER, LargeListAdmin, ScopedRelatedFilter, TaskScopedAdmin
from tasks.models import Task

from . import bonuses, budgets, costs, mturk, publishing, sync, workers
from .models import Assignment, Batch, BonusPayment, CrowdBudget, TaskBlock, WorkerIdentity
from .money import usd
from .publishing import BatchRequest, post_hits, publish


def _report_mturk(modeladmin, request, label: str, run):
    """Run an MTurk-calling service; its report, or its error in words, as a message."""
    try:
        report = run()
    except (mturk.MTurkError, DomainError) as exc:
        modeladmin.message_user(request, f"{label}: {exc}", messages.ERROR)
        return
    level = messages.WARNING if getattr(report, "errors", None) else messages.SUCCESS
    modeladmin.message_user(request, f"{label}: {report}", level)


def _seconds(hours: Decimal) -> int:
    return int(round(hours * 3600))


def _target_rows(tasks) -> list[dict]:
    """Each task's open round and whether its targets clear the reference line (what a
    writing batch is refused for), as the publish page shows it."""
    rows = []
    for task in tasks.order_by("slug"):
        rnd = task.open_round()
        checks = round_target_checks(task, rnd, fresh=False) if rnd is not None else None
        rows.append({"task": task, "round": rnd, "checks": checks})
    return rows


class PublishForm(forms.Form):
    task = forms.ModelChoiceField(queryset=Task.objects.none())
    mode = forms.ChoiceField(choices=Batch.Mode.choices)
    round_number = forms.IntegerField(required=False, min_value=1, label="Round",
                                      help_text="Empty: the task's open round.")
    hits = forms.IntegerField(min_value=1, max_value=1000, initial=10)
    assignments_per_hit = forms.IntegerField(min_value=1, max_value=100, initial=1)
    examples_per_assignment = forms.IntegerField(min_value=1, max_value=100, initial=5)
    reward = forms.DecimalField(min_value=Decimal("0.01"), decimal_places=2, initial=Decimal("0.50"),
                                help_text="USD per approved assignment.")
    bonus_per_example = forms.DecimalField(min_value=Decimal("0"), decimal_places=2, initial=Decimal("0.25"),
                                           help_text="USD per verified model-fooling example (writing only).")
    assignment_duration_hours = forms.DecimalField(
        min_value=Decimal("0.01"), max_value=Decimal("168"), decimal_places=2, initial=Decimal("1"),
        label="Time per assignment (hours)", help_text="How long a worker has once they accept (0.5 = 30 minutes).")
    lifetime_hours = forms.DecimalField(min_value=Decimal("0.01"), max_value=Decimal("8760"), decimal_places=2,
                                        initial=Decimal("72"), label="Batch open for (hours)",
                                        help_text="After this, nobody new can accept its HITs.")
    auto_approval_delay_hours = forms.DecimalField(
        min_value=Decimal("0"), max_value=Decimal("720"), decimal_places=2, initial=Decimal("72"),
        label="Auto-approval after (hours)", help_text="Submitted work not reviewed by then is approved and paid.")
    locales = forms.CharField(required=False, initial="US", help_text="Country codes, comma-separated; empty: any.")
    min_approval_rate = forms.IntegerField(required=False, min_value=0, max_value=100, initial=95)
    min_approved_count = forms.IntegerField(required=False, min_value=0, initial=100)
    quality_block_threshold = forms.FloatField(
        required=False, min_value=0, max_value=1,
        help_text="Soft-block workers whose examples are validated correct less often than this share; on a "
                  "validation batch, validators whose votes carry next to no evidence.")
    title = forms.CharField(required=False, max_length=128, help_text="Empty: a title made from the task.")
    description = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 3}))
    allow_below_reference = forms.BooleanField(
        required=False, label="Publish even if the target does not clear its reference line",
        help_text="Superusers only, with a reason: a writing batch is refused while the round's target does not "
                  "clear the task's reference line (see Targets above).")
    override_reason = forms.CharField(
        required=False, max_length=publishing.MAX_OVERRIDE_REASON, widget=forms.Textarea(attrs={"rows": 2}),
        label="Reason for the override", help_text="Recorded on the batch.")
    confirm = forms.BooleanField(label="I have checked the amounts", required=True)

    def __init__(self, *args, tasks=None, superuser=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["task"].queryset = tasks if tasks is not None else Task.objects.none()
        if not superuser:  # the service refuses the override to anyone else too
            del self.fields["allow_below_reference"], self.fields["override_reason"]

    def request(self) -> BatchRequest:
        data = self.cleaned_data
        return BatchRequest(
            task=data["task"], mode=data["mode"], hits=data["hits"], assignments_per_hit=data["assignments_per_hit"],
            reward=data["reward"], bonus_per_example=data["bonus_per_example"], round_number=data["round_number"],
            examples_per_assignment=data["examples_per_assignment"], title=data["title"],
            description=data["description"], assignment_duration_seconds=_seconds(data["assignment_duration_hours"]),
            lifetime_seconds=_seconds(data["lifetime_hours"]),
            auto_approval_delay_seconds=_seconds(data["auto_approval_delay_hours"]),
            locales=tuple(c.strip().upper() for c in data["locales"].split(",") if c.strip()),
            min_approval_rate=data["min_approval_rate"], min_approved_count=data["min_approved_count"],
            quality_block_threshold=data["quality_block_threshold"],
            allow_below_reference=data.get("allow_below_reference", False),
            override_reason=data.get("override_reason", ""))


@admin.action(description="Sync with MTurk now (verify, approve or reject, returns, expiry)")
def sync_batches(modeladmin, request, queryset):
    for batch in queryset:
        _report_mturk(modeladmin, request, f"Batch {batch.pk}", lambda b=batch: sync.sync_batch(b))


@admin.action(description="Pay due bonuses now")
def pay_batch_bonuses(modeladmin, request, queryset):
    for batch in queryset:
        _report_mturk(modeladmin, request, f"Batch {batch.pk}", lambda b=batch: bonuses.pay_bonuses(b.pk))


@admin.action(description="Expire: stop taking new workers (work already taken goes on)")
def expire_batches(modeladmin, request, queryset):
    for batch in queryset.filter(status__in=[Batch.Status.PUBLISHING, Batch.Status.PUBLISHED]):
        _report_mturk(modeladmin, request, f"Batch {batch.pk}",
                      lambda b=batch: "expired" if sync.expire_batch(b) else "not expired")


@admin.action(description="Publish the remaining HITs (after an interrupted publish)")
def publish_remaining(modeladmin, request, queryset):
    for batch in queryset.filter(status=Batch.Status.PUBLISHING):
        _report_mturk(modeladmin, request, f"Batch {batch.pk}",
                      lambda b=batch: f"{b.hit_rows.filter(hit_id__isnull=False).count()} HITs posted"
                      if post_hits(b) else "")


def _approve(batch: Batch, user) -> str:
    posted = publishing.approve(batch, user).hit_rows.filter(hit_id__isnull=False).count()
    return f"approved; {posted} HITs posted"


@admin.action(description="Approve and publish (superusers; not the batch's own creator)")
def approve_batches(modeladmin, request, queryset):
    for batch in queryset.filter(status=Batch.Status.AWAITING_APPROVAL):
        _report_mturk(modeladmin, request, f"Batch {batch.pk}", lambda b=batch: _approve(b, request.user))


@admin.action(description="Cancel (a batch awaiting approval: nothing was posted)")
def cancel_batches(modeladmin, request, queryset):
    for batch in queryset.filter(status=Batch.Status.AWAITING_APPROVAL):
        _report_mturk(modeladmin, request, f"Batch {batch.pk}",
                      lambda b=batch: publishing.cancel(b, request.user) and "cancelled")


@admin.register(Batch)
class BatchAdmin(TaskScopedAdmin):
    list_display = ["id", "task", "round_number", "mode", "sandbox", "status", "hits", "assignments_per_hit",
                    "approved", "spent", "committed_shown", "max_cost_shown", "per_verified_fooling"]
    list_filter = ["status", "mode", "sandbox", TASK_FILTER]
    list_select_related = ["task", "round"]
    actions = [sync_batches, pay_batch_bonuses, expire_batches, publish_remaining, approve_batches, cancel_batches]
    readonly_fields = [f.name for f in Batch._meta.fields] + ["spending", "committed_shown", "assignment_counts",
                                                               "links"]
    fieldsets = [
        (None, {"fields": ["task", "round", "mode", "sandbox", "status", "last_error", "links"]}),
        ("Money", {"fields": ["spending", "committed_shown", "reward", "bonus_per_example", "max_cost"]}),
        ("Work", {"fields": ["assignment_counts", "hits", "assignments_per_hit", "examples_per_assignment",
                             "assignment_duration_seconds", "lifetime_seconds", "auto_approval_delay_seconds"]}),
        ("On MTurk", {"fields": ["title", "description", "keywords", "hit_type_id", "locales", "min_approval_rate",
                                 "min_approved_count", "quality_block_threshold", "uid"]}),
        ("Reference rule", {"fields": ["reference_override_reason", "reference_overridden_by", "reference_checks"]}),
        ("Times", {"fields": ["created_by", "created_at", "approved_by", "approved_at", "published_at",
                              "expires_at", "finished_at", "last_synced_at"]}),
    ]

    def get_actions(self, request):
        actions = super().get_actions(request)
        if not request.user.is_superuser:  # the service refuses them too
            actions.pop("approve_batches", None)
        return actions

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            approved_count=Count("hit_rows__assignments",
                                 filter=Q(hit_rows__assignments__status=Assignment.Status.APPROVED)))

    @admin.display(description="round")
    def round_number(self, obj):
        return obj.round.number

    @admin.display(description="approved", ordering="approved_count")
    def approved(self, obj):
        return obj.approved_count

    @staticmethod
    def _spend(obj) -> costs.Spend:
        """The list computes every row's spending at once (changelist_view); a page, its own."""
        if not hasattr(obj, "spend"):
            obj.spend = costs.batch_spend(obj)
        return obj.spend

    @admin.display(description="spent")
    def spent(self, obj):
        return usd(self._spend(obj).total)

    @staticmethod
    def _committed(obj) -> Decimal:
        """The list computes every row's at once (changelist_view); a page, its own."""
        if not hasattr(obj, "committed"):
            obj.committed = costs.committed_by_batch(Batch.objects.filter(pk=obj.pk)).get(obj.pk, Decimal("0.00"))
        return obj.committed

    @admin.display(description="committed (may still cost)")
    def committed_shown(self, obj):
        return usd(self._committed(obj))

    @admin.display(description="most it may cost")
    def max_cost_shown(self, obj):
        return usd(obj.max_cost)

    @admin.display(description="per verified fooling example")
    def per_verified_fooling(self, obj):
        return usd(self._spend(obj).per_verified_fooling)

    @admin.display(description="spending")
    def spending(self, obj):
        spend = self._spend(obj)
        return format_html(
            "rewards {} + bonuses {} + MTurk fees {} = <strong>{}</strong> of at most {} "
            "({} approved assignments, {} verified model-fooling examples: <strong>{}</strong> each)",
            usd(spend.rewards), usd(spend.bonuses), usd(spend.fees), usd(spend.total),
            usd(obj.max_cost), spend.approved_assignments, spend.verified_fooling,
            usd(spend.per_verified_fooling))

    @admin.display(description="assignments")
    def assignment_counts(self, obj):
        counts = dict(Assignment.objects.filter(hit__batch=obj).values_list("status").annotate(n=Count("id")))
        return ", ".join(f"{label}: {counts.get(value, 0)}" for value, label in Assignment.Status.choices)

    @admin.display(description="see")
    def links(self, obj):
        return format_html('<a href="{}?hit__batch__id__exact={}">assignments</a> · '
                           '<a href="{}?assignment__hit__batch__id__exact={}">bonus ledger</a>',
                           reverse("admin:crowd_assignment_changelist"), obj.pk,
                           reverse("admin:crowd_bonuspayment_changelist"), obj.pk)

    def has_change_permission(self, request, obj=None):
        return False  # every change goes through the actions

    def has_delete_permission(self, request, obj=None):
        return False  # its HITs live on MTurk; expire it instead

    def get_urls(self):
        return [path("publish/", self.admin_site.admin_view(self.publish_view), name="crowd_batch_publish"),
                *super().get_urls()]

    def add_view(self, request, form_url="", extra_context=None):
        return HttpResponseRedirect(reverse("admin:crowd_batch_publish"))

    def publish_view(self, request):
        if not self.has_add_permission(request):
            return HttpResponseRedirect(reverse("admin:index"))
        tasks = Task.objects.all() if request.user.is_superuser else self.researched_tasks(request)
        form = PublishForm(request.POST or None, tasks=tasks, superuser=request.user.is_superuser)
        if request.method == "POST" and form.is_valid():
            req = form.request()
            try:
                batch = publish(req, user=request.user)
            except DomainError as exc:
                form.add_error(None, str(exc))
            except mturk.MTurkError as exc:
                form.add_error(None, f"{exc} Any HITs posted are kept: 'Publish the remaining HITs' goes on.")
            else:
                if batch.status == Batch.Status.AWAITING_APPROVAL:
                    self.message_user(request, f"Batch {batch.pk} may cost up to {usd(batch.max_cost)}; with what "
                                               "you published alone on this task in the last 24 hours that is over "
                                               f"CROWD_APPROVAL_THRESHOLD ({usd(settings.CROWD_APPROVAL_THRESHOLD)}): "
                                               "nothing is posted until a superuser other than you approves it.",
                                      messages.WARNING)
                else:
                    self.message_user(request, f"Published batch {batch.pk}: {batch.hits} HITs on the "
                                               f"{'sandbox' if batch.sandbox else 'LIVE site'}.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:crowd_batch_change", args=[batch.pk]))
        base_url = publishing.base_url_report(request.scheme, request.get_host())
        return TemplateResponse(request, "admin/crowd/publish.html", {
            **self.admin_site.each_context(request), "title": "Publish a batch of HITs", "form": form,
            "opts": self.model._meta, "sandbox": settings.MTURK_SANDBOX,
            # What publishing needs, said before the first click (publish() refuses without them).
            "needs": [
                {"ok": mturk.credentials_found(), "what": "AWS credentials",
                 "how": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the server's environment (or an AWS "
                        "profile) for the requester account"},
                {"ok": base_url.ok, "what": "an HTTPS PUBLIC_BASE_URL"
                 + (f" ({base_url.shown})" if base_url.ok else ""), "how": base_url.how},
            ],
            "base_url_warning": base_url.warning,
            "fees": {"rate": str(costs.FEE), "many_rate": str(costs.FEE_MANY_ASSIGNMENTS),
                     "many": costs.MANY_ASSIGNMENTS},
            "budgets": [budgets.standing(task, settings.MTURK_SANDBOX) for task in tasks.order_by("slug")],
            "forecasts": [costs.forecast(task, settings.MTURK_SANDBOX) for task in tasks.order_by("slug")],
            "targets": _target_rows(tasks),
            "approval_threshold": settings.CROWD_APPROVAL_THRESHOLD})

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        if hasattr(response, "context_data") and "cl" in response.context_data:
            changelist = response.context_data["cl"]
            shown = changelist.result_list
            listed = Batch.objects.filter(pk__in=[b.pk for b in shown])
            by_batch, committed = costs.spend_by_batch(listed), costs.committed_by_batch(listed)
            for batch in shown:
                batch.spend = by_batch.get(batch.pk, costs.Spend())
                batch.committed = committed.get(batch.pk, Decimal("0.00"))
            batches = changelist.queryset
            per_task = []
            for task in Task.objects.filter(mturk_batches__in=batches).distinct().order_by("slug"):
                spend = costs.spend(batches.filter(task=task))
                per_task.append({"task": task, "spend": spend,
                                 "budget": budgets.standing(task, settings.MTURK_SANDBOX)})
            response.context_data["per_task"] = per_task
        return response


@admin.register(Assignment)
class AssignmentAdmin(TaskScopedAdmin):
    task_path = "hit__batch__task"
    list_display = ["assignment_id", "worker", "batch", "status", "work", "accepted_at", "verified_at",
                    "decided_at", "feedback"]
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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


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


@admin.action(description="Lift the block on this task")
def lift_task_blocks(modeladmin, request, queryset):
    for block in queryset.select_related("task", "worker"):
        _report_mturk(modeladmin, request, block.worker.worker_id,
                      lambda b=block: workers.task_unblock(b, request.user) or "unblocked")


@admin.register(TaskBlock)
class TaskBlockAdmin(TaskScopedAdmin):
    """Workers kept out of one task by its batches' quality thresholds; the task's
    researchers may lift a block (blocks on every task are the identities' soft blocks)."""

    list_display = ["worker", "task", "sandbox", "batch", "reason", "blocked_at"]
    list_filter = ["sandbox", TASK_FILTER]
    list_select_related = ["worker", "task"]
    search_fields = exact_search_fields = ["worker__worker_id"]
    search_help_text = "An MTurk worker id (exact)."
    readonly_fields = [f.name for f in TaskBlock._meta.fields]
    actions = [lift_task_blocks]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # lift it with the action: MTurk's qualification goes too


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
class BonusPaymentAdmin(TaskScopedAdmin):
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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


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
            _report_mturk(modeladmin, request, identity.worker_id,
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
        _report_mturk(modeladmin, request, identity.worker_id,
                      lambda i=identity: workers.soft_unblock(i) or "unblocked")


@admin.action(description="Hard block on MTurk (CreateWorkerBlock)")
def hard_block(modeladmin, request, queryset):
    return _worker_form_action(modeladmin, request, queryset, BlockReasonForm, "Hard block on MTurk",
                               lambda identity, data: workers.hard_block(identity, data["reason"]))


@admin.action(description="Lift the hard block")
def hard_unblock(modeladmin, request, queryset):
    for identity in queryset.filter(hard_blocked_at__isnull=False):
        _report_mturk(modeladmin, request, identity.worker_id,
                      lambda i=identity: workers.hard_unblock(i) or "unblocked")


@admin.action(description="Send a message (MTurk email)")
def notify_workers(modeladmin, request, queryset):
    applied = "apply" in request.POST
    form = WorkerMessageForm(request.POST if applied else None)
    if not (applied and form.is_valid()):
        return _worker_form_action(modeladmin, request, queryset, WorkerMessageForm, "Message workers", None)
    # One NotifyWorkers call per 100 workers (crowd.mturk.notify), not one per worker.
    identities = list(queryset)
    _report_mturk(modeladmin, request, f"{len(identities)} workers", lambda: "; ".join(
        f"{f.get('WorkerId')}: {f.get('NotifyWorkersFailureMessage', 'failed')}"
        for f in workers.notify(identities, form.cleaned_data["subject"], form.cleaned_data["message"]))
        or "sent")


@admin.register(WorkerIdentity)
class WorkerIdentityAdmin(LargeListAdmin):
    """Worker identities span tasks, so only superusers manage them."""

    list_display = ["worker_id", "user", "sandbox", "verified_at", "soft_blocked_at", "hard_blocked_at",
                    "correct_share", "agreement", "earned"]
    list_filter = ["sandbox", ("verified_at", admin.EmptyFieldListFilter),
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
