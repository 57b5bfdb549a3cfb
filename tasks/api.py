"""REST endpoints for tasks, rounds and contexts."""

from django.conf import settings
from django.db.models import Prefetch, Q
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, mixins, permissions, status, viewsets
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import Forbidden, NotFound
from core.parsers import BoundedMultiPartParser
from core.schema import FileErrorSerializer
from core.uploads import BoundedUploads
from jobs import engine
from jobs.models import Job

from . import services, uploads
from .models import Context, Round, Task
from .roles import IsResearcherOrReadOnly, is_researcher
from .serializers import (
    ContextSerializer,
    ContextUploadResultSerializer,
    ContextUploadSerializer,
    JobSerializer,
    TaskSerializer,
    TaskUpdateSerializer,
)


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
        serializer.instance = services.create_task_by(self.request.user, serializer.validated_data)


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


# --- jobs -------------------------------------------------------------------------


def visible_jobs(user):
    """Jobs of the tasks ``user`` researches (all for superusers), and the ones they started."""
    if user.is_superuser:
        return Job.objects.all()
    return Job.objects.filter(Q(task__in=Task.objects.researched_by(user)) | Q(created_by=user))


def job_for(request, pk: int) -> Job:
    job = visible_jobs(request.user).select_related("task").filter(pk=pk).first()
    if job is None:
        raise NotFound(f"No job #{pk}.")
    return job


def job_response(request, job: Job, status_code=status.HTTP_202_ACCEPTED) -> Response:
    """A job as it stands now (a job run inline has already moved on since it was queued)."""
    job.refresh_from_db()
    return Response(JobSerializer(job, context={"request": request}).data, status=status_code)


def _researcher_of_job(request, job: Job) -> None:
    if not (request.user.is_superuser or (job.task is not None and is_researcher(request.user, job.task))):
        raise Forbidden("Only the task's researchers can cancel or re-run its jobs.")


@extend_schema(tags=["jobs"])
class JobList(generics.ListAPIView):
    """A task's jobs, newest first, for its researchers."""

    serializer_class = JobSerializer
    permission_classes = [permissions.IsAuthenticated]

    def get_queryset(self):
        task = visible_task(self.request, self.kwargs["slug"])
        if not is_researcher(self.request.user, task):
            raise Forbidden("Only the task's researchers see its jobs.")
        return Job.objects.filter(task=task).select_related("task").order_by("-created_at", "-pk")


@extend_schema(tags=["jobs"])
class JobDetail(generics.RetrieveAPIView):
    """A job: status, progress, time left, queue position, log and error."""

    serializer_class = JobSerializer
    permission_classes = [permissions.IsAuthenticated]

    def get_object(self):
        return job_for(self.request, self.kwargs["pk"])


@extend_schema(tags=["jobs"])
class JobCancel(APIView):
    """Cancel a queued or running job; a running one stops at its next progress report
    and registers nothing."""

    permission_classes = [permissions.IsAuthenticated]
    error_statuses = (409,)

    @extend_schema(request=None, responses={200: JobSerializer})
    def post(self, request, pk):
        job = job_for(request, pk)
        _researcher_of_job(request, job)
        return job_response(request, engine.cancel_job(job, request.user), status.HTTP_200_OK)


@extend_schema(tags=["jobs"])
class JobRerun(APIView):
    """Run a finished job again with the same parameters (a new job)."""

    permission_classes = [permissions.IsAuthenticated]
    error_statuses = (409,)

    @extend_schema(request=None, responses={202: JobSerializer})
    def post(self, request, pk):
        job = job_for(request, pk)
        _researcher_of_job(request, job)
        return job_response(request, engine.rerun_job(job, request.user))


@extend_schema(tags=["contexts"])
class RoundContextUpload(BoundedUploads, APIView):
    """Add a file of contexts to a round: the task's researchers, for a draft or open
    round (round 0 and closed rounds are 409).

    Every row is checked against the task's config; one bad row and nothing is added,
    and the 400 lists each problem with the line its row starts on. Rows whose
    `external_id` the task has already are skipped, so uploading a file twice adds
    nothing twice. A file over the byte or row bounds is 413.
    """

    permission_classes = [permissions.IsAuthenticated]
    parser_classes = [BoundedMultiPartParser]
    error_statuses = (409,)

    @property
    def max_upload_bytes(self) -> int:  # read by BoundedMultiPartParser
        return uploads.max_request_bytes()

    def max_upload_file_bytes(self) -> int:  # enforced while the file is read (core.uploads)
        return settings.CONTEXT_UPLOAD_MAX_BYTES

    @extend_schema(
        request={"multipart/form-data": ContextUploadSerializer},
        responses={
            201: ContextUploadResultSerializer,
            400: OpenApiResponse(FileErrorSerializer, description=(
                "Bad input, nothing added: `errors` lists the file's problems by line, or names a bad "
                "field (`file`, `format`).")),
        },
    )
    def post(self, request, slug, number):
        task = visible_task(request, slug)
        rnd = get_object_or_404(Round, task=task, number=number)
        uploads.check_upload_allowed(task, rnd, request.user)  # 403 and 409 before the body is read
        payload = ContextUploadSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        upload = payload.validated_data["file"]
        report = uploads.upload_contexts(
            task, rnd, uploads.read_upload(upload), file_format=payload.validated_data.get("format") or None,
            filename=upload.name or "", user=request.user)
        return Response(ContextUploadResultSerializer(report).data, status=status.HTTP_201_CREATED)
