from django.contrib import admin

from .models import WorkerIdentity


@admin.register(WorkerIdentity)
class WorkerIdentityAdmin(admin.ModelAdmin):
    """Worker identities span tasks, so only superusers manage them."""

    list_display = ["worker_id", "user", "sandbox", "verified_at", "created_at"]
    list_filter = ["sandbox", ("verified_at", admin.EmptyFieldListFilter)]
    list_select_related = ["user"]
    search_fields = ["worker_id", "user__username"]
    raw_id_fields = ["user"]
    readonly_fields = ["verified_at", "created_at"]

    def has_module_permission(self, request):
        return request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_add_permission(self, request):
        return request.user.is_superuser

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser
