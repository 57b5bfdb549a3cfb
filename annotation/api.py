"""REST endpoints of the annotation loop (paths kept stable for scripts)."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import permissions, serializers, status
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from tasks.api import visible_task
from tasks.models import Round

from . import services
from .inference import prefetch_models
from .models import AnnotationSession, Example
from .serializers import (
    ExampleCreatedSerializer,
    ExampleCreateSerializer,
    ExampleStateSerializer,
    ExplanationRequestSerializer,
    NextContextSerializer,
    ReasonSerializer,
    SessionSerializer,
    ValidationCreateSerializer,
    ValidationItemSerializer,
)
from .tokens import make_token


def token_session(request):
    return request.auth if isinstance(request.auth, AnnotationSession) else None


def task_for(request, slug):
    """``visible_task(request, slug)``, without its query when the session token is for
    that task and the task is one every signed-in user sees: the token's lookup loaded
    the task's row in this request already."""
    session = token_session(request)
    if session is not None:
        task = session.task
        if task.slug == slug and (request.user.is_staff or (task.is_active and not task.is_hidden)):
            return task
    return visible_task(request, slug)


def session_counters(session: AnnotationSession) -> dict:
    """What ``SessionSerializer`` gives, without building a ModelSerializer per request."""
    return {name: getattr(session, name) for name in services.SESSION_COUNTERS}


def visible_example(request, pk) -> Example:
    from tasks.models import Task

    tasks = Task.objects.visible_to(request.user)
    return get_object_or_404(Example.objects.select_related("task", "round", "context").filter(task__in=tasks), pk=pk)


class AnnotatorView(APIView):
    permission_classes = [permissions.IsAuthenticated]


class SessionCreate(AnnotatorView):
    """Start an annotation session on a task; returns its signed token.

    Send the token as ``X-Dynabench-Token`` where cookies are unavailable
    (pages inside an MTurk iframe).
    """

    @extend_schema(request=None, responses={201: inline_serializer("SessionToken", {
        "token": serializers.CharField(), "session": SessionSerializer()})})
    def post(self, request, slug):
        task = visible_task(request, slug)
        session = services.start_session(request.user, task)
        return Response({"token": make_token(session), "session": SessionSerializer(session).data},
                        status=status.HTTP_201_CREATED)


class NextContext(AnnotatorView):
    @extend_schema(responses={200: NextContextSerializer})
    def get(self, request, slug):
        task = task_for(request, slug)
        session = services.get_session(request.user, task, token_session(request))
        context = services.next_context(task, session)
        prefetch_models(task)  # embedded mode: the model loads while the annotator writes
        # = NextContextSerializer(context).data, plus the session's counters
        return Response({"id": context.pk, "fields": context.fields, "tag": context.tag,
                         "round": context.round_number, "session": session_counters(session)})


def created_payload(example: Example, session, names: dict[int, str] | None = None) -> dict:
    prediction = example.prediction
    model_ids = sorted(int(k) for k in example.model_predictions)
    if names is None or not set(model_ids) <= set(names):
        names = services.model_version_names(model_ids)
    qa = "answer" in prediction
    return {
        "id": example.pk,
        "prediction": prediction["answer"] if qa else prediction["label"],
        "probabilities": None if qa else prediction["probabilities"],
        "span": {"start": prediction["start"], "end": prediction["end"]} if qa else None,
        "fooled": example.fooled,
        "model": " + ".join(names.get(i, str(i)) for i in model_ids),
        "models": model_ids,
        "latency_ms": example.latency_ms,
        "session": session_counters(session),
    }


class ExampleCreate(AnnotatorView):
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "examples"

    @extend_schema(request=ExampleCreateSerializer, responses={
        201: ExampleCreatedSerializer, 400: OpenApiResponse(description="Field-level errors"),
        409: OpenApiResponse(description="The round is closed"),
        503: OpenApiResponse(description="No model answer in time")})
    def post(self, request, slug):
        task = task_for(request, slug)
        payload = ExampleCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        created = services.create_example(
            task, request.user, context_id=payload.validated_data["context"],
            inputs=payload.validated_data["inputs"], target=payload.validated_data["target"],
            session=token_session(request),
        )
        return Response(created_payload(created.example, created.session, created.model_names),
                        status=status.HTTP_201_CREATED)


class ExampleExplanation(AnnotatorView):
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "explanations"

    @extend_schema(request=ExplanationRequestSerializer, responses={200: inline_serializer("Explanation", {
        "target": serializers.JSONField(), "convergence_delta": serializers.FloatField(),
        "n_steps": serializers.IntegerField(), "words": serializers.ListField(child=serializers.DictField()),
        "model_version": serializers.IntegerField()})})
    def post(self, request, pk):
        example = visible_example(request, pk)
        params = ExplanationRequestSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        return Response(services.explain_example(example, request.user, n_steps=params.validated_data["n_steps"]))


class ExampleRetract(AnnotatorView):
    @extend_schema(request=None, responses={200: ExampleStateSerializer})
    def post(self, request, pk):
        example = services.retract_example(visible_example(request, pk), request.user)
        return Response(ExampleStateSerializer(example).data)


class ExampleFlag(AnnotatorView):
    @extend_schema(request=ReasonSerializer, responses={200: ExampleStateSerializer})
    def post(self, request, pk):
        params = ReasonSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        example = services.flag_example(visible_example(request, pk), request.user, params.validated_data["reason"])
        return Response(ExampleStateSerializer(example).data)


class NextValidation(AnnotatorView):
    @extend_schema(responses={200: ValidationItemSerializer})
    def get(self, request, slug):
        task = visible_task(request, slug)
        example = services.next_for_validation(task, request.user)
        return Response(ValidationItemSerializer(example).data)


class ExampleReveal(AnnotatorView):
    """The annotator's answer, shown after a blind validator gave theirs."""

    @extend_schema(request=None, responses={200: inline_serializer("Reveal", {"target": serializers.DictField()})})
    def post(self, request, pk):
        example = visible_example(request, pk)
        return Response({"target": example.target})


class ExampleValidate(AnnotatorView):
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "validations"

    @extend_schema(request=ValidationCreateSerializer, responses={
        201: ExampleStateSerializer, 403: OpenApiResponse(description="Your own example"),
        409: OpenApiResponse(description="Validated twice, retracted or already decided")})
    def post(self, request, pk):
        example = visible_example(request, pk)
        params = ValidationCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        example, _validation = services.validate_example(
            example.pk, request.user, label=params.validated_data["label"],
            reason=params.validated_data["reason"], session=token_session(request))
        return Response(ExampleStateSerializer(example).data, status=status.HTTP_201_CREATED)


class RoundStats(APIView):
    permission_classes = [permissions.AllowAny]

    @extend_schema(responses={200: inline_serializer("RoundStats", {
        "task": serializers.CharField(), "round": serializers.IntegerField(),
        "collected": serializers.IntegerField(), "fooled": serializers.IntegerField(),
        "verified_fooled": serializers.IntegerField(),
        "model_error_rate": serializers.FloatField(allow_null=True),
        "verified_model_error_rate": serializers.FloatField(allow_null=True),
        "annotators": serializers.ListField(child=serializers.DictField())})})
    def get(self, request, slug, number):
        task = visible_task(request, slug)
        rnd = get_object_or_404(Round.objects.select_related("task"), task=task, number=number)
        return Response(services.round_stats(rnd))
