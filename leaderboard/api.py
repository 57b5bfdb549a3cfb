"""REST endpoints that close the round loop: train the next model, evaluate it, promote it.

Only a task's researchers reach them; the services enforce every rule (one training
job per task, no promotion without a finished evaluation)."""

from __future__ import annotations

import csv
import io
import json

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, permissions, renderers, serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api import ReadAnyoneWriteResearchers, researched_task, round_response
from annotation.serializers import RoundSerializer
from core.errors import Forbidden, InvalidInput, NotFound
from core.parsers import BoundedMultiPartParser
from core.rows import spreadsheet_safe
from core.uploads import MULTIPART_OVERHEAD_BYTES, BoundedUploads
from leaderboard import promotion
from leaderboard.evaluation import start_evaluation
from registry.models import ModelVersion
from tasks.api import job_response
from tasks.models import Task
from tasks.roles import is_researcher
from tasks.serializers import JobSerializer

from . import board, cycle, dynascore, submissions
from .models import Release
from .releases import service as release_service
from .serializers import (
    ModelVersionSerializer,
    NewReleaseSerializer,
    PromoteSerializer,
    ReleaseSerializer,
    TrainNextSerializer,
)

TRAIN_OPTIONS = ("epochs", "max_steps", "max_minutes", "batch_size", "lr", "seed")


@extend_schema(tags=["models"])
class TrainNext(APIView):
    """Start the job that trains the next target model (202 with the job). Options left
    out follow the seed model's recipe. 409 ``no_new_examples`` (nothing queued) when the
    chosen rounds hold no usable example today's target did not learn from, unless
    ``allow_no_new_examples`` is true."""

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
            evaluate=values["evaluate"], allow_no_new_examples=values["allow_no_new_examples"], user=request.user,
            **{k: values[k] for k in TRAIN_OPTIONS if k in values})
        return job_response(request, job)


def model_for(request, pk: int) -> ModelVersion:
    """A model of a task the caller researches; 404 for everyone else."""
    model = (ModelVersion.objects.select_related("task", "parent")
             .filter(pk=pk, task__in=Task.objects.researched_by(request.user)).first())
    if model is None:
        raise NotFound(f"No model #{pk}.")
    return model


class SubmissionSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="A zip of a Hugging Face model folder: config.json (with the task's "
                                           "labels), model.safetensors and the tokenizer files.")
    name = serializers.CharField(max_length=100)
    public = serializers.BooleanField(default=True, help_text="Private: shown only to you and the researchers.")


@extend_schema(tags=["models"])
class ModelList(BoundedUploads, generics.ListAPIView):
    """GET: a task's models with their evaluations, newest first (its researchers only).
    POST: submit a model (any signed-in user; at most ``SUBMISSIONS_PER_DAY`` per task
    a day, researchers exempt). The answer (202) is the job that checks it, in a worker:
    once it passes, the model is registered (the job's ``result`` names it and its
    evaluation job) and evaluated on every dataset of the task. An archive over
    ``SUBMISSION_MAX_BYTES`` is refused (413) as it is read; one that is not a safe zip
    of allowed files, at once (400)."""

    serializer_class = ModelVersionSerializer
    permission_classes = [permissions.IsAuthenticated]
    parser_classes = [BoundedMultiPartParser]
    error_statuses = (409,)

    def max_upload_file_bytes(self) -> int:  # read while the body is read (core.uploads)
        return settings.SUBMISSION_MAX_BYTES

    @property
    def max_upload_bytes(self) -> int:  # the whole body, read by BoundedMultiPartParser
        return settings.SUBMISSION_MAX_BYTES + MULTIPART_OVERHEAD_BYTES

    def get_queryset(self):
        task = researched_task(self.request, self.kwargs["slug"])
        return (ModelVersion.objects.filter(task=task).select_related("task", "parent")
                .prefetch_related("trained_on_rounds", "target_of_rounds", "evaluations__round")
                .order_by("-created_at", "-pk"))

    @extend_schema(request={"multipart/form-data": SubmissionSerializer}, responses={202: JobSerializer})
    def post(self, request, slug):
        task = Task.objects.visible_to(request.user).filter(slug=slug).first()
        if task is None:
            raise NotFound(f"No task {slug!r}.")
        data = SubmissionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        job = submissions.submit_model(task, request.user, values["file"], name=values["name"],
                                       public=values["public"])
        return job_response(request, job)


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
        return job_response(request, start_evaluation(model, user=request.user))


