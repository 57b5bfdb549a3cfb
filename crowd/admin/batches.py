"""Batches in the admin: the publish page (with its budgets, forecasts and target
checks), the actions that sync, pay, expire, approve or cancel a batch, and what a
batch costs per verified model-fooling example."""

from decimal import Decimal

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import Count, Q
from django.http import HttpResponseRedirect, StreamingHttpResponse
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from core.errors import DomainError, InvalidInput
from crowd import bonuses, budgets, costs, exports, mturk, pay, publishing, sync
from crowd.models import Assignment, Batch, CrowdPlatform, Currency
from crowd.money import usd
from crowd.platforms import PlatformError
from crowd.publishing import BatchRequest, post_hits, publish
from leaderboard.promotion import round_target_checks
from tasks.admin_lists import TASK_FILTER, TaskScopedAdmin
from tasks.models import Task

from .common import ReadOnlyAdminMixin, report_mturk


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
    platform = forms.ChoiceField(
        choices=CrowdPlatform.choices, initial=CrowdPlatform.MTURK, required=False,
        help_text="MTurk: HITs, in USD. Prolific: one study (HITs = 1; its places are the assignments per HIT), in "
                  "GBP or USD, with an estimated time that Prolific's minimum hourly reward is checked against.")
    currency = forms.ChoiceField(choices=Currency.choices, initial=Currency.USD, required=False,
                                 help_text="MTurk: USD only. The reward and bonus below are in this currency.")
    estimated_minutes = forms.IntegerField(
        required=False, min_value=1, max_value=24 * 60, label="Estimated minutes (Prolific)",
        help_text="The study's estimated completion time; the hourly rate it implies is shown and must reach "
                  "PROLIFIC_MIN_HOURLY_REWARD.")
    round_number = forms.IntegerField(required=False, min_value=1, label="Round",
                                      help_text="Empty: the task's open round.")
    hits = forms.IntegerField(min_value=1, max_value=1000, initial=10)
    assignments_per_hit = forms.IntegerField(min_value=1, max_value=100, initial=1)
    examples_per_assignment = forms.IntegerField(min_value=1, max_value=100, initial=5)
    reward = forms.DecimalField(min_value=Decimal("0.01"), decimal_places=2, initial=Decimal("0.50"),
                                help_text="Per approved assignment, in the batch's currency.")
    bonus_per_example = forms.DecimalField(min_value=Decimal("0"), decimal_places=2, initial=Decimal("0.25"),
                                           help_text="Per verified model-fooling example (writing only).")
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
    require_onboarding = forms.BooleanField(
        required=False, help_text="Only workers who passed the task's onboarding see these HITs (its MTurk "
                                  "qualification). To recruit them, publish a batch in the mode 'Onboarding only'.")
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
    accept_low_pay = forms.BooleanField(
        required=False, label="Publish although the estimated hourly pay is below the floor",
        help_text="Asked only when the task's earlier batches say this batch would pay less per hour than "
                  "DYNABENCH_MIN_HOURLY_PAY (see Pay per hour above).")
    confirm = forms.BooleanField(label="I have checked the amounts", required=True)

    def __init__(self, *args, tasks=None, superuser=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["task"].queryset = tasks if tasks is not None else Task.objects.none()
        if not superuser:  # the service refuses the override to anyone else too
            del self.fields["allow_below_reference"], self.fields["override_reason"]

    def clean(self):
        """The platform's rules, Prolific's hourly minimum among them, before any call: the
        service's own check (``publishing.check_platform``), its message on the field."""
        data = super().clean()
        self.implied_rate = None
        if self.errors or not data.get("task"):
            return data
        req = self.request()
        self.implied_rate = publishing.hourly_rate(req.reward, req.estimated_minutes)
        try:
            publishing.check_platform(req)
        except InvalidInput as exc:
            for name, messages_ in exc.errors.items():
                self.add_error(name if name in self.fields else None, " ".join(messages_))
        return data

    def request(self) -> BatchRequest:
        data = self.cleaned_data
        return BatchRequest(
            platform=data.get("platform") or CrowdPlatform.MTURK, currency=data.get("currency") or Currency.USD,
            estimated_minutes=data.get("estimated_minutes"),
            task=data["task"], mode=data["mode"], hits=data["hits"], assignments_per_hit=data["assignments_per_hit"],
            reward=data["reward"], bonus_per_example=data["bonus_per_example"], round_number=data["round_number"],
            examples_per_assignment=data["examples_per_assignment"], title=data["title"],
            description=data["description"], assignment_duration_seconds=_seconds(data["assignment_duration_hours"]),
            lifetime_seconds=_seconds(data["lifetime_hours"]),
            auto_approval_delay_seconds=_seconds(data["auto_approval_delay_hours"]),
            locales=tuple(c.strip().upper() for c in data["locales"].split(",") if c.strip()),
            min_approval_rate=data["min_approval_rate"], min_approved_count=data["min_approved_count"],
            quality_block_threshold=data["quality_block_threshold"],
            require_onboarding=data["require_onboarding"],
            allow_below_reference=data.get("allow_below_reference", False),
            override_reason=data.get("override_reason", ""))


@admin.action(description="Sync with MTurk now (verify, approve or reject, returns, expiry)")
def sync_batches(modeladmin, request, queryset):
    for batch in queryset:
        report_mturk(modeladmin, request, f"Batch {batch.pk}", lambda b=batch: sync.sync_batch(b))


@admin.action(description="Pay due bonuses now")
def pay_batch_bonuses(modeladmin, request, queryset):
    for batch in queryset:
        report_mturk(modeladmin, request, f"Batch {batch.pk}", lambda b=batch: bonuses.pay_bonuses(b.pk))


@admin.action(description="Expire: stop taking new workers (work already taken goes on)")
def expire_batches(modeladmin, request, queryset):
    for batch in queryset.filter(status__in=[Batch.Status.PUBLISHING, Batch.Status.PUBLISHED]):
        report_mturk(modeladmin, request, f"Batch {batch.pk}",
                      lambda b=batch: "expired" if sync.expire_batch(b) else "not expired")


@admin.action(description="Publish the remaining HITs (after an interrupted publish)")
def publish_remaining(modeladmin, request, queryset):
    for batch in queryset.filter(status=Batch.Status.PUBLISHING):
        report_mturk(modeladmin, request, f"Batch {batch.pk}",
                      lambda b=batch: f"{b.hit_rows.filter(hit_id__isnull=False).count()} HITs posted"
                      if post_hits(b) else "")


def _approve(batch: Batch, user) -> str:
    posted = publishing.approve(batch, user).hit_rows.filter(hit_id__isnull=False).count()
    return f"approved; {posted} HITs posted"


@admin.action(description="Approve and publish (superusers; not the batch's own creator)")
def approve_batches(modeladmin, request, queryset):
    for batch in queryset.filter(status=Batch.Status.AWAITING_APPROVAL):
        report_mturk(modeladmin, request, f"Batch {batch.pk}", lambda b=batch: _approve(b, request.user))


@admin.action(description="Cancel (a batch awaiting approval: nothing was posted)")
def cancel_batches(modeladmin, request, queryset):
    for batch in queryset.filter(status=Batch.Status.AWAITING_APPROVAL):
        report_mturk(modeladmin, request, f"Batch {batch.pk}",
                      lambda b=batch: publishing.cancel(b, request.user) and "cancelled")


@admin.action(description="Export their assignments as CSV (with the workers' feedback)")
def export_assignments(modeladmin, request, queryset):
    ids = list(queryset.values_list("pk", flat=True))
    response = StreamingHttpResponse(exports.csv_lines(exports.assignment_rows(ids)), content_type="text/csv")
    name = f"assignments-batch-{ids[0]}.csv" if len(ids) == 1 else "assignments.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


# How many of a batch's feedback texts its page shows (the export has them all).
FEEDBACK_SHOWN = 50


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdminMixin, TaskScopedAdmin):
    """Batches are added by publishing them; nothing else of one is edited here (every change
    goes through the actions), and none is deleted: its HITs live on MTurk, expire it instead."""

    list_display = ["id", "task", "round_number", "mode", "platform", "sandbox", "status", "hits",
                    "assignments_per_hit", "approved", "spent", "committed_shown", "max_cost_shown",
                    "per_verified_fooling", "median_time", "hourly_pay"]
    list_filter = ["status", "mode", "platform", "sandbox", TASK_FILTER]
    list_select_related = ["task", "round"]
    actions = [sync_batches, pay_batch_bonuses, expire_batches, publish_remaining, approve_batches, cancel_batches,
               export_assignments]
    readonly_fields = [f.name for f in Batch._meta.fields] + ["spending", "committed_shown", "assignment_counts",
                                                               "links", "pay_per_hour", "workers_feedback"]
    fieldsets = [
        (None, {"fields": ["task", "round", "mode", "sandbox", "status", "last_error", "links"]}),
        ("Money", {"fields": ["spending", "pay_per_hour", "committed_shown", "reward", "bonus_per_example",
                              "max_cost"]}),
        ("Work", {"fields": ["assignment_counts", "hits", "assignments_per_hit", "examples_per_assignment",
                             "assignment_duration_seconds", "lifetime_seconds", "auto_approval_delay_seconds"]}),
        ("Workers' feedback", {"fields": ["workers_feedback"]}),
        ("On MTurk", {"fields": ["title", "description", "keywords", "hit_type_id", "locales", "min_approval_rate",
                                 "min_approved_count", "quality_block_threshold", "require_onboarding", "uid"]}),
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

    @staticmethod
    def _pay(obj) -> pay.BatchPay:
        """The list reads every shown row's at once (changelist_view); a page, its own."""
        if not hasattr(obj, "pay"):
            obj.pay = pay.batch_pay(obj)
        return obj.pay

    @admin.display(description="median time per assignment")
    def median_time(self, obj):
        minutes = self._pay(obj).median_minutes
        return "—" if minutes is None else f"{minutes:.1f} min"

    @admin.display(description="effective hourly pay (median)")
    def hourly_pay(self, obj):
        rate = self._pay(obj).median_hourly
        if rate is None:
            return "—"
        floor = pay.floor()
        if floor and rate < floor:
            return format_html('<strong class="below-floor">{}/h</strong> (below {}/h)', usd(rate), usd(floor))
        return f"{usd(rate)}/h"

    @admin.display(description="pay per hour")
    def pay_per_hour(self, obj):
        found = self._pay(obj)
        if found.median_seconds is None:
            return "No submitted assignment with both its accept and submit times yet."
        rate = "—" if found.median_hourly is None else f"{usd(found.median_hourly)}/h"
        return format_html(
            "median {} min per assignment over {} submitted; effective hourly pay (reward plus bonuses paid, median "
            "over {} approved): <strong>{}</strong>; the floor (DYNABENCH_MIN_HOURLY_PAY) is {}/h",
            f"{found.median_minutes:.1f}", found.timed, found.paid_timed, rate, usd(pay.floor()))

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

    @admin.display(description="what workers wrote in the feedback box")
    def workers_feedback(self, obj):
        given = (Assignment.objects.filter(hit__batch=obj).exclude(worker_feedback="")
                 .select_related("worker").order_by("-accepted_at", "-id")[:FEEDBACK_SHOWN])
        if not given:
            return "None yet."
        return format_html("<ul>{}</ul>", format_html_join(
            "", "<li><strong>{}</strong> ({}): {}</li>",
            ((a.worker.worker_id, a.assignment_id, a.worker_feedback) for a in given)))

    @admin.display(description="see")
    def links(self, obj):
        return format_html('<a href="{}?hit__batch__id__exact={}">assignments</a> · '
                           '<a href="{}?assignment__hit__batch__id__exact={}">bonus ledger</a>',
                           reverse("admin:crowd_assignment_changelist"), obj.pk,
                           reverse("admin:crowd_bonuspayment_changelist"), obj.pk)

    def has_add_permission(self, request):
        # Adding a batch is publishing one: the add page is the publish form (and publish() checks again).
        return super(ReadOnlyAdminMixin, self).has_add_permission(request)

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
        low_pay = None
        if request.method == "POST" and form.is_valid():
            req = form.request()
            found = pay.estimate(req.task, req.mode)
            if found.below_floor(req.reward, req.bonus_per_example):
                low_pay = {"rate": found.hourly_for(req.reward, req.bonus_per_example), "floor": found.floor,
                           "reward": found.reward_for_floor(req.bonus_per_example), "estimate": found}
        if request.method == "POST" and form.is_valid() and low_pay and not form.cleaned_data["accept_low_pay"] \
                and not settings.DYNABENCH_REFUSE_BELOW_MIN_PAY:
            form.add_error("accept_low_pay", f"This batch would pay about ${low_pay['rate']}/hour at the median "
                                             f"time of the task's earlier batches, below the floor of "
                                             f"${low_pay['floor']}/hour: a reward of ${low_pay['reward']} reaches "
                                             "it. Raise the reward, or tick this box to publish anyway.")
        elif request.method == "POST" and form.is_valid():
            try:
                batch = publish(req, user=request.user)
            except DomainError as exc:
                form.add_error(None, str(exc))
            except PlatformError as exc:
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
                {"ok": bool(settings.PROLIFIC_TOKEN), "what": "a Prolific API token (for Prolific batches only)",
                 "how": "PROLIFIC_TOKEN in the server's environment (Prolific: Settings > API tokens)"},
                {"ok": base_url.ok, "what": "an HTTPS PUBLIC_BASE_URL"
                 + (f" ({base_url.shown})" if base_url.ok else ""), "how": base_url.how},
            ],
            "base_url_warning": base_url.warning,
            "implied_rate": getattr(form, "implied_rate", None),
            "prolific_minimum": sorted(settings.PROLIFIC_MIN_HOURLY_REWARD.items()),
            "fees": {"rate": str(costs.FEE), "many_rate": str(costs.FEE_MANY_ASSIGNMENTS),
                     "prolific_rate": str(settings.PROLIFIC_FEE_RATE),
                     "many": costs.MANY_ASSIGNMENTS},
            "budgets": [budgets.standing(task, settings.MTURK_SANDBOX) for task in tasks.order_by("slug")],
            "forecasts": [costs.forecast(task, settings.MTURK_SANDBOX) for task in tasks.order_by("slug")],
            "targets": _target_rows(tasks),
            "pay_estimates": [pay.estimate(task, mode) for task in tasks.order_by("slug")
                              for mode in Batch.Mode.values],
            "pay_floor": pay.floor(), "refuse_below_floor": settings.DYNABENCH_REFUSE_BELOW_MIN_PAY,
            "low_pay": low_pay,
            "approval_threshold": settings.CROWD_APPROVAL_THRESHOLD})

    def changelist_view(self, request, extra_context=None):
        response = super().changelist_view(request, extra_context)
        if hasattr(response, "context_data") and "cl" in response.context_data:
            changelist = response.context_data["cl"]
            shown = changelist.result_list
            listed = Batch.objects.filter(pk__in=[b.pk for b in shown])
            by_batch, committed = costs.spend_by_batch(listed), costs.committed_by_batch(listed)
            pays = pay.pay_by_batch([b.pk for b in shown])
            for batch in shown:
                batch.pay = pays[batch.pk]
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

