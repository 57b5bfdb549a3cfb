"""Admin for the round loop: train the next model (or a round-0 model) from a task, evaluate and promote
models, read evaluations. The tasks app's task and model pages get this app's actions
and the model page its evaluation panel through their ``extend`` hook (this app sits
above tasks), so the actions call this app's services."""

from django import forms
from django.contrib import admin, messages
from django.db.models import IntegerField, OuterRef, Subquery
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from annotation.models import Example
from core.errors import DomainError
from jobs.models import Job
from leaderboard import promotion, training
from leaderboard.evaluation import start_evaluation
from tasks.admin import ModelVersionAdmin, TaskAdmin
from tasks.admin_lists import (
    TASK_FILTER,
    LargeListAdmin,
    ScopedRelatedFilter,
    TaskScopedAdmin,
    run_service_action,
)
from tasks.models import Task

from . import cycle
from .models import Evaluation, Promotion, Release, Submission
from .releases import service as release_service
from .releases.browse import public_rounds


class TrainNextForm(forms.Form):
    selection = forms.ChoiceField(choices=list(training.SELECTIONS.items()), initial="verified",
                                  help_text="Round 0's static data is always included.")
    mode = forms.ChoiceField(choices=list(training.MODES.items()), initial="full")
    from_parent = forms.BooleanField(required=False, label="Start from the current target's weights")
    rounds = forms.CharField(required=False, help_text="Round numbers, comma-separated; empty: every round.")
    epochs = forms.IntegerField(min_value=1, max_value=50, required=False,
                                help_text="Empty: the seed model's recipe (its epochs, batch size, learning rate).")
    name = forms.CharField(required=False, max_length=100,
                           help_text="Empty: r, the next round's number, then the selection (r2-verified).")
    allow_no_new_examples = forms.BooleanField(
        required=False, label="Train even with no new usable examples",
        help_text="Without it, a task whose chosen rounds hold no usable example the target did not learn from "
                  "is refused and nothing is queued.")

    def clean_rounds(self):
        text = self.cleaned_data["rounds"].strip()
        if not text:
            return None
        try:
            return sorted({int(part) for part in text.replace(" ", "").split(",") if part})
        except ValueError:
            raise forms.ValidationError("Write round numbers separated by commas, e.g. 1, 2.") from None


def start_job_with_form(modeladmin, request, queryset, *, form_class, start, template: str, title: str,
                        done: str, **context):
    """An admin action with an intermediate form: show the form; once it is applied and
    valid, call ``start(task, values)`` (a service that queues a job) for each task and
    report each job, or each refusal by name."""
    applied = "apply" in request.POST
    form = form_class(request.POST if applied else None)
    if applied and form.is_valid():
        for task in queryset:
            try:
                job = start(task, form.cleaned_data)
            except DomainError as exc:
                modeladmin.message_user(request, f"{task}: {exc}", messages.ERROR)
            else:
                modeladmin.message_user(request, format_html('{}: training job <a href="{}">#{}</a> {}', task,
                                                             job.get_absolute_url(), job.pk, done), messages.SUCCESS)
        return None
    return TemplateResponse(request, template, {
        **modeladmin.admin_site.each_context(request), "title": title, "form": form, "opts": modeladmin.model._meta,
        "action": request.POST.get("action", ""), "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
        **context,
    })


def _start_next(request):
    def start(task, values):
        return cycle.train_next(task, from_parent=values["from_parent"], name=values["name"] or None,
                                rounds=values["rounds"], selection=values["selection"], mode=values["mode"],
                                epochs=values["epochs"], allow_no_new_examples=values["allow_no_new_examples"],
                                user=request.user)
    return start


@admin.action(description="Train the next target model (a job on the training queue)")
def train_next_model(modeladmin, request, queryset):
    return start_job_with_form(modeladmin, request, queryset, form_class=TrainNextForm, start=_start_next(request),
                               template="admin/leaderboard/train_next.html", title="Train the next target model",
                               done="queued.", tasks=[(task, training.usable_training_counts(task),
                                                       cycle.new_examples(task)) for task in queryset])


