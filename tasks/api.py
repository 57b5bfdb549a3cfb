"""REST endpoints for tasks, rounds and contexts."""

from django.db import IntegrityError, transaction
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import generics, mixins, permissions, viewsets

from core.errors import Conflict

from .models import Context, Round, Task
from .roles import IsResearcherOrReadOnly
from .serializers import ContextSerializer, TaskSerializer, TaskUpdateSerializer


class TaskViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Tasks. Anyone reads public tasks; staff researchers create them (and own them);
    a task's researchers edit it."""

    serializer_class = TaskSerializer
    lookup_field = "slug"
    lookup_value_regex = "[-a-zA-Z0-9_]+"
    permission_classes = [IsResearcherOrReadOnly]
    error_statuses = (409,)

    def get_serializer_class(self):
        return TaskUpdateSerializer if self.action in ("update", "partial_update") else TaskSerializer

    def get_queryset(self):
        return (
            Task.objects.visible_to(self.request.user)
            .prefetch_related(Prefetch("rounds", queryset=Round.objects.order_by("number")))
            .order_by("name")
        )

    def perform_create(self, serializer):
        slug = serializer.validated_data["slug"]
        try:
            with transaction.atomic():
                task = serializer.save()
                if not self.request.user.is_superuser:
                    task.owners.add(self.request.user)
        except IntegrityError:
            if Task.objects.filter(slug=slug).exists():
                raise Conflict(f"A task with the slug {slug!r} exists already.") from None
            raise


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
