# Long on purpose: every annotation endpoint in one module, each a thin adapter over a service,
# in the order of the URL table.
"""REST endpoints of the annotation loop (paths kept stable for scripts).

Views parse input, call a service and serialise its result; the services raise
domain errors that ``core.api.exception_handler`` turns into statuses. Views with
a ``token_scope`` accept the signed session token (``X-Dynabench-Token``) of
their own task; no other view does.
"""

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, permissions, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import Forbidden, InvalidInput, NotFound
from core.pagination import KeysetPagination
from core.ratelimit import ScopedRateThrottle
from registry.models import ModelVersion
from tasks import services as task_services
from tasks.models import Round
from tasks.roles import is_researcher

from . import contexts, examples, gold, idempotency, listing, reliability, serving, sessions, stats, validation
from .access import example_for, seen, task_for, token_session
from .inference import prefetch_models
from .serializers import (
    BlindAnswerCreateSerializer,
    BlindAnswerSerializer,
    ExampleCreatedSerializer,
    ExampleCreateSerializer,
    ExampleDetailSerializer,
    ExampleListQuerySerializer,
    ExampleRowSerializer,
    ExampleStateSerializer,
    ExplainSerializer,
    ExplanationSerializer,
    GoldSerializer,
    NextContextSerializer,
    ReasonSerializer,
    RevealSerializer,
    RoundCreateSerializer,
    RoundSerializer,
    RoundStatsSerializer,
    RoundTargetsSerializer,
    SessionTokenSerializer,
    ValidatedSerializer,
    ValidationCreateSerializer,
    ValidationItemSerializer,
    ValidatorReliabilitySerializer,
)
from .tokens import make_token


def idempotency_key_parameter() -> OpenApiParameter:
    return OpenApiParameter(
        "Idempotency-Key", str, OpenApiParameter.HEADER, required=False,
        pattern=idempotency.KEY_PATTERN.pattern,
        description="1-255 printable ASCII characters, new for each write: a retry with the same key "
                    "gets the first answer again and stores nothing twice.")


class AnnotationView(APIView):
    """An annotation endpoint: signed-in users, or a session token for this task."""

    permission_classes = [permissions.IsAuthenticated]
    token_scope = "task"


class SessionCreate(APIView):
    """Start an annotation session on a task; returns its signed token.

    Send the token as ``X-Dynabench-Token`` where cookies are unavailable (pages in
    an MTurk iframe). It works on this task's annotation endpoints only, until the
    session ends: at ``expires_at``, when the password changes, when a researcher
    ends it in the admin, and, if it was made from a signed-in browser session, when
    that session signs out. A session token cannot be used here to mint another one.
    """

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(request=None, responses={201: SessionTokenSerializer})
    def post(self, request, slug):
        task = task_for(request, slug)
        signed_in = isinstance(request.successful_authenticator, SessionAuthentication)
        key = sessions.login_key(request.session.session_key) if signed_in else ""
        session = sessions.start_session(request.user, task, login_key=key)
        body = {"token": make_token(session), "expires_at": session.created_at + sessions.max_age(),
                "session": session}
        return Response(SessionTokenSerializer(body).data, status=status.HTTP_201_CREATED)


class NextContext(AnnotationView):
    token_scope = "create"
    error_statuses = (409,)

    @extend_schema(responses={200: NextContextSerializer})
    def get(self, request, slug):
        task = task_for(request, slug)
        session = sessions.current_session(request.user, task, token_session(request))
        context = contexts.next_context(task, session)
        prefetch_models(task)  # embedded mode: the model loads while the annotator writes
        context.served_to = session
        return Response(NextContextSerializer(context).data)


