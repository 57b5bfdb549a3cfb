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
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.text import smart_split, unescape_string_literal

from core.errors import DomainError, InvalidInput

from . import jobs, services, uploads
from .models import Context, Job, ModelVersion, Round, Task


class Extensible:
    """An admin that higher apps extend without registering it again: ``extend(actions=...,
    panels=...)`` adds actions to its list and read-only panels (callables with a
    ``short_description``) to each object's page. The leaderboard adds its training,
    evaluation and promotion actions to the task and model pages this way. Only the
    class that was extended shows them, not its subclasses."""

    @classmethod
    def extend(cls, *, actions=(), panels=()) -> None:
        own = cls.__dict__.get("extensions") or {"actions": [], "panels": []}
        own["actions"].extend(actions)
        for panel in panels:  # a read-only field is named after an attribute of the admin
            setattr(cls, panel.__name__, staticmethod(panel))
            own["panels"].append(panel.__name__)
        cls.extensions = own

    def _extensions(self, kind: str) -> list:
        return list((type(self).__dict__.get("extensions") or {}).get(kind, ()))

    def get_actions(self, request):
        actions = super().get_actions(request)
        for func in self._extensions("actions"):
            action = self.get_action(func)
            if action is not None:
                actions[action[1]] = action
        return actions

    def get_readonly_fields(self, request, obj=None):
        return [*super().get_readonly_fields(request, obj), *self._extensions("panels")]


class BoundedPaginator(Paginator):
    """Counts at most ``limit`` rows: ``count`` reads ``limit + 1`` rows at most (a
    COUNT over a sliced query), and a list with more says so (``capped``) and offers
    only the pages within the bound. Rows beyond it are reached by filters, the
    search or the export, not by paging: a deep page would walk every row it skips."""

    def __init__(self, object_list, per_page, orphans=0, allow_empty_first_page=True, *, limit: int):
        super().__init__(object_list, per_page, orphans, allow_empty_first_page)
        self.limit = limit
        self.capped = False

    @cached_property
    def count(self) -> int:
        # Ids only: the annotations a list shows (per-row subqueries) are left out of the count.
        counted = self.object_list.order_by().values("pk")[: self.limit + 1].count()
        self.capped = counted > self.limit
        return min(counted, self.limit)


def _search_terms(search_term: str, most: int) -> list[str]:
    """The words of a search, as the admin splits them (quoted phrases stay whole)."""
    terms = []
    for bit in smart_split(search_term):
        if bit.startswith(('"', "'")) and bit[0] == bit[-1]:
            bit = unescape_string_literal(bit)
        if bit and bit not in terms:
            terms.append(bit)
    return terms[:most]


def exact_search(model, paths, terms) -> Q | None:
    """Rows of ``model`` where a field named by ``paths`` (a field, or a relation then a
    field of the related model, e.g. ``annotator__username``) equals one of ``terms``;
    None when nothing can match. A term that is no valid value of a field (text for a
    UUID) is left out for that field. A relation is read first (one query, on the
    related model's index) and compared by id, so that every alternative is a plain
    column test on ``model`` and the databases combine their indexes."""
    alternatives = []
    for lookup in paths:
        name, _, rest = lookup.partition("__")
        target = _last_field(model, lookup)  # its type decides which terms are valid values
        values = []
        for term in terms:
            try:
                values.append(target.to_python(term))
            except ValidationError:
                continue
        if not values:
            continue
        if rest:
            related = model._meta.get_field(name).related_model
            ids = list(related._default_manager.filter(**{f"{rest}__in": values}).values_list("pk", flat=True))
            if ids:
                alternatives.append(Q(**{f"{name}__in": ids}))
        else:
            alternatives.append(Q(**{f"{name}__in": values}))
    return Q.create(alternatives, connector=Q.OR) if alternatives else None


def _last_field(model, path: str):
    for name in path.split("__"):
        field = model._meta.get_field(name)
        model = field.related_model or model
    return field


