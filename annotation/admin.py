"""Admin for examples, validations and annotation sessions.

What the platform decided is read-only here: an example's text, answers, model
predictions, ``fooled``, validation status and counters, and every Validation
row. Flags and sessions change through actions that call the services.
Researchers who are not superusers see only their own tasks' rows.
"""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db import connection, connections
from django.db.models import Q
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from core.errors import DomainError, InvalidInput
from tasks.admin_lists import (
    TASK_FILTER,
    FilterRefused,
    ScopedRelatedFilter,
    TaskRoundFilter,
    TaskScopedAdmin,
    refuse_unknown,
    refuse_unknown_round_numbers,
    run_service_action,
)
from tasks.models import Round, Task

from . import examples as example_services
from . import exports as export_services
from . import gold as gold_services
from . import onboarding_admin  # noqa: F401  (registers the onboarding records' list)
from . import reliability as reliability_services
from . import trust as trust_services
from . import validation as validation_services
from .exporting import EXCLUDE, INCLUDE, ONLY, Selection
from .models import (
    AnnotationSession,
    Example,
    ReliabilityFit,
    Validation,
    ValidatorReliability,
    VouchedValidator,
)


class ValidationInline(admin.TabularInline):
    model = Validation
    extra = 0
    fields = ["validator", "blind_answer", "blind_agrees", "label", "mode", "counted", "not_counted_because", "reason",
              "created_at", "decided_at"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.action(description="Flag the selected examples")
def flag_examples(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset.select_related("task"),
                       lambda e: example_services.flag_example(e, request.user, "flagged by a researcher in the admin"),
                       "Flagged")


@admin.action(description="Unflag the selected examples")
def unflag_examples(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset.select_related("task"),
                       lambda e: example_services.unflag_example(e, request.user), "Unflagged")


@admin.action(description="Make gold items: the writer is right")
def gold_correct(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset.select_related("task"),
                       lambda e: validation_services.mark_gold(e.pk, request.user, "correct"),
                       "Made gold (writer right)")


@admin.action(description="Make gold items: the writer is wrong")
def gold_incorrect(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset.select_related("task"),
                       lambda e: validation_services.mark_gold(e.pk, request.user, "incorrect"),
                       "Made gold (writer wrong)")


@admin.action(description="Retire gold items: public like any example, no longer served as gold")
def gold_retire(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset.select_related("task"),
                       lambda e: gold_services.retire(e, request.user), "Retired")


DECIDED_FIELDS = [
    "uid", "external_uid", "task", "round", "context", "annotator", "source", "inputs", "target",
    "model_predictions", "prediction", "fooled", "retracted", "flagged", "flag_reason", "flagged_by",
    "validation_status", "gold_verdict", "gold_retired_at", "validations_correct", "validations_incorrect",
    "validations_flagged",
    "latency_ms",
    "signature", "created_at", "updated_at",
]


# The text search of examples on PostgreSQL: the words of what was written (``inputs``,
# its field names included), by this configuration. Migration 0009 indexes exactly this
# expression (a GIN index, on PostgreSQL only); the search must use the same one to be
# served by it (tests/tasks/test_admin_lists.py reads the plan).
INPUTS_TEXT_SEARCH_CONFIG = "english"


def inputs_text_search(queryset, text: str):
    """``(queryset, Q)``: the examples whose inputs hold the words of ``text`` (web search
    syntax: quotes, or, -word), on PostgreSQL; Q is None on other databases."""
    if connections[queryset.db].vendor != "postgresql":
        return queryset, None
    from django.contrib.postgres.search import SearchQuery, SearchVector  # noqa: PLC0415 - PostgreSQL only; the SQLite mode never loads it

    queryset = queryset.alias(inputs_words=SearchVector("inputs", config=INPUTS_TEXT_SEARCH_CONFIG))
    return queryset, Q(inputs_words=SearchQuery(text, config=INPUTS_TEXT_SEARCH_CONFIG, search_type="websearch"))


WITHDRAWN = [(EXCLUDE, "Leave them out"), (INCLUDE, "Include them"), (ONLY, "Export only these")]
ANY = [("", "Any")]


class ExportForm(forms.Form):
    """Which of a task's examples to export, and in which format (``exporting.Selection``)."""

    task = forms.ModelChoiceField(queryset=Task.objects.none(), help_text="An export is of one task.")
    round = forms.ModelChoiceField(queryset=Round.objects.none(), required=False, empty_label="Every round")
    split = forms.ChoiceField(choices=ANY + Example.Split.choices, required=False)
    source = forms.ChoiceField(choices=ANY + Example.Source.choices, required=False)
    validation_status = forms.ChoiceField(choices=ANY + Example.ValidationStatus.choices, required=False)
    fooled = forms.ChoiceField(required=False, label="Fooled the model", choices=ANY + [
        ("yes", "Yes"), ("no", "No"), ("unknown", "Unknown (no model answered)")])
    retracted = forms.ChoiceField(choices=WITHDRAWN, initial=EXCLUDE, label="Retracted examples",
                                  help_text="Those their writers took back.")
    flagged = forms.ChoiceField(choices=WITHDRAWN, initial=EXCLUDE, label="Flagged examples")
    created_from = forms.DateTimeField(required=False, label="Written from", help_text="UTC, e.g. 2026-01-31 00:00")
    created_before = forms.DateTimeField(required=False, label="Written before")
    format = forms.ChoiceField(initial="csv", choices=[
        ("csv", "CSV: a column per field, for spreadsheets"),
        ("jsonl", "JSON Lines: the exact records (import_dataset --format dynabench reads them back)")])

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        tasks = Task.objects.researched_by(user).order_by("name")
        self.fields["task"].queryset = tasks
        self.fields["round"].queryset = Round.objects.filter(task__in=tasks).select_related("task").order_by(
            "task__name", "number")
        self.fields["round"].label_from_instance = lambda r: f"{r.task.name}, round {r.number}"

    def clean(self):
        data = super().clean()
        task, rnd = data.get("task"), data.get("round")
        if task is not None and rnd is not None and rnd.task_id != task.pk:
            self.add_error("round", f"Round {rnd.number} of {rnd.task.name} is not a round of {task.name}.")
        return data

    def selection(self) -> Selection:
        data = self.cleaned_data
        return Selection(
            task_id=data["task"].pk, round_number=data["round"].number if data["round"] else None,
            split=data["split"] or None, source=data["source"] or None,
            validation_status=data["validation_status"] or None, fooled=data["fooled"] or None,
            retracted=data["retracted"], flagged=data["flagged"],
            created_from=data["created_from"], created_before=data["created_before"])


def _moment(value: str):
    """A date filter's bound as the list passes it (a date, or a date and time)."""
    moment = parse_datetime(value) if value else None
    if moment is None and value and parse_date(value) is not None:
        moment = parse_datetime(value + " 00:00")
    return moment


def export_initial(request) -> dict:
    """The export form's values from the example list's filters (its query string). A
    task or round outside the user's tasks is refused (``FilterRefused``), as the list does."""
    get = request.GET.get
    initial = {"retracted": EXCLUDE, "flagged": EXCLUDE, "format": "csv"}
    for name in ("split", "source", "validation_status"):
        if get(f"{name}__exact"):
            initial[name] = get(f"{name}__exact")
    if get("fooled__isnull") == "True":
        initial["fooled"] = "unknown"
    elif get("fooled__exact") in ("0", "1"):
        initial["fooled"] = "yes" if get("fooled__exact") == "1" else "no"
    for name in ("retracted", "flagged"):
        if get(f"{name}__exact") in ("0", "1"):
            initial[name] = ONLY if get(f"{name}__exact") == "1" else EXCLUDE
    initial["created_from"], initial["created_before"] = _moment(get("created_at__gte")), _moment(
        get("created_at__lt"))
    tasks = Task.objects.researched_by(request.user)
    task_id = get("task__id__exact")
    if task_id:
        refuse_unknown([task_id], tasks.values_list("pk", flat=True), "task", "among your tasks")
        initial["task"] = tasks.get(pk=task_id)
    rounds = Round.objects.filter(task__in=tasks).select_related("task")
    if "task" in initial:
        rounds = rounds.filter(task=initial["task"])
    where = f"task {initial['task'].name}" if "task" in initial else "your tasks"
    if get("round__id__exact"):
        value = get("round__id__exact")
        refuse_unknown([value], rounds.values_list("pk", flat=True), "round", f"in {where}")
        initial["round"] = rounds.get(pk=value)
        initial["task"] = initial["round"].task
    elif get("round__number"):
        value = get("round__number")
        refuse_unknown_round_numbers([value], rounds.values_list("number", flat=True), where)
        if "task" in initial:  # without a task the list shows that round of every task: the form asks which
            initial["round"] = rounds.get(number=value)
    return initial


@admin.register(Example)
class ExampleAdmin(TaskScopedAdmin):
    list_display = ["__str__", "task", "round", "split", "source", "fooled", "validation_status",
                    "retracted", "flagged", "created_at"]
    # No date hierarchy (its years and months are distinct values over every example): the
    # date filter's choices are fixed ranges, served by the created_at index.
    # The round filter lists the chosen task's rounds (the Round table, not the examples).
    list_filter = [TASK_FILTER, ("round", TaskRoundFilter), "source", "split", "fooled", "validation_status",
                   "retracted", "flagged", ("created_at", admin.DateFieldListFilter)]
    list_select_related = ["task", "round__task"]
    sortable_by = ["created_at"]  # the orders an index serves
    search_fields = exact_search_fields = ["uid", "external_uid", "annotator__username"]
    fields = [*DECIDED_FIELDS[:8], "split", *DECIDED_FIELDS[8:], "metadata"]
    readonly_fields = DECIDED_FIELDS
    inlines = [ValidationInline]
    actions = [flag_examples, unflag_examples, gold_correct, gold_incorrect, gold_retire]
    # "Export…" above the list: the whole filtered list of one task, written by a job.
    change_list_template = "admin/annotation/example/change_list.html"

    @property
    def search_help_text(self):
        exact = "An example's uid, external uid, or its writer's username (exact)"
        if connection.vendor == "postgresql":
            return f"{exact}; or words of what was written (\"a phrase\", or, -word)."
        return f"{exact}."

    def text_search(self, queryset, text):
        return inputs_text_search(queryset, text)

    def has_add_permission(self, request):
        return False  # examples are written through the annotation flow or imported

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}_export"
        return [path("export/", self.admin_site.admin_view(self.export_view), name=name), *super().get_urls()]

    def export_view(self, request):
        """Export the examples the list shows (its task, round and other filters) as a job:
        a form, prefilled from the list's filters, that queues the job and goes to its page."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            form = ExportForm(request.POST, user=request.user)
            if form.is_valid():
                try:
                    job = export_services.start_export(request.user, form.cleaned_data["task"], form.selection(),
                                                       form.cleaned_data["format"])
                except InvalidInput as exc:
                    for field, problems in exc.errors.items():
                        form.add_error(field if field in form.fields else None, problems)
                except DomainError as exc:
                    form.add_error(None, exc.message)
                else:
                    self.message_user(request, f"Export job #{job.pk} queued: its page shows how far it is and "
                                               "offers the file once it is written.", messages.SUCCESS)
                    return redirect(job.get_absolute_url())
        else:
            try:
                form = ExportForm(initial=export_initial(request), user=request.user)
            except FilterRefused as exc:
                return TemplateResponse(request, "admin/filter_refused.html", {
                    **self.admin_site.each_context(request), "opts": self.opts, "message": str(exc),
                    "title": "Cannot export these examples", "list_url": "../"}, status=400)
        context = {
            **self.admin_site.each_context(request),
            "title": "Export examples",
            "opts": self.opts,
            "form": form,
            "search_ignored": bool(request.GET.get("q", "").strip()),
        }
        return TemplateResponse(request, "admin/annotation/example/export.html", context,
                                status=400 if form.is_bound else 200)

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser

    # Through the services, which keep the round counters in step.
    def save_model(self, request, obj, form, change):
        if "split" in form.changed_data:
            example_services.move_to_split(obj, obj.split)
        if "metadata" in form.changed_data:
            obj.save(update_fields=["metadata", "updated_at"])

    def delete_model(self, request, obj):
        example_services.delete_examples(Example.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        example_services.delete_examples(queryset)


@admin.register(Validation)
class ValidationAdmin(TaskScopedAdmin):
    task_path = "task"
    list_display = ["__str__", "example", "validator", "label", "blind_agrees", "mode", "counted",
                    "not_counted_because", "created_at"]
    list_filter = ["label", "mode", "blind_agrees", "counted", "not_counted_because",
                   ("task", ScopedRelatedFilter)]
    list_select_related = ["example__task", "validator"]
    sortable_by = ["created_at"]
    search_fields = exact_search_fields = ["validator__username", "example__uid"]
    search_help_text = "A validator's username, or the uid of the example (exact)."

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.action(description="End the selected sessions (their tokens stop working)")
def revoke_sessions(modeladmin, request, queryset):
    ended = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
    modeladmin.message_user(request, f"Ended {ended} session(s).", messages.SUCCESS)


@admin.register(VouchedValidator)
class VouchedValidatorAdmin(TaskScopedAdmin):
    """Validators a task's researchers vouch for: their votes count on the task."""

    list_display = ["validator", "task", "vouched_by", "created_at"]
    list_filter = [TASK_FILTER]
    fields = ["task", "validator"]
    search_fields = exact_search_fields = ["validator__username"]
    raw_id_fields = ["validator"]

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)

    def save_model(self, request, obj, form, change):
        trust_services.vouch(obj.task, obj.validator, request.user)


