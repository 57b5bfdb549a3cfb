from datetime import datetime

from django.core.exceptions import ValidationError as DjangoValidationError
from django.urls import reverse
from rest_framework import serializers

from core.fields import StrictModelSerializer
from jobs.models import Job

from . import services, uploads
from .config import validate_task_config
from .models import Context, Round, Task


class TaskSerializer(StrictModelSerializer):
    """A task. Its slug is set when it is created; a config change that would reshape
    the task's data (fields, labels, model inputs, type) is refused once it has data."""

    url = serializers.HyperlinkedIdentityField(view_name="api:task-detail", lookup_field="slug")
    current_round = serializers.SerializerMethodField()

    class Meta:
        model = Task
        fields = ["url", "slug", "name", "task_type", "goal", "instructions", "content_warning",
                  "is_active", "is_hidden", "config", "current_round", "created_at", "updated_at"]
        read_only_fields = ["created_at", "updated_at"]
        # A taken slug is a conflict with what exists (409, services.create_task), not bad input.
        extra_kwargs = {"slug": {"validators": []}}

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
        if self.instance is not None:
            services.check_config_change(self.instance, task_type, config)
        return attrs


class TaskUpdateSerializer(TaskSerializer):
    """Changes to a task: everything but its slug (links and HITs point at it)."""

    class Meta(TaskSerializer.Meta):
        read_only_fields = ["slug", "created_at", "updated_at"]
        extra_kwargs = {}


class ContextSerializer(serializers.ModelSerializer):
    task = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    round = serializers.IntegerField(source="round.number", read_only=True, allow_null=True, default=None)

    class Meta:
        model = Context
        fields = ["id", "task", "round", "external_id", "fields", "tag", "metadata", "times_used",
                  "times_fooled", "created_at"]
        read_only_fields = fields


class JobSerializer(serializers.ModelSerializer):
    """A long job as its researcher follows it: status, percent, time left, log."""

    task = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    seconds_left = serializers.SerializerMethodField(help_text="Estimated from the pace so far; null until known.")
    queue_position = serializers.SerializerMethodField(help_text="1 = next to start; null once started.")
    estimated_start = serializers.SerializerMethodField(help_text=(
        "When a queued job should start (one worker on its queue, typical run times); null once started "
        "or without history."))
    url = serializers.HyperlinkedIdentityField(view_name="api:job-detail")
    page = serializers.SerializerMethodField(help_text="The job's page, for people.")
    file = serializers.SerializerMethodField(help_text=(
        "Where the task's researchers download the file the job made (an export of examples); null if it "
        "made none."))

    class Meta:
        model = Job
        fields = ["id", "url", "page", "file", "kind", "status", "progress", "seconds_left", "queue_position",
                  "estimated_start", "task", "params", "result", "log", "error", "attempts", "rerun_of", "created_at",
                  "started_at", "heartbeat_at", "finished_at"]
        read_only_fields = fields

    def get_seconds_left(self, obj) -> float | None:
        left = obj.seconds_left
        return round(left, 1) if left is not None else None

    def get_queue_position(self, obj) -> int | None:
        return obj.queue_position()

    def get_estimated_start(self, obj) -> datetime | None:
        return obj.estimated_start()

    def get_page(self, obj) -> str:
        return obj.get_absolute_url()

    def get_file(self, obj) -> str | None:
        return reverse("job-file", args=[obj.pk]) if (obj.result or {}).get("file") else None


class ContextUploadSerializer(serializers.Serializer):
    """A file of contexts for a round (multipart/form-data)."""

    file = serializers.FileField(
        allow_empty_file=True, use_url=False,
        help_text="UTF-8 JSON lines (one object per line: `{\"fields\": {...}, \"external_id\"?, \"tag\"?, "
                  "\"metadata\"?}`, or flat with the task's context fields as keys) or CSV (a header row naming "
                  "the context fields, optionally `external_id` and `tag`). At most CONTEXT_UPLOAD_MAX_BYTES "
                  "(default 20 MiB) and CONTEXT_UPLOAD_MAX_ROWS rows (default 50,000).")
    format = serializers.ChoiceField(
        choices=uploads.FORMATS, required=False,
        help_text="`jsonl` or `csv`; left out: told from the file name (.jsonl, .ndjson, .json, .csv).")


class ContextUploadResultSerializer(serializers.Serializer):
    created = serializers.IntegerField(min_value=0, help_text="Contexts added to the round.")
    skipped = serializers.IntegerField(
        min_value=0, help_text="Rows whose external_id the task has already (nothing was changed for them).")
