from rest_framework import serializers

from tasks.models import Context

from .models import AnnotationSession, Example


class SessionSerializer(serializers.ModelSerializer):
    class Meta:
        model = AnnotationSession
        fields = ["examples_written", "examples_fooled", "validations_done"]
        read_only_fields = fields


class NextContextSerializer(serializers.ModelSerializer):
    round = serializers.IntegerField(source="round_number", read_only=True)

    class Meta:
        model = Context
        fields = ["id", "fields", "tag", "round"]
        read_only_fields = fields


class ExampleCreateSerializer(serializers.Serializer):
    context = serializers.IntegerField(help_text="The id of the context from contexts/next/.")
    inputs = serializers.DictField(child=serializers.CharField(allow_blank=True, trim_whitespace=False),
                                   help_text="What the annotator wrote, by input field.")
    target = serializers.DictField(help_text='{"label": ...} or, for QA, {"text": ..., "start": ...}.')


class ExampleCreatedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    prediction = serializers.CharField(help_text="The model's label (or, for QA, its answer text).")
    probabilities = serializers.DictField(child=serializers.FloatField(), allow_null=True)
    span = serializers.DictField(child=serializers.IntegerField(), allow_null=True,
                                 help_text="QA: the model's answer offsets in the passage.")
    fooled = serializers.BooleanField()
    model = serializers.CharField()
    models = serializers.ListField(child=serializers.IntegerField())
    latency_ms = serializers.FloatField()
    session = SessionSerializer()


class ExplanationRequestSerializer(serializers.Serializer):
    n_steps = serializers.IntegerField(required=False, default=10, min_value=1, max_value=200)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class ValidationCreateSerializer(serializers.Serializer):
    label = serializers.ChoiceField(choices=["correct", "incorrect", "flagged"])
    reason = serializers.CharField(required=False, allow_blank=True, max_length=500, default="")


class ValidationItemSerializer(serializers.ModelSerializer):
    """An example to validate. ``target`` is left out when validation is blind."""

    context = serializers.SerializerMethodField()
    round = serializers.IntegerField(source="round.number")
    target = serializers.SerializerMethodField()
    blind = serializers.SerializerMethodField()

    class Meta:
        model = Example
        fields = ["id", "round", "context", "inputs", "target", "blind", "fooled"]
        read_only_fields = fields

    def get_blind(self, obj) -> bool:
        return obj.task.parsed_config.blind_validation

    def get_context(self, obj) -> dict | None:
        return obj.context.fields if obj.context_id else None

    def get_target(self, obj) -> dict | None:
        return None if self.get_blind(obj) else obj.target


class ExampleStateSerializer(serializers.ModelSerializer):
    class Meta:
        model = Example
        fields = ["id", "retracted", "flagged", "flag_reason", "validation_status", "validations_correct",
                  "validations_incorrect", "validations_flagged"]
        read_only_fields = fields
