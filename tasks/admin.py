"""Admin for tasks, rounds, contexts, model versions and jobs.

The admin is no back door: a researcher who is not a superuser sees and edits
only the rows of the tasks they own (``TaskScopedAdmin``), round status moves
only through actions that call the services, and what the platform decided
(counters, sha256, metrics) is read-only. A round's page uploads a file of
contexts to it ("Upload contexts", ``uploads.upload_contexts``).
"""

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.forms.models import BaseInlineFormSet
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.errors import DomainError, InvalidInput
from jobs import engine
from jobs.models import Job
from registry.models import ModelVersion

from . import services, uploads
from .admin_lists import TASK_FILTER, Extensible, TaskScopedAdmin, run_service_action
from .models import Context, Round, Task


class RoundInlineFormSet(BaseInlineFormSet):
    """The Task form's rounds table: its column headers are not the inputs' labels, so
    each input, select and checkbox of a row, the formset's delete box included, is
    named for assistive technology (its field's label and the row's round)."""

    def add_fields(self, form, index):
        super().add_fields(form, index)
        which = f", round {form.instance.number}" if form.instance.pk else ", new round"
        for field in form.fields.values():
            field.widget.attrs.setdefault("aria-label", f"{str(field.label).rstrip('?').capitalize()}{which}")


class RoundInline(admin.TabularInline):
    model = Round
    formset = RoundInlineFormSet
    extra = 0
    fields = ["number", "status", "ensemble_mode", "opened_at", "closed_at"]
    readonly_fields = ["status", "opened_at", "closed_at"]
    show_change_link = True


class TaskForm(forms.ModelForm):
    class Meta:
        model = Task
        fields = ["name", "slug", "task_type", "is_active", "is_hidden", "owners", "goal", "instructions",
                  "content_warning", "config"]
        # The owners are staff only (a few people): one labelled checkbox each. Django's
        # two-list picker puts a prohibited aria-label on its help icon (axe, WCAG 4.1.2).
        widgets = {"owners": forms.CheckboxSelectMultiple}

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk and not self.errors:
            try:
                services.check_config_change(self.instance, cleaned["task_type"], cleaned["config"])
            except DomainError as exc:
                raise forms.ValidationError(exc.message) from None
        return cleaned


