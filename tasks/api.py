"""REST endpoints for tasks, rounds and contexts."""

from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, mixins, permissions, viewsets

from .models import Context, Round, Task
from .roles import IsResearcherOrReadOnly
from .serializers import ContextSerializer, RoundSerializer, TaskSerializer


class TaskViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Tasks. Anyone reads public tasks; staff create; researchers edit."""

    serializer_class = TaskSerializer
    lookup_field = "slug"
    permission_classes = [IsResearcherOrReadOnly]

    def get_queryset(self):
        return (
            Task.objects.visible_to(self.request.user)
            .prefetch_related(Prefetch("rounds", queryset=Round.objects.order_by("number")))
            .order_by("name")
        )

    def perform_create(self, serializer):
        task = serializer.save()
        if not self.request.user.is_staff:
            task.owners.add(self.request.user)


def visible_task(request, slug) -> Task:
    return get_object_or_404(Task.objects.visible_to(request.user), slug=slug)


@extend_schema(tags=["rounds"])
class RoundList(generics.ListAPIView):
    serializer_class = RoundSerializer

    def get_queryset(self):
        task = visible_task(self.request, self.kwargs["slug"])
        return task.rounds.select_related("task").prefetch_related("target_models").order_by("number")


@extend_schema(tags=["rounds"])
class RoundDetail(generics.RetrieveAPIView):
    serializer_class = RoundSerializer

    def get_object(self):
        task = visible_task(self.request, self.kwargs["slug"])
        return get_object_or_404(task.rounds.select_related("task"), number=self.kwargs["number"])


@extend_schema(tags=["contexts"])
class ContextList(generics.ListAPIView):
    """A task's contexts, for signed-in annotators and researchers."""

    serializer_class = ContextSerializer
    permission_classes = [permissions.IsAuthenticated]

    def get_queryset(self):
        task = visible_task(self.request, self.kwargs["slug"])
        return Context.objects.filter(task=task, is_active=True).select_related("task", "round").order_by("pk")