class LargeListAdmin(admin.ModelAdmin):
    """A list that costs the same at a million rows as at a thousand: it counts at
    most ``list_count_limit`` rows (``BoundedPaginator``; the page says "more than"
    beyond), never the whole table (no full count, no facet counts), and, when
    ``exact_search_fields`` is set, searches by exact values on indexed fields
    instead of ``icontains`` (which reads every row). ``text_search`` adds a search
    of words served by an index of the database in use, if it has one. Filters list
    choices from small tables (``ScopedRelatedFilter``), never distinct values of the list."""

    list_count_limit = 1000
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    exact_search_fields: tuple[str, ...] = ()
    most_search_terms = 20

    def count_limit(self) -> int:
        """The most rows the list counts; above a page and above "Show all" (the admin
        lists a count within either without slicing)."""
        return max(self.list_count_limit, self.list_per_page + 1, self.list_max_show_all + 1)

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        limit = max(self.count_limit(), per_page + 1)
        return BoundedPaginator(queryset, per_page, orphans, allow_empty_first_page, limit=limit)

    def get_ordering(self, request):
        """Search results newest first by id: the page sorts the few ids found, where the
        list's own order (a date) could make the database walk that order's index past
        every other row. A column the user sorts by still wins."""
        if self.exact_search_fields and request.GET.get(SEARCH_VAR, "").strip():
            return ["-pk"]
        return super().get_ordering(request)

    def text_search(self, queryset, text: str):
        """``(queryset, Q)``: rows whose words match ``text``, through an index; ``Q`` is
        None where there is no such search (the default, and on SQLite)."""
        return queryset, None

    def get_search_results(self, request, queryset, search_term):
        if not self.exact_search_fields:
            return super().get_search_results(request, queryset, search_term)
        search_term = search_term.strip()
        if not search_term:
            return queryset, False
        limit = self.count_limit()
        exact = exact_search(self.model, self.exact_search_fields,
                             _search_terms(search_term, self.most_search_terms))
        alternatives = [exact] if exact is not None else []
        with_words, words = self.text_search(queryset, search_term)
        if words is not None:
            # Rows with the words, as their index finds them, at most a list's count: no
            # index gives both the words and the list's order, and in its order the database
            # would compute the words of each row it walks past.
            found = list(with_words.filter(words).order_by().values_list("pk", flat=True)[: limit + 1])
            if len(found) > limit:
                self.message_user(
                    request, f"More than {limit} {self.opts.verbose_name_plural} have these words: the list holds "
                             f"{limit} of them, the first their index found (not the newest); add words to narrow "
                             "the search.", messages.WARNING)
            if found:
                alternatives.append(Q(pk__in=found))
        if not alternatives:
            return queryset.none(), False
        matching = queryset.filter(Q.create(alternatives, connector=Q.OR))
        # The matches are read first, unordered (each alternative through its index), and the
        # page sorts those ids. Only where the exact values alone match more than a list
        # counts (the words add at most that many) is the database asked for them in order
        # at once: its walk down the ids tests plain columns, and meets a match often.
        most = 2 * (limit + 1)
        matches = list(matching.order_by().values_list("pk", flat=True)[:most])
        if len(matches) < most:
            return queryset.filter(pk__in=matches), False
        return matching, False


def scoped_rows(model, user):
    """The rows of ``model`` (a Task, or a model with a ``task``) in the tasks ``user`` researches."""
    tasks = Task.objects.researched_by(user)
    if model is Task:
        return tasks
    return model._default_manager.all() if user.is_superuser else model._default_manager.filter(task__in=tasks)


class ScopedRelatedFilter(admin.RelatedFieldListFilter):
    """A filter on a relation whose choices are the related rows in the user's tasks
    (the Task table, or the batches of those tasks): a read of a small table, where
    ``RelatedOnlyFieldListFilter`` reads the distinct values over every listed row."""

    def field_choices(self, field, request, model_admin):
        rows = scoped_rows(field.related_model, request.user)  # in the related model's own order
        return [(row.pk, str(row)) for row in rows]