@admin.register(AnnotationSession)
class AnnotationSessionAdmin(TaskScopedAdmin):
    list_display = ["__str__", "user", "task", "examples_written", "examples_fooled", "validations_done",
                    "revoked_at", "last_seen_at", "created_at"]
    list_filter = [TASK_FILTER, ("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["user", "task"]
    sortable_by = ["created_at"]
    # An MTurk assignment's session is found from the assignment's page (crowd), by its id.
    search_fields = exact_search_fields = ["user__username", "key"]
    search_help_text = "A username, or the session's key (exact)."
    actions = [revoke_sessions]

    def get_readonly_fields(self, request, obj=None):
        """Every field: a session's mode, expiry, provisional state and counters are the
        platform's record of what was allowed and done; ending one is the action's job."""
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request):
        return False



class ReadOnlyAdmin(TaskScopedAdmin):
    """Rows the platform computes: shown, never written here."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(ValidatorReliability)
class ValidatorReliabilityAdmin(ReadOnlyAdmin):
    """Each validator's estimated reliability per task (adaptive validation): accuracy
    with its 95% interval, sensitivity, specificity and the weight of one vote. A weight
    near 0 is a validator whose votes decide nothing (always "correct", or at random)."""

    list_display = ["validator", "task", "votes", "accuracy_pct", "interval", "sensitivity_pct",
                    "specificity_pct", "weight_shown", "fitted_at"]
    list_filter = [TASK_FILTER]
    list_select_related = ["validator", "task"]
    search_fields = exact_search_fields = ["validator__username"]
    search_help_text = "A validator's username (exact)."
    # The order of an index (by the task's name, every row would be read and sorted); sorting
    # by a column reads the task's validators, not the examples.
    ordering = ["task_id", "-votes", "-id"]

    @admin.display(description="accuracy", ordering="accuracy")
    def accuracy_pct(self, obj):
        return f"{obj.accuracy:.1%}"

    @admin.display(description="95% interval")
    def interval(self, obj):
        return f"{obj.accuracy_low:.1%} – {obj.accuracy_high:.1%}"

    @admin.display(description="sensitivity", ordering="sensitivity")
    def sensitivity_pct(self, obj):
        return f"{obj.sensitivity:.1%}"

    @admin.display(description="specificity", ordering="specificity")
    def specificity_pct(self, obj):
        return f"{obj.specificity:.1%}"

    @admin.display(description="vote weight", ordering="weight")
    def weight_shown(self, obj):
        return f"{obj.weight:.2f}"


@admin.action(description="Refit the reliability model now")
def refit_now(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset, lambda fit: reliability_services.refit(fit.task),
                       "Refitted")


@admin.register(ReliabilityFit)
class ReliabilityFitAdmin(ReadOnlyAdmin):
    """The last fit of each task's reliability model: what it read and what it cost."""

    list_display = ["task", "fitted_at", "votes", "anchors", "validators", "iterations", "converged",
                    "seconds", "overall_prior_right"]
    list_select_related = ["task"]
    actions = [refit_now]

    def has_change_permission(self, request, obj=None):
        # The action needs change permission on the rows it runs on; the fields stay read-only.
        return TaskScopedAdmin.has_change_permission(self, request, obj)

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in self.model._meta.fields]
