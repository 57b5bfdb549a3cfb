from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from .config import validate_task_config
from .models import Context, Round, Task


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