@extend_schema(tags=["models"])
class Promote(APIView):
    """Open the next round with the model (or an ensemble with the last rounds' targets)
    as its target; the open round closes. Refused (409) without a finished evaluation, and
    (codes ``not_above_majority``, for extractive QA ``not_above_reference``,
    ``below_target``, ``target_not_comparable``, ``stale_evaluation``, the message naming
    the scores) when the model's static-test interval does not lie above the task's
    reference line (the majority-class answer; for QA the F1 of the SQuAD paper's
    sliding-window baseline) or it scores below today's target on the same examples,
    unless ``allow_below_baseline`` is true and a ``reason`` is given (recorded with the
    promotion)."""

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
        rnd = promotion.promote(task, model, ensemble_size=data.validated_data["ensemble_size"],
                                allow_below_baseline=data.validated_data["allow_below_baseline"],
                                reason=data.validated_data["reason"], user=request.user)
        return round_response(request, rnd, status.HTTP_201_CREATED)


class LeaderboardMetricSerializer(serializers.Serializer):
    value = serializers.FloatField(allow_null=True)
    ci_low = serializers.FloatField(allow_null=True)
    ci_high = serializers.FloatField(allow_null=True)


class LeaderboardDatasetSerializer(LeaderboardMetricSerializer):
    num_examples = serializers.IntegerField()


class LeaderboardModelSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True, help_text=(
        "Empty for the reference row: the majority-class baseline, or for extractive QA the sliding-window "
        "baseline."))
    name = serializers.CharField()
    owner = serializers.CharField(allow_null=True)
    parameters = serializers.IntegerField(allow_null=True)
    training_data = serializers.DictField(help_text=(
        "What the model learnt from; for the reference row, how it answers (majority_label; for QA the "
        "sliding-window method, its span bound and its exact match per dataset)."))
    created_at = serializers.DateTimeField(allow_null=True)
    baseline = serializers.BooleanField(help_text="The reference row (in no rank), not a model.")
    public = serializers.BooleanField(help_text="False: a private model, shown to its owner and researchers only.")


class LeaderboardRowSerializer(serializers.Serializer):
    model = LeaderboardModelSerializer()
    rank = serializers.IntegerField(allow_null=True, help_text="Empty for the baseline (a reference row).")
    dynascore = serializers.FloatField(allow_null=True)
    dynascore_ci_low = serializers.FloatField(allow_null=True)
    dynascore_ci_high = serializers.FloatField(allow_null=True)
    tied_with_next = serializers.BooleanField(allow_null=True, help_text=(
        "The Dynascore difference with the next row is not significant (paired bootstrap of the "
        "per-replicate Dynascores, 95%); empty when the two were scored on different examples."))
    performance_tied_with_next = serializers.BooleanField(allow_null=True, help_text=(
        "The same test on performance alone."))
    metrics = serializers.DictField(child=LeaderboardMetricSerializer(), help_text=(
        "performance (the task's metric), calibration (ECE), throughput (examples/s), memory (MiB, measured), "
        "robustness and fairness (answers unchanged under perturbations), each averaged over the datasets."))
    datasets = serializers.DictField(child=LeaderboardDatasetSerializer(),
                                     help_text="The task's metric on each round's test set.")


class LeaderboardSerializer(serializers.Serializer):
    task = serializers.CharField()
    weights = serializers.DictField(child=serializers.FloatField())
    dataset_weights = serializers.DictField(child=serializers.FloatField(), help_text=(
        "The weight of each dataset in the averages over datasets (1 unless the request set it)."))
    datasets = serializers.ListField(child=serializers.CharField())
    rows = LeaderboardRowSerializer(many=True)


_WEIGHT = r"(performance|throughput|memory|robustness|fairness|calibration):(5(\.0+)?|[0-4](\.[0-9]+)?)"
WEIGHTS_PATTERN = rf"^({_WEIGHT}(,{_WEIGHT})*)?$"
_DATASET_WEIGHT = r"[0-9]{1,6}:(5(\.0+)?|[0-4](\.[0-9]+)?)"
DATASET_WEIGHTS_PATTERN = rf"^({_DATASET_WEIGHT}(,{_DATASET_WEIGHT})*)?$"


class PublicReads(permissions.AllowAny):
    anonymous_reads = True  # read in the OpenAPI schema: no credentials needed


