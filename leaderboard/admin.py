from django.contrib import admin

from .models import Evaluation


@admin.register(Evaluation)
class EvaluationAdmin(admin.ModelAdmin):
    list_display = ["__str__", "model_version", "round", "split", "num_examples", "model_error_rate", "created_at"]
    list_filter = ["split", ("model_version__task", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["model_version__task", "round__task"]
    readonly_fields = ["model_version", "round", "split", "num_examples", "metrics", "model_error_rate", "job",
                       "created_at"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        from tasks.models import Task

        return super().get_queryset(request).filter(model_version__task__in=Task.objects.researched_by(request.user))
