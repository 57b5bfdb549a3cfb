"""The admin of models behind endpoints (``registry.endpoints``): a task's researchers
register one (the service checks and writes it), change how it is reached or priced,
and run its health check; a superuser sets its budgets (per round, and for its
evaluations and health checks). The secret is never a field: only the name of the
variable that holds it."""

from django import forms
from django.contrib import admin

from core.errors import DomainError, InvalidInput
from registry import endpoints
from registry.models import Endpoint, EndpointUsage
from registry.services import check_new_model_name

from .admin_lists import TaskScopedAdmin, run_service_action
from .models import Task

EDITABLE = ["url", "remote_model", "secret_env", "timeout_s", "max_concurrency", "rate_limit_per_minute",
            *endpoints.PRICES]
BUDGETS = ["round_budget", "evaluation_budget"]  # a superuser's


class EndpointAddForm(forms.ModelForm):
    task = forms.ModelChoiceField(queryset=Task.objects.none())
    name = forms.CharField(max_length=100, help_text="The model's name on the platform.")
    url = forms.CharField(max_length=500, help_text="The endpoint's base URL (http or https).")

    class Meta:
        model = Endpoint
        fields = ["protocol", *EDITABLE]

    def clean(self):
        data = super().clean()
        try:
            endpoints.check_fields(data.get("protocol"), data.get("url"), data.get("remote_model"),
                                   data.get("secret_env"), data.get("timeout_s"), data.get("max_concurrency"),
                                   data.get("rate_limit_per_minute"))
        except InvalidInput as exc:
            for field, problems in exc.errors.items():
                self.add_error("remote_model" if field == "model" else field, problems)
        if data.get("task") is not None and data.get("name") is not None:
            try:
                data["name"] = check_new_model_name(data["task"], data["name"])
            except DomainError as exc:
                self.add_error("name", exc.message)
        return data


class EndpointChangeForm(forms.ModelForm):
    url = forms.CharField(max_length=500, help_text="The endpoint's base URL (http or https).")

    class Meta:
        model = Endpoint
        fields = [*EDITABLE, *BUDGETS]

    def clean(self):
        data = super().clean()
        try:
            endpoints.check_fields(self.instance.protocol, data.get("url"), data.get("remote_model"),
                                   data.get("secret_env"), data.get("timeout_s"), data.get("max_concurrency"),
                                   data.get("rate_limit_per_minute"))
        except InvalidInput as exc:
            for field, problems in exc.errors.items():
                self.add_error("remote_model" if field == "model" else field, problems)
        return data


@admin.action(description="Run the health check (the task's probe examples)")
def check_health(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset.select_related("model_version__task"),
                       lambda e: endpoints.health_check(e, e.model_version.task.parsed_config), "Healthy")


class UsageInline(admin.TabularInline):
    model = EndpointUsage
    extra = 0
    can_delete = False
    fields = readonly_fields = ["round", "calls", "failed_calls", "unparseable", "prompt_tokens",
                                "completion_tokens", "cost"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Endpoint)
class EndpointAdmin(TaskScopedAdmin):
    task_path = "model_version__task"
    list_display = ["__str__", "protocol", "remote_model", "max_concurrency", *BUDGETS, "healthy_at"]
    list_select_related = ["model_version__task"]
    list_filter = ["protocol"]
    search_fields = ["model_version__name", "url", "remote_model"]
    actions = [check_health]
    inlines = [UsageInline]

    def get_form(self, request, obj=None, **kwargs):
        kwargs["form"] = EndpointAddForm if obj is None else EndpointChangeForm
        form = super().get_form(request, obj, **kwargs)
        if obj is None:
            form.base_fields["task"].queryset = self.researched_tasks(request)
        return form

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["task", "name", "protocol", *EDITABLE]
        return ["protocol", *EDITABLE, *BUDGETS, "healthy_at"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["protocol", "healthy_at"] + ([] if request.user.is_superuser else BUDGETS)

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if not change:  # the service registers the model version and its endpoint
            version = endpoints.register_endpoint(
                data["task"], name=data["name"], protocol=data["protocol"], url=data["url"],
                model=data["remote_model"], secret_env=data["secret_env"], timeout_s=data["timeout_s"],
                max_concurrency=data["max_concurrency"], rate_limit_per_minute=data["rate_limit_per_minute"],
                **{name: data[name] for name in endpoints.PRICES}, user=request.user)
            obj.pk, obj.model_version = version.endpoint.pk, version
            return
        stored = Endpoint.objects.get(pk=obj.pk)
        endpoints.update_endpoint(stored, **{name: data[name] for name in EDITABLE})
        if "round_budget" in form.changed_data:
            endpoints.set_round_budget(stored, data["round_budget"], request.user)
        if "evaluation_budget" in form.changed_data:
            endpoints.set_evaluation_budget(stored, data["evaluation_budget"], request.user)