class TrainStaticForm(forms.Form):
    mode = forms.ChoiceField(choices=list(training.MODES.items()), initial="full")
    epochs = forms.IntegerField(min_value=1, max_value=50, initial=1)
    batch_size = forms.IntegerField(min_value=1, max_value=256, initial=16)
    static_limit = forms.IntegerField(
        min_value=1, required=False, label="Training examples",
        help_text="At most this many of round 0's train examples (a fixed sample); empty: all of them.")
    max_steps = forms.IntegerField(min_value=1, required=False, help_text="Stop after this many steps; empty: no cap.")
    max_minutes = forms.IntegerField(
        min_value=1, max_value=7 * 24 * 60, required=False, label="Time budget (minutes)",
        help_text="Stop after this many minutes of training and keep what it reached; empty: no budget.")
    name = forms.CharField(required=False, max_length=100, help_text="Empty: round0-static (then -2, -3...).")


@admin.action(description="Train a round-0 model on the static data (a job on the training queue)")
def train_static_model(modeladmin, request, queryset):
    def start(task, values):
        return training.start_static_training(
            task, name=values["name"] or training.default_static_model_name(task), mode=values["mode"],
            static_limit=values["static_limit"], epochs=values["epochs"], batch_size=values["batch_size"],
            max_steps=values["max_steps"], max_minutes=values["max_minutes"], user=request.user)

    return start_job_with_form(
        modeladmin, request, queryset, form_class=TrainStaticForm, start=start,
        template="admin/leaderboard/train_static.html", title="Train a round-0 model on the static data",
        done="queued on round 0; its evaluation follows, then the model can be promoted from its page.",
        tasks=[(task, training.static_training_counts(task)) for task in queryset])


TaskAdmin.extend(actions=[train_next_model, train_static_model])


def _evaluate(request):
    return lambda model: start_evaluation(model, user=request.user)


@admin.action(description="Evaluate on every round's test split (a job)")
def evaluate_models(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset, _evaluate(request), "Evaluation queued")


def _promote(size):
    def action(modeladmin, request, queryset):
        if queryset.count() != 1:
            modeladmin.message_user(request, "Promote one model at a time.", messages.ERROR)
            return
        run_service_action(modeladmin, request, queryset,
                           lambda model: promotion.promote(model.task, model, ensemble_size=size, user=request.user),
                           "Promoted; the next round is open")

    action.__name__ = f"promote_{size}"
    description = ("Promote: open the next round with this model as its target" if size == 1 else
                   f"Promote as an ensemble with the last {size - 1} target(s): open the next round")
    return admin.action(description=description)(action)


class OverrideForm(forms.Form):
    ensemble_size = forms.IntegerField(min_value=1, max_value=promotion.MAX_ENSEMBLE, initial=1,
                                       help_text="1: the model alone; k: it and the last k-1 rounds' targets.")
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=promotion.MAX_REASON,
                             strip=True, help_text="Why the promotion rules are overridden: recorded with the "
                                                   "promotion and in the new round's description.")


@admin.action(description="Promote even if a promotion rule refuses it (below the reference line or today's "
                          "target): asks for a reason")
def promote_1_below_baseline(modeladmin, request, queryset):
    """The override, with an intermediate form: the scores the rules read, and a reason
    (required). The service records it with the promotion."""
    if queryset.count() != 1:
        modeladmin.message_user(request, "Promote one model at a time.", messages.ERROR)
        return None
    model = queryset.get()
    applied = "apply" in request.POST
    form = OverrideForm(request.POST if applied else None)
    if applied and form.is_valid():
        run_service_action(modeladmin, request, queryset, lambda m: promotion.promote(
            m.task, m, ensemble_size=form.cleaned_data["ensemble_size"], allow_below_baseline=True,
            reason=form.cleaned_data["reason"], user=request.user), "Promoted; the next round is open")
        return None
    return TemplateResponse(request, "admin/leaderboard/promote_override.html", {
        **modeladmin.admin_site.each_context(request), "title": f"Promote {model.name} with the override",
        "form": form, "opts": modeladmin.model._meta, "model": model,
        "checks": promotion.promotion_checks(model.task, model),
        "action": request.POST.get("action", ""), "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
    })


@admin.display(description="evaluation beside the current target")
def evaluations_vs_target(obj):
    targets = [m for m in promotion.current_targets(obj.task) if m.pk != obj.pk]
    comparison = cycle.compare(obj.task, [obj, *targets])
    if not comparison.rounds:
        return "No evaluation yet: use the action “Evaluate on every round's test split”."
    header = format_html_join("", "<th>{}</th>", ((f"{m.name} (target)" if m in targets else m.name,)
                                                  for m in comparison.models))
    rows = format_html_join("", "<tr><th>round {}</th>{}</tr>", (
        (number, format_html_join("", "<td>{}</td>", (
            (f"{cell['value']:.3f} ({cell['num_examples']})" if cell and cell["value"] is not None else "–",)
            for cell in cells)))
        for number, cells in comparison.rows()))
    state = "finished" if comparison.evaluated[obj.pk] else "not finished (promotion is refused until it is)"
    return format_html('<p>{} per round; evaluation {}.</p><table><thead><tr><th></th>{}</tr></thead>'
                       '<tbody>{}</tbody></table>', comparison.metric, state, header, rows)


ModelVersionAdmin.extend(
    actions=[evaluate_models, _promote(1), _promote(2), _promote(3), promote_1_below_baseline],
    panels=[evaluations_vs_target])


@admin.register(Evaluation)
class EvaluationAdmin(LargeListAdmin):
    list_display = ["__str__", "model_version", "round", "split", "num_examples", "model_error_rate", "created_at"]
    list_filter = ["split", ("model_version__task", ScopedRelatedFilter)]
    list_select_related = ["model_version__task", "round__task"]
    readonly_fields = ["model_version", "round", "split", "num_examples", "metrics", "intervals", "model_error_rate",
                       "job", "created_at"]
    fields = readonly_fields  # the per-example scores and resamples stay out of the page

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).filter(model_version__task__in=Task.objects.researched_by(request.user))


@admin.register(Promotion)
class PromotionAdmin(TaskScopedAdmin):
    """Every promotion as it was made: the scores the rules read, and an override's reason."""

    task_path = "model_version__task"

    list_display = ["__str__", "round", "model_version", "overridden", "user", "created_at"]
    list_filter = ["overridden", ("model_version__task", ScopedRelatedFilter)]
    list_select_related = ["model_version__task", "round__task", "user"]
    readonly_fields = ["round", "model_version", "ensemble_size", "user", "overridden", "reason", "checks",
                       "created_at"]
    fields = readonly_fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


def _set_visibility(public: bool):
    def action(modeladmin, request, queryset):
        changed = 0
        for model in queryset:
            if model.is_public != public:
                model.is_public = public
                model.save(update_fields=["is_public"])  # a save: the cached boards are dropped
                changed += 1
        modeladmin.message_user(request, f"{changed} submission(s) made {'public' if public else 'private'}.",
                                messages.SUCCESS)

    action.__name__ = "make_public" if public else "make_private"
    description = ("Make public (shown on the leaderboard)" if public else
                   "Make private (shown to the submitter and the task's researchers only)")
    return admin.action(description=description, permissions=["visibility"])(action)


@admin.register(Submission)
class SubmissionAdmin(ModelVersionAdmin):
    """Uploaded models only: who sent them, whether they are public, and how their
    evaluation stands (its latest job, linked)."""

    list_display = ["name", "task", "created_by", "is_public", "status", "evaluation", "created_at"]
    list_filter = [TASK_FILTER, "is_public", "status"]
    list_select_related = ["task", "created_by"]
    search_fields = ["name", "created_by__username", "sha256"]
    actions = [evaluate_models, _set_visibility(False), _set_visibility(True)]
    readonly_fields = [*ModelVersionAdmin.readonly_fields, "is_public", "evaluation"]

    def get_queryset(self, request):
        # The job's params hold the model id as a JSON number: compared as an integer on
        # both databases (PostgreSQL has no jsonb = bigint).
        latest = (Job.objects.filter(kind=Job.Kind.EVALUATE_MODEL)
                  .annotate(model_id=Cast(KeyTextTransform("model_version", "params"), IntegerField()))
                  .filter(model_id=OuterRef("pk")).order_by("-created_at", "-pk"))
        return (super().get_queryset(request).filter(submitted=True)
                .annotate(evaluation_job=Subquery(latest.values("pk")[:1]),
                          evaluation_status=Subquery(latest.values("status")[:1]),
                          evaluation_progress=Subquery(latest.values("progress")[:1])))

    def has_change_permission(self, request, obj=None):
        return False  # the actions change visibility; nothing else of a submission is edited

    def has_visibility_permission(self, request):
        """Who may make submissions private or public: those who may change models."""
        return request.user.has_perm("registry.change_modelversion")

    @admin.display(description="evaluation", ordering="evaluation_status")
    def evaluation(self, obj):
        if getattr(obj, "evaluation_job", None) is None:
            return "none yet"
        status = Job.Status(obj.evaluation_status)
        detail = f" ({obj.evaluation_progress}%)" if status == Job.Status.RUNNING else ""
        return format_html('<a href="{}">#{} {}{}</a>', reverse("admin:jobs_job_change", args=[obj.evaluation_job]),
                           obj.evaluation_job,
                           status.label, detail)


