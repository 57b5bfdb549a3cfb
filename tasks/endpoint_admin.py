"""The admin of models behind endpoints (``registry.endpoints``): a task's researchers
register one (the service checks and writes it), change how it is reached, and run
its health check; a superuser sets its key (after registration), prices and budgets
(per round, and for its evaluations and health checks). The secret is never a field:
only a name from the server's key map, picked from a list. A researcher's change of
the URL or the model clears the key (the service's rule; the page says so)."""

from django import forms
from django.conf import settings
from django.contrib import admin, messages

from core.errors import DomainError, InvalidInput
from registry import endpoint_budgets, endpoints
from registry.models import Endpoint, EndpointUsage
from registry.services import check_new_model_name

from .admin_lists import TaskScopedAdmin, run_service_action
from .models import Task

EDITABLE = ["url", "remote_model", "secret_env", "timeout_s", "max_concurrency", "rate_limit_per_minute",
            *endpoint_budgets.PRICES]
BUDGETS = ["round_budget", "evaluation_budget"]  # a superuser's
SUPERUSERS_ONLY = [*endpoint_budgets.PRICES, *BUDGETS]


def key_choices():
    """The keys of the server's map, each with the hosts it may be sent to (read when the form is drawn)."""
    return [("", "none"), *((name, f"{name} (sent only to {', '.join(settings.ENDPOINT_SECRETS[name]['hosts'])})")
                            for name in endpoints.key_names())]


def key_field():
    return forms.ChoiceField(choices=key_choices, required=False, label="Key",
                             help_text="A key of the server's key map (ENDPOINT_SECRETS): sent only to its hosts.")


class EndpointAddForm(forms.ModelForm):
    task = forms.ModelChoiceField(queryset=Task.objects.none())
    name = forms.CharField(max_length=100, help_text="The model's name on the platform.")
    url = forms.CharField(max_length=500, help_text="The endpoint's base URL (http or https).")
    secret_env = key_field()

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
    url = forms.CharField(max_length=500, help_text="The endpoint's base URL (http or https). A change by anyone "
                                                    "but a superuser clears the key.")
    secret_env = key_field()

    class Meta:
        model = Endpoint
        fields = [*EDITABLE, *BUDGETS]

    def clean(self):
        data = super().clean()
        stored = self.instance
        moved = data.get("url", stored.url) != stored.url or \
            data.get("remote_model", stored.remote_model) != stored.remote_model
        # The key is checked where it is set or goes to a new URL or model (a researcher's
        # change of those clears it: the service does it); one left as it was is checked
        # when the endpoint is asked.
        key = data.get("secret_env", stored.secret_env) if "secret_env" in self.fields else ""
        if key == stored.secret_env and not moved:
            key = ""
        try:
            endpoints.check_fields(stored.protocol, data.get("url"), data.get("remote_model"), key,
                                   data.get("timeout_s"), data.get("max_concurrency"),
                                   data.get("rate_limit_per_minute"))
        except InvalidInput as exc:
            for field, problems in exc.errors.items():
                field = "remote_model" if field == "model" else field
                self.add_error(field if field in self.fields else None, problems)
        return data


@admin.action(description="Run the health check (the task's probe examples)")
def check_health(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset.select_related("model_version__task"),
                       lambda e: endpoints.health_check(e, e.model_version.task.parsed_config), "Healthy")


@admin.action(description="Release what calls hold against the budgets (after a crash; superusers)")
def release_reservations(modeladmin, request, queryset):
    run_service_action(modeladmin, request, queryset.select_related("model_version"),
                       lambda e: endpoint_budgets.release_reservations(e, request.user), "Released")


class UsageInline(admin.TabularInline):
    model = EndpointUsage
    extra = 0
    can_delete = False
    fields = readonly_fields = ["round", "calls", "failed_calls", "unparseable", "prompt_tokens",
                                "completion_tokens", "cost", "reserved"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Endpoint)
class EndpointAdmin(TaskScopedAdmin):
    task_path = "model_version__task"
    list_display = ["__str__", "protocol", "remote_model", "max_concurrency", *BUDGETS, "healthy_at"]
    list_select_related = ["model_version__task"]
    list_filter = ["protocol"]
    search_fields = ["model_version__name", "url", "remote_model"]
    actions = [check_health, release_reservations]
    inlines = [UsageInline]

    def get_form(self, request, obj=None, **kwargs):
        base = EndpointAddForm if obj is None else EndpointChangeForm
        # A field the form declares is left out where it is read-only here (the key and
        # the prices for anyone but a superuser), as the admin does for its own form.
        hidden = [f for f in self.get_readonly_fields(request, obj) if f in base.declared_fields]
        kwargs["form"] = type(base.__name__, (base,), dict.fromkeys(hidden))
        form = super().get_form(request, obj, **kwargs)
        if obj is None:
            form.base_fields["task"].queryset = self.researched_tasks(request)
        return form

    def get_fields(self, request, obj=None):
        if obj is None:
            shown = ["task", "name", "protocol", *EDITABLE]
            return shown if request.user.is_superuser else [f for f in shown if f not in SUPERUSERS_ONLY]
        return ["protocol", *EDITABLE, *BUDGETS, "healthy_at"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return []
        return ["protocol", "healthy_at"] + ([] if request.user.is_superuser else ["secret_env", *SUPERUSERS_ONLY])

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        if not change:  # the service registers the model version and its endpoint
            version = endpoints.register_endpoint(
                data["task"], name=data["name"], protocol=data["protocol"], url=data["url"],
                model=data["remote_model"], secret_env=data["secret_env"], timeout_s=data["timeout_s"],
                max_concurrency=data["max_concurrency"], rate_limit_per_minute=data["rate_limit_per_minute"],
                **{name: data.get(name) for name in endpoint_budgets.PRICES}, user=request.user)
            obj.pk, obj.model_version = version.endpoint.pk, version
            return
        stored = Endpoint.objects.get(pk=obj.pk)
        key = stored.secret_env
        endpoints.update_endpoint(stored, user=request.user,
                                  **{name: data[name] for name in EDITABLE if name in form.changed_data})
        if key and not stored.secret_env and "secret_env" not in form.changed_data:
            self.message_user(request, f"The key {key!r} was cleared: only a superuser changes the URL or the model "
                                       "of an endpoint that uses a key and keeps it.", messages.WARNING)
        if "round_budget" in form.changed_data:
            endpoint_budgets.set_round_budget(stored, data["round_budget"], request.user)
        if "evaluation_budget" in form.changed_data:
            endpoint_budgets.set_evaluation_budget(stored, data["evaluation_budget"], request.user)