# The task filter lists the tasks the researcher owns (every task, for superusers).
TASK_FILTER = ("task", ScopedRelatedFilter)


class TaskScopedAdmin(LargeListAdmin):
    """Rows reached through ``task_path`` (a lookup to the row's Task); a
    non-superuser sees and edits only those of the tasks they own, and picks
    related rows (tasks, rounds, contexts, models) only from those tasks."""

    task_path = "task"

    def researched_tasks(self, request):
        return Task.objects.researched_by(request.user)

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.task_path}__in": self.researched_tasks(request)})

    def _in_scope(self, request, obj) -> bool:
        return obj is None or request.user.is_superuser or self.get_queryset(request).filter(pk=obj.pk).exists()

    def has_view_permission(self, request, obj=None):
        return super().has_view_permission(request, obj) and self._in_scope(request, obj)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._in_scope(request, obj)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and self._in_scope(request, obj)

    def _limit(self, request, field, kwargs):
        if request.user.is_superuser:
            return kwargs
        tasks = self.researched_tasks(request)
        model = field.related_model
        if model is Task:
            kwargs["queryset"] = tasks
        elif model in (Round, Context, ModelVersion):
            kwargs["queryset"] = model.objects.filter(task__in=tasks)
        return kwargs

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        return super().formfield_for_foreignkey(db_field, request, **self._limit(request, db_field, kwargs))

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if db_field.name == "owners" and not request.user.is_superuser:
            # Co-owners are picked among researchers (staff), never among annotators or MTurk workers.
            kwargs["queryset"] = db_field.related_model.objects.filter(is_staff=True, is_active=True)
        return super().formfield_for_manytomany(db_field, request, **self._limit(request, db_field, kwargs))


def run_service_action(modeladmin, request, queryset, service, done: str):
    """Call ``service`` on each selected row; report each refusal by name (``str(exc)``:
    an ``InvalidInput`` names its fields, where its ``message`` says only "Invalid input.")."""
    changed = 0
    for obj in queryset:
        try:
            service(obj)
        except DomainError as exc:
            modeladmin.message_user(request, f"{obj}: {exc}", messages.ERROR)
        else:
            changed += 1
    if changed:
        modeladmin.message_user(request, f"{done}: {changed}.", messages.SUCCESS)


class RoundInline(admin.TabularInline):
    model = Round
    extra = 0
    fields = ["number", "status", "ensemble_mode", "opened_at", "closed_at"]
    readonly_fields = ["status", "opened_at", "closed_at"]
    show_change_link = True


class TaskForm(forms.ModelForm):
    class Meta:
        model = Task
        fields = ["name", "slug", "task_type", "is_active", "is_hidden", "owners", "goal", "instructions",
                  "content_warning", "config"]

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
    filter_horizontal = ["owners"]
    inlines = [RoundInline]
    fieldsets = [
        (None, {"fields": ["name", "slug", "task_type", "is_active", "is_hidden", "owners"]}),
        ("Annotator-facing text", {"fields": ["goal", "instructions", "content_warning"]}),
        ("Config", {"fields": ["config"], "description": (
            "JSON checked against the task config schema: context_fields, input_fields, labels, "
            "model_inputs, model_wrong_metric, num_matching_validations, context_sampling, "
            "max_input_length, blind_validation."
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
    run_service_action(modeladmin, request, queryset, lambda job: jobs.cancel_job(job, request.user), "Cancelled")


@admin.action(description="Run the selected jobs again (new jobs, same parameters)")
def rerun_jobs(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset, lambda job: jobs.rerun_job(job, request.user), "Queued again")


@admin.register(Job)
class JobAdmin(TaskScopedAdmin):
    list_display = ["__str__", "kind", "status", "progress_bar", "time_left", "task", "created_by", "created_at",
                    "finished_at"]
    list_filter = ["kind", "status", TASK_FILTER]
    list_select_related = ["task", "created_by"]
    search_fields = ["log", "error", "celery_task_id"]
    readonly_fields = ["kind", "status", "progress_bar", "time_left", "queue_place", "page", "task", "params",
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
