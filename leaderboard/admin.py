from django.contrib import admin

from .models import ModelVersion


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    list_display = ["__str__", "task", "backbone", "status", "short_sha256", "created_at"]
    list_filter = ["task", "status", "backbone"]
    list_select_related = ["task"]
    search_fields = ["name", "sha256", "artifact_path"]
    raw_id_fields = ["parent"]
    filter_horizontal = ["trained_on_rounds"]
    readonly_fields = ["sha256", "artifact_path", "training_data", "metrics", "created_at", "created_by"]

    @admin.display(description="sha256")
    def short_sha256(self, obj):
        return obj.sha256[:12]