class TaskExamples(generics.GenericAPIView):
    """A task's examples: annotators write one (POST, with the ``examples`` throttle; a
    session token of the task works), its researchers list them (GET; a session token
    is 403 there, as on every endpoint that is not part of annotating)."""

    permission_classes = [permissions.IsAuthenticated]
    pagination_class = KeysetPagination
    throttle_scope = "examples"
    error_statuses = {"POST": (409,)}

    @property
    def token_scope(self):
        return "create" if self.request.method == "POST" else None

    def get_throttles(self):
        return [ScopedRateThrottle()] if self.request.method == "POST" else super().get_throttles()

    def get_serializer_class(self):  # what the browsable API's forms show
        return ExampleCreateSerializer if self.request.method == "POST" else ExampleRowSerializer

    @extend_schema(parameters=[ExampleListQuerySerializer], responses={200: ExampleRowSerializer(many=True)})
    def get(self, request, slug):
        """The task's examples, newest first, a page at a time (follow the ``next`` and
        ``previous`` links), by round, split and validation status (a retracted example
        keeps its status). For the task's researchers: 403 for anyone else who may see
        the task. A bad filter, parameter or cursor is 400; a round the task lacks, 404."""
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(ExampleRowSerializer(page, many=True).data)

    def get_queryset(self):
        task = task_for(self.request, self.kwargs["slug"])
        if not listing.may_list_examples(self.request.user, task):
            raise Forbidden(f"Only the researchers of task {task.slug} list its examples.")
        query = ExampleListQuerySerializer(data=self.request.query_params)
        query.is_valid(raise_exception=True)
        filters = query.validated_data
        return listing.task_examples(task, round_number=filters.get("round"), split=filters.get("split"),
                                     status=filters.get("status"))

    @extend_schema(request=ExampleCreateSerializer, parameters=[idempotency_key_parameter()],
                   responses={201: ExampleCreatedSerializer})
    def post(self, request, slug):
        """Write an example: the round's target model answers, and the example is stored
        with its answer and whether it fooled the model."""
        task = task_for(request, slug)
        payload = ExampleCreateSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        seen(request)
        data = request.data  # as sent: the task config checks inputs and target itself

        def write(within_transaction):
            return examples.create_example(
                task, request.user, context_id=payload.validated_data["context"], inputs=data["inputs"],
                target=data["target"], session=token_session(request), within_transaction=within_transaction)

        return idempotency.run(request, write, lambda created: ExampleCreatedSerializer(created).data,
                               status.HTTP_201_CREATED)


class ExampleExplanation(AnnotationView):
    """Word-level heat for the example's text and context (its author or the task's researchers)."""
    token_scope = "create"

    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "explanations"
    error_statuses = (409, 503)

    @extend_schema(request=ExplainSerializer, responses={200: ExplanationSerializer})
    def post(self, request, pk):
        example = example_for(request, pk)
        params = ExplainSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        explanation = examples.explain_example(example, request.user, n_steps=params.validated_data["n_steps"])
        return Response(ExplanationSerializer(explanation).data)


class ExampleRetract(AnnotationView):
    token_scope = "create"
    error_statuses = (409,)

    @extend_schema(request=None, responses={200: ExampleStateSerializer})
    def post(self, request, pk):
        example = examples.retract_example(example_for(request, pk), request.user)
        return Response(ExampleStateSerializer(example).data)


class ExampleFlag(AnnotationView):
    """Flag an example for the researchers: its author or the task's researchers only.
    A validator flags with the validation label ``flagged`` instead."""
    token_scope = "create"

    @extend_schema(request=ReasonSerializer, responses={200: ExampleStateSerializer})
    def post(self, request, pk):
        params = ReasonSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        example = examples.flag_example(example_for(request, pk), request.user, params.validated_data["reason"])
        return Response(ExampleStateSerializer(example).data)


class ExampleGold(APIView):
    """POST: make the example a known-answer (gold) item with its true verdict ("correct":
    the writer's answer is right; "incorrect": wrong), as the caller's researcher decision
    on it: the task's researchers only; an example of a closed round that was decided is
    refused (409: it may have been public). The validation queue mixes gold items in at
    the task config's ``validation.gold_rate``, and validators' answers on them are the
    evidence for their trust (docs/annotation.md). DELETE: retire it: the queue serves it
    no more as a gold item, and it becomes public like any example (a gold item in use
    stays out of the data browser and releases)."""

    permission_classes = [permissions.IsAuthenticated]
    error_statuses = (409,)

    @extend_schema(request=GoldSerializer, responses={200: ExampleStateSerializer})
    def post(self, request, pk):
        params = GoldSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        example = example_for(request, pk)
        if not is_researcher(request.user, example.task):
            raise Forbidden("Only the task's researchers mark gold items.")
        example = validation.mark_gold(example.pk, request.user, params.validated_data["verdict"])
        return Response(ExampleStateSerializer(example).data)

    @extend_schema(request=None, responses={200: ExampleStateSerializer})
    def delete(self, request, pk):
        example = gold.retire(example_for(request, pk), request.user)
        return Response(ExampleStateSerializer(example).data)