class ReleaseForm(forms.Form):
    rounds = forms.CharField(help_text="Closed round numbers, comma-separated (0: the static data), e.g. 0, 1.")
    splits = forms.MultipleChoiceField(choices=[(s, s) for s in Example.Split.values],
                                       initial=[s for s in Example.Split.values if s != Example.Split.TEST],
                                       widget=forms.CheckboxSelectMultiple)
    release_test_split = forms.BooleanField(
        required=False, label="Release the test split on purpose",
        help_text="The test split is the leaderboard's test data: ticked, it is public from then on (the data "
                  "browser too), and the release records it. Needed to release test.")

    def clean_rounds(self):
        try:
            numbers = sorted({int(part) for part in self.cleaned_data["rounds"].replace(" ", "").split(",") if part})
        except ValueError:
            numbers = []
        if not numbers or numbers[0] < 0:
            raise forms.ValidationError("Write round numbers separated by commas, e.g. 0, 1.")
        return numbers


@admin.action(description="Make a data release of closed rounds (a job)")
def release_dataset(modeladmin, request, queryset):
    applied = "apply" in request.POST
    form = ReleaseForm(request.POST if applied else None)
    if applied and form.is_valid():
        for task in queryset:
            try:
                job = release_service.start_release(task, rounds=form.cleaned_data["rounds"],
                                                    splits=form.cleaned_data["splits"], user=request.user,
                                                    release_test_split=form.cleaned_data["release_test_split"])
            except DomainError as exc:
                modeladmin.message_user(request, f"{task}: {exc}", messages.ERROR)
            else:
                modeladmin.message_user(request, format_html('{}: release job <a href="{}">#{}</a> queued.', task,
                                                             job.get_absolute_url(), job.pk), messages.SUCCESS)
        return None
    return TemplateResponse(request, "admin/leaderboard/release_dataset.html", {
        **modeladmin.admin_site.each_context(request), "title": "Make a data release", "form": form,
        "opts": modeladmin.model._meta, "action": request.POST.get("action", ""),
        "selected": request.POST.getlist(admin.helpers.ACTION_CHECKBOX_NAME),
        "tasks": [(task, public_rounds(task)) for task in queryset],
    })


TaskAdmin.extend(actions=[release_dataset])


@admin.register(Release)
class ReleaseAdmin(TaskScopedAdmin):
    """Every release as it was made: read-only (a release never changes), with its files'
    digests and download links. New ones come from the task's action, the API or
    ``manage.py release_dataset``."""

    list_display = ["__str__", "task", "version", "rounds", "splits", "rows", "license", "created_by", "created_at"]
    list_filter = [TASK_FILTER]
    list_select_related = ["task", "created_by"]
    readonly_fields = ["task", "version", "rounds", "splits", "counts", "license", "downloads", "location", "job",
                       "created_by", "created_at"]
    fields = readonly_fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # published: others may have downloaded and cited it

    @admin.display(description="examples")
    def rows(self, obj):
        return obj.total_rows

    @admin.display(description="files")
    def downloads(self, obj):
        return format_html_join(
            "", '<p><a href="{}">{}</a> <code>{}</code> ({} bytes)</p>',
            ((reverse("release-file", args=[obj.task.slug, obj.version, name]), name, entry["sha256"],
              entry["bytes"]) for name, entry in obj.files.items()))
