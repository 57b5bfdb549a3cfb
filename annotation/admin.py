from django.contrib import admin
from django.http import StreamingHttpResponse
from django.utils import timezone

from .exporting import iter_jsonl
from .models import AnnotationSession, Example, Validation


class ValidationInline(admin.TabularInline):
    model = Validation
    extra = 0
    fields = ["validator", "label", "mode", "reason", "created_at"]
    readonly_fields = ["validator", "label", "mode", "reason", "created_at"]
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.action(description="Export selected examples as JSONL")
def export_jsonl(modeladmin, request, queryset):
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response = StreamingHttpResponse(iter_jsonl(queryset), content_type="application/x-ndjson; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="examples-{stamp}.jsonl"'
    return response


@admin.register(Example)
class ExampleAdmin(admin.ModelAdmin):
    list_display = ["__str__", "task", "round", "split", "source", "fooled", "validation_status",
                    "retracted", "flagged", "created_at"]
    list_filter = ["task", "source", "split", "fooled", "validation_status", "retracted", "flagged"]
    list_select_related = ["task", "round__task"]
    search_fields = ["uid", "external_uid", "inputs", "annotator__username"]
    raw_id_fields = ["context", "annotator", "round"]
    readonly_fields = ["uid", "model_predictions", "prediction", "latency_ms", "signature",
                       "validations_correct", "validations_incorrect", "validations_flagged",
                       "created_at", "updated_at"]
    inlines = [ValidationInline]
    actions = [export_jsonl]
    date_hierarchy = "created_at"


@admin.register(Validation)
class ValidationAdmin(admin.ModelAdmin):
    list_display = ["__str__", "example", "validator", "label", "mode", "created_at"]
    list_filter = ["label", "mode", "example__task"]
    list_select_related = ["example__task", "validator"]
    search_fields = ["validator__username", "reason"]
    raw_id_fields = ["example", "validator"]


@admin.register(AnnotationSession)
class AnnotationSessionAdmin(admin.ModelAdmin):
    list_display = ["__str__", "user", "task", "examples_written", "examples_fooled", "validations_done",
                    "last_seen_at"]
    list_filter = ["task"]
    list_select_related = ["user", "task"]
    search_fields = ["user__username", "mturk_assignment_id", "key"]
    raw_id_fields = ["user", "last_context"]
    readonly_fields = ["key", "examples_written", "examples_fooled", "validations_done", "created_at",
                       "last_seen_at"]
