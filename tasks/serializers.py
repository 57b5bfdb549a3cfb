from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from .config import validate_task_config
from .models import Context, Round, Task


class RoundSerializer(serializers.ModelSerializer):
    task = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    model_error_rate = serializers.FloatField(read_only=True, allow_null=True)
    verified_model_error_rate = serializers.FloatField(read_only=True, allow_null=True)
    target_models = serializers.SerializerMethodField()

    class Meta:
        model = Round
        fields = ["task", "number", "status", "ensemble_mode", "description", "target_models",
                  "starts_at", "ends_at", "opened_at", "closed_at", "examples_collected",
                  "examples_fooled", "examples_verified_fooled", "validations_count",
                  "model_error_rate", "verified_model_error_rate"]
        read_only_fields = fields

    def get_target_models(self, obj) -> list[str]:
        return [m.name for m in obj.target_models.all()]


class TaskSerializer(serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="api:task-detail", lookup_field="slug")
    current_round = serializers.SerializerMethodField()

    class Meta:
        model = Task
        fields = ["url", "slug", "name", "task_type", "goal", "instructions", "content_warning",
                  "is_active", "is_hidden", "config", "current_round", "created_at", "updated_at"]
        read_only_fields = ["created_at", "updated_at"]

    def get_current_round(self, obj) -> int | None:
        open_rounds = [r for r in obj.rounds.all() if r.status == Round.Status.OPEN]
        return open_rounds[0].number if open_rounds else None

    def validate(self, attrs):
        task_type = attrs.get("task_type", getattr(self.instance, "task_type", None))
        config = attrs.get("config", getattr(self.instance, "config", None))
        try:
            validate_task_config(task_type, config)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from exc
        return attrs


class ContextSerializer(serializers.ModelSerializer):
    task = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    round = serializers.IntegerField(source="round.number", read_only=True, allow_null=True, default=None)

    class Meta:
        model = Context
        fields = ["id", "task", "round", "external_id", "fields", "tag", "metadata", "times_used",
                  "times_fooled", "created_at"]
        read_only_fields = fields
