"""REST endpoints that close the round loop: train the next model, evaluate it, promote it.

Only a task's researchers reach them; the services enforce every rule (one training
job per task, no promotion without a finished evaluation)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import generics, permissions, status
from rest_framework.views import APIView

from annotation.api import _round_response, researched_task
from annotation.serializers import RoundSerializer
from core.errors import Forbidden, InvalidInput, NotFound
from tasks.api import job_response
from tasks.models import ModelVersion, Task
from tasks.roles import is_researcher
from tasks.serializers import JobSerializer

from . import cycle, services
from .serializers import ModelVersionSerializer, PromoteSerializer, TrainNextSerializer

TRAIN_OPTIONS = ("epochs", "max_steps", "batch_size", "lr", "seed")


@extend_schema(tags=["models"])
class TrainNext(APIView):
    """Start the job that trains the next target model (202 with the job)."""

    permission_classes = [permissions.IsAuthenticated]
    error_statuses = (409,)

    @extend_schema(request=TrainNextSerializer, responses={202: JobSerializer})
    def post(self, request, slug):
        task = researched_task(request, slug)
        data = TrainNextSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        job = cycle.train_next(
            task, from_parent=values["from_parent"], name=values.get("name"), rounds=values.get("rounds"),
            selection=values["selection"], mode=values["mode"], include_static=values["include_static"],
            evaluate=values["evaluate"], user=request.user, **{k: values[k] for k in TRAIN_OPTIONS if k in values})
        return job_response(request, job)


def model_for(request, pk: int) -> ModelVersion:
    """A model of a task the caller researches; 404 for everyone else."""
    model = (ModelVersion.objects.select_related("task", "parent")
             .filter(pk=pk, task__in=Task.objects.researched_by(request.user)).first())
    if model is None:
        raise NotFound(f"No model #{pk}.")
    return model


@extend_schema(tags=["models"])
class ModelList(generics.ListAPIView):
    """A task's models with their evaluations, newest first (its researchers only)."""

    serializer_class = ModelVersionSerializer
    permission_classes = [permissions.IsAuthenticated]

    def get_queryset(self):
        task = researched_task(self.request, self.kwargs["slug"])
        return (ModelVersion.objects.filter(task=task).select_related("task", "parent")
                .prefetch_related("trained_on_rounds", "target_of_rounds", "evaluations__round")
                .order_by("-created_at", "-pk"))


@extend_schema(tags=["models"])
class ModelDetail(generics.RetrieveAPIView):
    serializer_class = ModelVersionSerializer
    permission_classes = [permissions.IsAuthenticated]

    def get_object(self):
        return model_for(self.request, self.kwargs["pk"])


@extend_schema(tags=["models"])
class ModelEvaluate(APIView):
    """Queue the model's evaluation on every round's test split, round 0 included."""

    permission_classes = [permissions.IsAuthenticated]
    error_statuses = (409,)

    @extend_schema(request=None, responses={202: JobSerializer})
    def post(self, request, pk):
        model = model_for(request, pk)
        if not is_researcher(request.user, model.task):
            raise Forbidden("Only the task's researchers evaluate its models.")
        return job_response(request, services.start_evaluation(model, user=request.user))


@extend_schema(tags=["models"])
class Promote(APIView):
    """Open the next round with the model (or an ensemble with the last rounds' targets)
    as its target; the open round closes. Refused (409) without a finished evaluation."""

    permission_classes = [permissions.IsAuthenticated]
    error_statuses = (409,)

    @extend_schema(request=PromoteSerializer, responses={201: RoundSerializer})
    def post(self, request, slug):
        task = researched_task(request, slug)
        data = PromoteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        model = ModelVersion.objects.filter(task=task, pk=data.validated_data["model"]).first()
        if model is None:
            raise InvalidInput.field("model", f"Task {slug} has no model #{data.validated_data['model']}.")
        rnd = cycle.promote(task, model, ensemble_size=data.validated_data["ensemble_size"], user=request.user)
        return _round_response(request, rnd, status.HTTP_201_CREATED)