@admin.register(Task)
class TaskAdmin(Extensible, TaskScopedAdmin):
    form = TaskForm
    task_path = "pk"
    list_display = ["name", "slug", "task_type", "is_active", "is_hidden", "round_count", "updated_at"]
    list_filter = ["task_type", "is_active", "is_hidden"]
    search_fields = ["name", "slug", "goal"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [RoundInline]
    fieldsets = [
        (None, {"fields": ["name", "slug", "task_type", "is_active", "is_hidden", "owners"]}),
        ("Annotator-facing text", {"fields": ["goal", "instructions", "content_warning"]}),
        ("Config", {"fields": ["config"], "description": (
            "JSON checked against the task config schema: context_fields, input_fields, labels, "
            "model_inputs, model_wrong_metric, num_matching_validations, context_sampling, "
            "max_input_length, blind_validation, license (its data releases' licence: a Hub licence id "
            "such as cc-by-4.0; default unspecified), language (default [\"en\"])."
        )}),
    ]

    def get_readonly_fields(self, request, obj=None):
        return ["slug"] if obj is not None else []  # links and HITs point at it

    def get_prepopulated_fields(self, request, obj=None):
        return {} if obj is not None else self.prepopulated_fields

    def get_queryset(self, request):
        queryset = Task.objects.annotate(_round_count=Count("rounds"))
        return queryset if request.user.is_superuser else queryset.filter(pk__in=self.researched_tasks(request))

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        if not change and not request.user.is_superuser:
            form.instance.owners.add(request.user)  # a researcher owns the tasks they create

    @admin.display(description="rounds", ordering="_round_count")
    def round_count(self, obj):
        return obj._round_count


@admin.action(description="Open the selected rounds (closes the task's open round)")
def open_rounds(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset, services.open_round, "Opened")


@admin.action(description="Close the selected rounds")
def close_rounds(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset, services.close_round, "Closed")


class RoundForm(forms.ModelForm):
    class Meta:
        model = Round
        fields = ["task", "number", "ensemble_mode", "description", "target_models", "starts_at", "ends_at"]

    def clean(self):
        cleaned = super().clean()
        task = cleaned.get("task") or (self.instance.task if self.instance.task_id else None)
        foreign = [m.name for m in cleaned.get("target_models") or [] if task and m.task_id != task.pk]
        if foreign:
            raise forms.ValidationError(f"Target models must be models of this round's task, not {foreign}.")
        return cleaned


class ContextUploadForm(forms.Form):
    file = forms.FileField(
        allow_empty_file=True,
        help_text="UTF-8 JSON lines or CSV; every row is checked, and one bad row means nothing is added.")
    format = forms.ChoiceField(
        choices=[("", "Tell from the file name (.jsonl, .csv)"), ("jsonl", "JSON lines"), ("csv", "CSV")],
        required=False)


@admin.register(Round)
class RoundAdmin(TaskScopedAdmin):
    form = RoundForm
    change_form_template = "admin/tasks/round/change_form.html"
    list_display = ["__str__", "task", "number", "status", "ensemble_mode", "opened_at", "closed_at"]
    list_filter = ["status", TASK_FILTER]
    list_select_related = ["task"]
    search_fields = ["task__slug", "task__name", "description"]
    filter_horizontal = ["target_models"]
    readonly_fields = ["status", "opened_at", "closed_at", "created_at"]
    actions = [open_rounds, close_rounds]

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.status != Round.Status.DRAFT:
            # An open or closed round keeps its target: a new target means a new round (promote).
            fields += ["target_models", "ensemble_mode"]
        return [*fields, "task", "number"] if obj is not None else fields

    def get_urls(self):
        name = f"{self.opts.app_label}_{self.opts.model_name}_upload_contexts"
        upload = path("<path:object_id>/upload-contexts/", self.admin_site.admin_view(self.upload_contexts_view),
                      name=name)
        return [upload, *super().get_urls()]

    def upload_contexts_view(self, request, object_id):
        """Upload a file of contexts to the round (``uploads.upload_contexts`` does the work)."""
        rnd = self.get_object(request, unquote(object_id))  # None outside the researcher's tasks
        if rnd is None:
            raise Http404("No such round among your tasks.")
        if not self.has_change_permission(request, rnd):
            raise PermissionDenied
        form = ContextUploadForm(request.POST or None, request.FILES or None)
        refusal = None
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                report = uploads.upload_contexts(
                    rnd.task, rnd, uploads.read_upload(upload), file_format=form.cleaned_data["format"] or None,
                    filename=upload.name or "", user=request.user)
            except uploads.UploadRefused as exc:
                refusal = exc
            except InvalidInput as exc:  # a bad format or file as a whole (rows are the refusal above)
                for field, problems in exc.errors.items():
                    form.add_error(field if field in form.fields else None, problems)
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                noun = "context" if report.created == 1 else "contexts"
                self.message_user(
                    request, f"Added {report.created} {noun} to {rnd} ({report.skipped} already present).",
                    messages.SUCCESS)
                return redirect(reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                                        args=[rnd.pk]))
        config = rnd.task.parsed_config
        context = {
            **self.admin_site.each_context(request),
            "title": f"Upload contexts to {rnd}",
            "opts": self.opts,
            "original": rnd,
            "form": form,
            "refusal": refusal,
            "field_names": config.context_field_names,
            "required_fields": [name for name in config.context_field_names if name in config.model_inputs],
            "max_rows": settings.CONTEXT_UPLOAD_MAX_ROWS,
            "max_bytes": settings.CONTEXT_UPLOAD_MAX_BYTES,
            "has_view_permission": self.has_view_permission(request, rnd),
        }
        return TemplateResponse(request, "admin/tasks/round/upload_contexts.html", context)


