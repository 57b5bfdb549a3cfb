from django.contrib import admin

from .models import WorkerIdentity


@admin.register(WorkerIdentity)
class WorkerIdentityAdmin(admin.ModelAdmin):
    list_display = ["worker_id", "user", "sandbox", "verified_at", "created_at"]
    list_filter = ["sandbox", ("verified_at", admin.EmptyFieldListFilter)]
    list_select_related = ["user"]
    search_fields = ["worker_id", "user__username"]
    raw_id_fields = ["user"]