class CSVRenderer(renderers.BaseRenderer):
    """``?format=csv``: the leaderboard as CSV (an error body stays JSON text)."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if isinstance(data, str):
            return data.encode("utf-8")
        return json.dumps(data).encode("utf-8")


@extend_schema(tags=["leaderboard"])
class Leaderboard(APIView):
    """A task's leaderboard, ranked by the Dynascore under the weights given
    (``performance:4,throughput:1,...``, any subset, each 0-5); ``format=csv`` for CSV.
    Public tasks only (a hidden task's board is for its researchers)."""

    permission_classes = [PublicReads]
    renderer_classes = [renderers.JSONRenderer, CSVRenderer]
    error_statuses = (400,)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if response.status_code >= 400:  # errors are JSON whatever the format asked for
            response.accepted_renderer = renderers.JSONRenderer()
            response.accepted_media_type = "application/json"
        return response

    @extend_schema(parameters=[
        OpenApiParameter("weights", str, required=False, pattern=WEIGHTS_PATTERN, description=(
            "Metric weights, e.g. performance:4,throughput:1,memory:1,robustness:1,fairness:1,calibration:0; "
            "any subset (the others keep these defaults); each a number from 0 to 5; each metric at most "
            "once; not all 0 (400 otherwise).")),
        OpenApiParameter("dataset_weights", str, required=False, pattern=DATASET_WEIGHTS_PATTERN, description=(
            "Dataset weights in the averages over datasets, by round number (0: the static test set), e.g. "
            "0:1,1:2,2:2; rounds not named weigh 1; each a number from 0 to 5; a round without a test set, or "
            "all weights 0, is a 400.")),
        OpenApiParameter("format", str, enum=["json", "csv"], required=False)],
        responses={200: LeaderboardSerializer})
    def get(self, request, slug):
        task = Task.objects.visible_to(request.user).filter(slug=slug).first()
        if task is None:
            raise NotFound(f"No task {slug!r}.")
        document = board.board_json(task, parse_weights_param(request.query_params.get("weights")), request.user,
                                    parse_dataset_weights_param(request.query_params.get("dataset_weights")))
        if request.accepted_renderer.format == "csv":
            out = io.StringIO()
            csv.writer(out).writerows([spreadsheet_safe(cell) for cell in row] for row in board.csv_rows(document))
            return Response(out.getvalue(), headers={
                "Content-Disposition": f'attachment; filename="{task.slug}-leaderboard.csv"'})
        return Response(document)


def parse_dataset_weights_param(text):
    try:
        return board.parse_dataset_weights(text)
    except ValueError as exc:
        raise InvalidInput.field("dataset_weights", str(exc)) from None


def parse_weights_param(text):
    try:
        return dynascore.parse_weights(text)
    except ValueError as exc:
        raise InvalidInput.field("weights", str(exc)) from None


def visible_task(request, slug) -> Task:
    task = Task.objects.visible_to(request.user).filter(slug=slug).first()
    if task is None:
        raise NotFound(f"No task {slug!r}.")
    return task


@extend_schema(tags=["releases"])
class ReleaseList(generics.ListAPIView):
    """GET: a task's data releases, newest version first (anyone who may see the task):
    each an immutable snapshot of verified examples of closed rounds, with every file's
    sha256 and download address. POST (the task's researchers): make the next release
    of ``rounds`` and ``splits`` (train, dev; the test split only with
    ``release_test_split``: the leaderboard's test data is released on purpose or not at
    all); the answer (202) is the job that writes it, whose
    ``result`` names the release once it succeeded. Refused (409) for a round that is
    open or a draft, when the rounds hold no verified example in the splits, or while
    another release of the task is queued or running; 503 where releases are not
    configured (no ``RELEASE_PSEUDONYM_KEY``)."""

    serializer_class = ReleaseSerializer
    permission_classes = [ReadAnyoneWriteResearchers]
    error_statuses = {"POST": (409,)}

    def get_queryset(self):
        task = visible_task(self.request, self.kwargs["slug"])
        return Release.objects.filter(task=task).select_related("task").order_by("-version")

    @extend_schema(request=NewReleaseSerializer, responses={202: JobSerializer})
    def post(self, request, slug):
        task = researched_task(request, slug)
        data = NewReleaseSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        job = release_service.start_release(task, rounds=data.validated_data["rounds"],
                                            splits=data.validated_data["splits"], user=request.user,
                                            release_test_split=data.validated_data["release_test_split"])
        return job_response(request, job)


@extend_schema(tags=["releases"])
class ReleaseDetail(generics.RetrieveAPIView):
    """One release of a task, by its version."""

    serializer_class = ReleaseSerializer
    permission_classes = [PublicReads]

    def get_object(self):
        task = visible_task(self.request, self.kwargs["slug"])
        release = Release.objects.filter(task=task, version=self.kwargs["version"]).select_related("task").first()
        if release is None:
            raise NotFound(f"Task {task.slug} has no release {self.kwargs['version']}.")
        return release