@admin.register(Context)
class ContextAdmin(TaskScopedAdmin):
    list_display = ["__str__", "task", "round", "tag", "times_used", "times_fooled", "is_active"]
    # No filter by tag: its choices would be the distinct tags over every context (the search finds a tag).
    list_filter = [TASK_FILTER, "is_active"]
    list_select_related = ["task", "round__task"]
    sortable_by = []  # the list's order (by id) is the one an index serves
    search_fields = exact_search_fields = ["external_id", "tag"]
    search_help_text = "A context's external id, or a tag (exact)."
    raw_id_fields = ["round"]
    readonly_fields = ["times_used", "times_fooled", "created_at"]


@admin.register(ModelVersion)
class ModelVersionAdmin(Extensible, TaskScopedAdmin):
    list_display = ["__str__", "task", "backbone", "status", "short_sha256", "created_at"]
    list_filter = [TASK_FILTER, "status", "backbone"]
    list_select_related = ["task"]
    search_fields = ["name", "sha256", "artifact_path"]
    raw_id_fields = ["parent"]
    readonly_fields = ["task", "name", "sha256", "artifact_path", "backbone", "parent", "trained_on_rounds",
                       "training_data", "metrics", "created_at", "created_by"]

    def has_add_permission(self, request):
        return False  # models are registered by training jobs, after their artifact is verified

    @admin.display(description="sha256")
    def short_sha256(self, obj):
        return obj.sha256[:12]


@admin.action(description="Cancel the selected jobs (a running one stops at its next report)")
def cancel_jobs(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset, lambda job: engine.cancel_job(job, request.user), "Cancelled")


@admin.action(description="Run the selected jobs again (new jobs, same parameters)")
def rerun_jobs(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset, lambda job: engine.rerun_job(job, request.user), "Queued again")


@admin.register(Job)
class JobAdmin(TaskScopedAdmin):
    list_display = ["__str__", "kind", "status", "progress_bar", "time_left", "task", "created_by", "created_at",
                    "finished_at"]
    list_filter = ["kind", "status", TASK_FILTER]
    list_select_related = ["task", "created_by"]
    search_fields = ["log", "error", "celery_task_id"]
    readonly_fields = ["kind", "status", "progress_bar", "time_left", "queue_place", "page", "file", "task", "params",
                       "result", "log", "error", "attempts", "rerun_of", "queue", "celery_task_name",
                       "celery_task_id", "created_by", "created_at", "started_at", "heartbeat_at", "finished_at"]
    fields = readonly_fields
    actions = [cancel_jobs, rerun_jobs]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False  # jobs change through their actions only

    @admin.display(description="progress")
    def progress_bar(self, obj):
        return format_html('<progress max="100" value="{}">{}%</progress> {}%', obj.progress, obj.progress,
                           obj.progress)

    @admin.display(description="time left")
    def time_left(self, obj):
        left = obj.seconds_left
        if left is None:
            return "–"
        return f"about {int(left // 60)} min {int(left % 60)} s" if left >= 60 else f"about {int(left)} s"

    @admin.display(description="queue position")
    def queue_place(self, obj):
        position = obj.queue_position()
        return position if position is not None else "–"

    @admin.display(description="page")
    def page(self, obj):
        return format_html('<a href="{}">progress page</a>', obj.get_absolute_url())

    @admin.display(description="file")
    def file(self, obj):
        """The file the job made (an export), for its task's researchers (the link checks)."""
        if not (obj.result or {}).get("file"):
            return "–"
        return format_html('<a href="{}">{}</a> ({} bytes)', reverse("job-file", args=[obj.pk]),
                           obj.result.get("filename", "download"), obj.result.get("bytes", "?"))
from . import endpoint_admin  # noqa: E402,F401  (the endpoint models' admin registers itself)