class ExampleUnflag(APIView):
    """Clear an example's flag (the task's researchers)."""

    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(request=None, responses={200: ExampleStateSerializer})
    def post(self, request, pk):
        example = examples.unflag_example(example_for(request, pk), request.user)
        return Response(ExampleStateSerializer(example).data)


class NextValidation(AnnotationView):
    """The next example for the caller to validate; 204 when there is none right now."""
    token_scope = "validate"

    @extend_schema(responses={200: ValidationItemSerializer,
                              204: OpenApiResponse(description="Nothing to validate in this task right now.")})
    def get(self, request, slug):
        task = task_for(request, slug)
        seen(request)
        example = serving.next_for(task, request.user)
        if example is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(ValidationItemSerializer(example, context={"user": request.user}).data)


class BlindAnswer(AnnotationView):
    """Give your own answer to an example before you see the writer's; the answer is
    stored, and the writer's answer comes back."""
    token_scope = "validate"

    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "validations"
    error_statuses = (409,)

    @extend_schema(request=BlindAnswerCreateSerializer, responses={201: BlindAnswerSerializer})
    def post(self, request, pk):
        example = example_for(request, pk)
        params = BlindAnswerCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        seen(request)
        given = validation.give_blind_answer(example.pk, request.user, request.data["answer"])
        return Response(BlindAnswerSerializer(given).data, status=status.HTTP_201_CREATED)


class ExampleDetail(AnnotationView):
    """An example with how it is being decided (the posterior, on an adaptive task):
    for its author and the task's researchers only."""

    @extend_schema(responses={200: ExampleDetailSerializer})
    def get(self, request, pk):
        example = example_for(request, pk)
        if example.annotator_id != request.user.pk and not is_researcher(request.user, example.task):
            raise Forbidden("Only the example's author and the task's researchers can see it.")
        return Response(ExampleDetailSerializer(example).data)


@extend_schema(tags=["validation"])
class ValidatorList(generics.ListAPIView):
    """The task's validators with their estimated reliability (accuracy with its 95%
    interval, sensitivity, specificity, vote weight), most votes first: for its
    researchers. Validators never see each other's."""

    serializer_class = ValidatorReliabilitySerializer
    permission_classes = [permissions.IsAuthenticated]

    def get_queryset(self):
        task = task_for(self.request, self.kwargs["slug"])
        if token_session(self.request) is not None or not is_researcher(self.request.user, task):
            raise Forbidden("Only the task's researchers see its validators' reliability.")
        return reliability.validator_rows(task)


class ExampleReveal(AnnotationView):
    """The writer's answer: for a validator who has given their own (blind) answer,
    the example's author, and the task's researchers."""
    token_scope = "validate"

    @extend_schema(responses={200: RevealSerializer})
    def get(self, request, pk):
        example = example_for(request, pk)
        return Response(RevealSerializer({"target": validation.reveal_target(example, request.user)}).data)


class ExampleValidate(AnnotationView):
    """Decide whether the writer's label is right (after your blind answer, where blind)."""
    token_scope = "validate"

    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "validations"
    error_statuses = (409,)

    @extend_schema(request=ValidationCreateSerializer, parameters=[idempotency_key_parameter()],
                   responses={201: ValidatedSerializer})
    def post(self, request, pk):
        example = example_for(request, pk)
        params = ValidationCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        seen(request)

        def write(within_transaction):
            return validation.validate_example(
                example.pk, request.user, label=params.validated_data["label"],
                reason=params.validated_data["reason"], session=token_session(request),
                within_transaction=within_transaction)

        return idempotency.run(request, write, lambda validated: ValidatedSerializer(validated).data,
                               status.HTTP_201_CREATED)


# --- rounds and their statistics (public) ------------------------------------------------


class PublicView(APIView):
    permission_classes = [permissions.AllowAny]


def _rounds(task):
    return stats.with_counts(Round.objects.filter(task=task)).select_related("task").prefetch_related(
        "target_models").order_by("number")


def researched_task(request, slug):
    """The task ``slug`` for one of its researchers: 404 if unseen, 403 if not theirs."""
    task = task_for(request, slug)
    if token_session(request) is not None or not is_researcher(request.user, task):
        raise Forbidden(f"Only the researchers of task {slug} can change its rounds.")
    return task


