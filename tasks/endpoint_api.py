"""REST endpoints for models behind endpoints: a task's researchers register one
(``POST /api/tasks/{slug}/endpoints/``) and list them; a health check on demand
(``POST /api/models/{id}/health-check/``). Evaluating, promoting and ranking an
endpoint model go through the same endpoints as any model. No answer holds a
secret: only the name of the key in the server's key map. Prices are a superuser's
(403 for anyone else who sends one)."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import Forbidden, NotFound
from core.fields import StrictBooleanField, StrictCharField, StrictChoiceField, StrictIntegerField
from ml.endpoints import PROTOCOLS
from registry import endpoint_budgets, endpoints
from registry.models import Endpoint, ModelVersion

from .api import visible_task
from .roles import is_researcher


class StrictNumberField(serializers.FloatField):
    """A JSON number (not "5", not true), as the schema says."""

    default_error_messages = {"invalid": "Must be a number (a JSON number)."}

    def to_internal_value(self, data):
        if not isinstance(data, int | float) or isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


def _price(help_text: str):
    return StrictNumberField(required=False, allow_null=True, default=None, min_value=0, max_value=1_000_000,
                             help_text=help_text)


class EndpointCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=100)
    protocol = StrictChoiceField(choices=list(PROTOCOLS))
    url = StrictCharField(max_length=500, help_text="The endpoint's base URL (http or https).")
    model = StrictCharField(max_length=200, help_text="The model's name at the endpoint (chat: the request's "
                                                      "'model'; v2: the name in the infer URL's path).")
    secret_env = StrictCharField(max_length=100, required=False, allow_blank=True, default="",
                                 help_text="The name of a key of the server's key map (ENDPOINT_SECRETS), which binds "
                                           "it to the hosts it may be sent to; never the key itself. Empty: none.")
    timeout_s = StrictNumberField(required=False, default=10.0, min_value=0.1, max_value=120.0,
                                  help_text="Seconds one request may take.")
    max_concurrency = StrictIntegerField(required=False, default=4, min_value=1, max_value=64)
    rate_limit_per_minute = StrictIntegerField(required=False, allow_null=True, default=None, min_value=1,
                                               max_value=100000)
    price_per_call = _price("The price of one request (superusers only).")
    price_per_1k_prompt_tokens = _price("The price of 1000 prompt tokens (superusers only).")
    price_per_1k_completion_tokens = _price("The price of 1000 completion tokens (superusers only).")
    is_public = StrictBooleanField(required=False, default=True)


class EndpointSerializer(serializers.ModelSerializer):
    id = serializers.IntegerField(source="model_version_id", help_text="The model version's id.")
    name = serializers.CharField(source="model_version.name")
    round_budget_in_effect = serializers.SerializerMethodField(
        help_text="What its calls may cost per round: round_budget, or ENDPOINT_DEFAULT_BUDGET where it is null.")
    evaluation_budget_in_effect = serializers.SerializerMethodField(
        help_text="What its calls outside rounds may cost in all: evaluation_budget, or ENDPOINT_DEFAULT_BUDGET.")

    class Meta:
        model = Endpoint
        fields = ["id", "name", "protocol", "url", "remote_model", "secret_env", "timeout_s", "max_concurrency",
                  "rate_limit_per_minute", "price_per_call", "price_per_1k_prompt_tokens",
                  "price_per_1k_completion_tokens", "round_budget", "evaluation_budget", "round_budget_in_effect",
                  "evaluation_budget_in_effect", "healthy_at"]
        read_only_fields = fields

    def get_round_budget_in_effect(self, endpoint) -> str:
        return str(endpoint_budgets.budgets_in_effect(endpoint)["round"])

    def get_evaluation_budget_in_effect(self, endpoint) -> str:
        return str(endpoint_budgets.budgets_in_effect(endpoint)["evaluation"])


class HealthSerializer(serializers.Serializer):
    probes = serializers.IntegerField()
    seconds = serializers.FloatField()
    healthy_at = serializers.DateTimeField()


def _researched_task(request, slug):
    task = visible_task(request, slug)
    if not is_researcher(request.user, task):
        raise Forbidden("Only the task's researchers manage its endpoint models.")
    return task


@extend_schema(tags=["models"])
class EndpointList(APIView):
    """A task's models behind endpoints (researchers), and registering a new one."""

    permission_classes = [permissions.IsAuthenticated]
    error_statuses = (409,)

    @extend_schema(responses={200: EndpointSerializer(many=True)})
    def get(self, request, slug):
        task = _researched_task(request, slug)
        rows = Endpoint.objects.filter(model_version__task=task).select_related("model_version").order_by("pk")[:200]
        return Response(EndpointSerializer(rows, many=True).data)

    @extend_schema(request=EndpointCreateSerializer, responses={201: EndpointSerializer})
    def post(self, request, slug):
        task = _researched_task(request, slug)
        params = EndpointCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        data = dict(params.validated_data)
        version = endpoints.register_endpoint(task, user=request.user, **data)
        return Response(EndpointSerializer(version.endpoint).data, status=status.HTTP_201_CREATED)


@extend_schema(tags=["models"])
class EndpointHealthCheck(APIView):
    """Ask an endpoint model the task's probe examples now (409 saying why it failed)."""

    permission_classes = [permissions.IsAuthenticated]
    error_statuses = (409,)

    @extend_schema(request=None, responses={200: HealthSerializer})
    def post(self, request, pk):
        model = get_object_or_404(ModelVersion.objects.select_related("task"), pk=pk)
        if not is_researcher(request.user, model.task):
            raise NotFound("No such model.")
        endpoint = endpoints.endpoint_of(model)
        if endpoint is None:
            raise NotFound("This model is not behind an endpoint.")
        return Response(HealthSerializer(endpoints.health_check(endpoint, model.task.parsed_config)).data)
