from django.contrib import admin
from django.db.models import Count

from .models import Context, Job, Round, Task


class RoundInline(admin.TabularInline):
    model = Round
    extra = 0
    fields = ["number", "status", "ensemble_mode", "examples_collected", "examples_fooled",
              "examples_verified_fooled"]
    readonly_fields = ["examples_collected", "examples_fooled", "examples_verified_fooled"]
    show_change_link = True


@admin.register(Task)
class TaskAdmin(admin.ModelAdmin):
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

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(_round_count=Count("rounds"))

    @admin.display(description="rounds", ordering="_round_count")
    def round_count(self, obj):
        return obj._round_count


@admin.register(Round)
class RoundAdmin(admin.ModelAdmin):
    list_display = ["__str__", "task", "number", "status", "ensemble_mode", "examples_collected",
                    "examples_fooled", "examples_verified_fooled", "opened_at"]
    list_filter = ["status", "task"]
    list_select_related = ["task"]
    search_fields = ["task__slug", "task__name", "description"]
    filter_horizontal = ["target_models"]
    readonly_fields = ["examples_collected", "examples_fooled", "examples_verified_fooled",
                       "validations_count", "opened_at", "closed_at", "created_at"]


@admin.register(Context)
class ContextAdmin(admin.ModelAdmin):
    list_display = ["__str__", "task", "round", "tag", "times_used", "times_fooled", "is_active"]
    list_filter = ["task", "is_active", "tag"]
    list_select_related = ["task", "round__task"]
    search_fields = ["external_id", "tag", "fields"]
    raw_id_fields = ["round"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["__str__", "kind", "status", "progress", "task", "created_by", "created_at", "finished_at"]
    list_filter = ["kind", "status", "task"]
    list_select_related = ["task", "created_by"]
    search_fields = ["log", "error", "celery_task_id"]
    readonly_fields = ["kind", "status", "progress", "task", "params", "result", "log", "error",
                       "celery_task_id", "created_by", "created_at", "started_at", "finished_at"]

    def has_add_permission(self, request):
        return False