def round_response(request, rnd, status_code=status.HTTP_200_OK):
    """A round as the rounds API answers it (its counts included): every endpoint that
    changes a round, in this app or above it (a promotion), answers with this."""
    rnd = _rounds(rnd.task).get(pk=rnd.pk)
    return Response(RoundSerializer(rnd, context={"request": request}).data, status=status_code)


def _task_models(task, ids):
    found = {m.pk: m for m in ModelVersion.objects.filter(task=task, pk__in=ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise InvalidInput.field("target_models", f"Task {task.slug} has no model(s) {missing}.")
    return [found[i] for i in ids]


class ReadAnyoneWriteResearchers(permissions.BasePermission):
    """Anyone reads; a signed-in user writes, and the view checks they research the task."""

    anonymous_reads = True

    def has_permission(self, request, view):
        return request.method in permissions.SAFE_METHODS or bool(request.user and request.user.is_authenticated)


@extend_schema(tags=["rounds"])
class RoundList(generics.ListAPIView):
    """A task's rounds with their counts and model error rates (paginated). Its
    researchers create draft rounds here (POST)."""

    permission_classes = [ReadAnyoneWriteResearchers]
    serializer_class = RoundSerializer
    error_statuses = (409,)

    def get_queryset(self):
        return _rounds(task_for(self.request, self.kwargs["slug"]))

    @extend_schema(request=RoundCreateSerializer, responses={201: RoundSerializer})
    def post(self, request, slug):
        task = researched_task(request, slug)
        data = RoundCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        rnd = task_services.create_round(
            task, number=values.get("number"), target_models=_task_models(task, values.get("target_models", [])),
            ensemble_mode=values["ensemble_mode"], description=values["description"])
        return round_response(request, rnd, status.HTTP_201_CREATED)


class RoundAction(APIView):
    permission_classes = [permissions.IsAuthenticated]
    error_statuses = (409,)

    def round(self, request, slug, number):
        task = researched_task(request, slug)
        rnd = Round.objects.select_related("task").filter(task=task, number=number).first()
        if rnd is None:
            raise NotFound(f"Task {slug} has no round {number}.")
        return rnd


@extend_schema(tags=["rounds"])
class RoundOpen(RoundAction):
    """Open a draft round (it needs a ready target model); the task's open round closes."""

    @extend_schema(request=None, responses={200: RoundSerializer})
    def post(self, request, slug, number):
        return round_response(request, task_services.open_round(self.round(request, slug, number)))


@extend_schema(tags=["rounds"])
class RoundClose(RoundAction):
    """Close an open round: collection stops."""

    @extend_schema(request=None, responses={200: RoundSerializer})
    def post(self, request, slug, number):
        return round_response(request, task_services.close_round(self.round(request, slug, number)))


@extend_schema(tags=["rounds"])
class RoundTargets(RoundAction):
    """Choose a draft round's target model(s)."""

    @extend_schema(request=RoundTargetsSerializer, responses={200: RoundSerializer})
    def post(self, request, slug, number):
        rnd = self.round(request, slug, number)
        data = RoundTargetsSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        models = _task_models(rnd.task, data.validated_data["target_models"])
        rnd = task_services.set_round_targets(rnd, models, ensemble_mode=data.validated_data.get("ensemble_mode"))
        return round_response(request, rnd)


@extend_schema(tags=["rounds"])
class RoundDetail(generics.RetrieveAPIView):
    permission_classes = [permissions.AllowAny]
    serializer_class = RoundSerializer

    def get_object(self):
        slug, number = self.kwargs["slug"], self.kwargs["number"]
        rnd = _rounds(task_for(self.request, slug)).filter(number=number).first()
        if rnd is None:
            raise NotFound(f"Task {slug} has no round {number}.")
        return rnd


@extend_schema(tags=["rounds"])
class RoundStats(PublicView):
    """A round's counts and rates, per (pseudonymous) annotator too, with the blind
    validators' agreement with the writers."""

    @extend_schema(responses={200: RoundStatsSerializer})
    def get(self, request, slug, number):
        task = task_for(request, slug)
        rnd = Round.objects.select_related("task").filter(task=task, number=number).first()
        if rnd is None:
            raise NotFound(f"Task {slug} has no round {number}.")
        return Response(RoundStatsSerializer(stats.round_stats(rnd)).data)
