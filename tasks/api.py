"""REST endpoints for tasks, rounds and contexts."""

from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, mixins, permissions, viewsets

from .models import Context, Round, Task
from .roles import IsResearcherOrReadOnly
from .serializers import ContextSerializer, TaskSerializer


class TaskViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Tasks. Anyone reads public tasks; staff researchers create them (and own them);
    a task's researchers edit it."""

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
        if not self.request.user.is_superuser:
            task.owners.add(self.request.user)


def visible_task(request, slug) -> Task:
    return get_object_or_404(Task.objects.visible_to(request.user), slug=slug)


@extend_schema(tags=["contexts"])
class ContextList(generics.ListAPIView):
    """A task's contexts, for signed-in annotators and researchers."""

    serializer_class = ContextSerializer
    permission_classes = [permissions.IsAuthenticated]

    def get_queryset(self):
        task = visible_task(self.request, self.kwargs["slug"])
        return Context.objects.filter(task=task, is_active=True).select_related("task", "round").order_by("pk")
