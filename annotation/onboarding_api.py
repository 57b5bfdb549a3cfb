"""The onboarding endpoints: where the caller stands with a task's onboarding and its
items (without their answers), and answering one item (``services.onboarding``).
A session token of the task works here whatever its kind of work, so that an MTurk
worker takes the onboarding inside their HIT."""

from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.response import Response

from tasks.onboarding_config import MAX_POOL

from . import onboarding
from .access import task_for
from .api import AnnotationView


class OnboardingStandingSerializer(serializers.Serializer):
    required = serializers.BooleanField(help_text="The caller must pass it before writing or validating.")
    passed = serializers.BooleanField()
    blocked = serializers.BooleanField(help_text="Every try allowed was failed: the task's work is closed to them.")
    tries = serializers.IntegerField(help_text="Tries finished.")
    max_tries = serializers.IntegerField()
    tries_left = serializers.IntegerField()
    answered = serializers.ListField(child=serializers.IntegerField(), help_text="Items answered in this try.")
    items = serializers.IntegerField(help_text="Items in a try (drawn from the task's pool: none served again).")
    needed = serializers.IntegerField(help_text="Items a try must get right to pass.")
    last_score = serializers.IntegerField(allow_null=True)


class ItemSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=["label", "judge"])
    context = serializers.DictField(child=serializers.CharField())
    inputs = serializers.DictField(child=serializers.CharField())
    target = serializers.DictField(required=False, help_text="A judge item: the answer to judge.")
    shown_target = serializers.JSONField(required=False)


class OnboardingSerializer(serializers.Serializer):
    task = serializers.CharField()
    instructions = serializers.CharField()
    introduction = serializers.CharField()
    standing = OnboardingStandingSerializer()
    items = ItemSerializer(many=True)


@extend_schema_field({"oneOf": [{"type": "object"}, {"type": "string", "enum": ["correct", "incorrect"]}]})
class AnswerField(serializers.JSONField):
    """An answer of the task (an object) or a judgement ("correct", "incorrect"); never null."""


class AnswerCreateSerializer(serializers.Serializer):
    item = serializers.IntegerField(min_value=0, max_value=MAX_POOL - 1,
                                    help_text="The item's number: one of the items of your try under way (GET).")
    answer = AnswerField(help_text='A label item: an answer of the task ({"label": ...}, or for QA '
                                             '{"text": ...}); a judge item: "correct" or "incorrect".')


class AnsweredSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    right = serializers.BooleanField()
    known_answer = serializers.JSONField()
    explanation = serializers.CharField()
    try_finished = serializers.BooleanField()
    score = serializers.IntegerField(allow_null=True)
    standing = OnboardingStandingSerializer()


class Onboarding(AnnotationView):
    """The task's onboarding: the caller's standing and the items to answer (an empty
    list and ``required: false`` where the task asks for none)."""

    @extend_schema(responses={200: OnboardingSerializer})
    def get(self, request, slug):
        task = task_for(request, slug)
        config = task.parsed_config.onboarding or {}
        body = {"task": task.slug, "instructions": task.instructions, "introduction": config.get("introduction", ""),
                "standing": onboarding.standing(task, request.user),
                "items": onboarding.shown_items(task, request.user)}
        return Response(OnboardingSerializer(body).data)


class OnboardingAnswer(AnnotationView):
    """Answer one item of the task's onboarding: whether it was right, its known answer
    and explanation; the last item of a try scores the try (a pass, or after the last
    try allowed a block: 403 ``onboarding_required`` from then on)."""

    error_statuses = (409,)

    @extend_schema(request=AnswerCreateSerializer, responses={201: AnsweredSerializer})
    def post(self, request, slug):
        task = task_for(request, slug)
        params = AnswerCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        answered = onboarding.answer_item(task, request.user, params.validated_data["item"],
                                          params.validated_data["answer"])
        return Response(AnsweredSerializer(answered).data, status=status.HTTP_201_CREATED)
