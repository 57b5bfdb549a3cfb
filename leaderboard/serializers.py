from django.urls import reverse
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from annotation.models import Example
from core.fields import StrictBooleanField, StrictCharField, StrictChoiceField, StrictIntegerField
from registry.models import ModelVersion

from .evaluation import has_finished_evaluation
from .models import Evaluation, Release
from .promotion import MAX_ENSEMBLE
from .releases.public import withheld
from .training import MODES, SELECTIONS

MAX_ID = 2**63 - 1


class TrainNextSerializer(serializers.Serializer):
    """What the next target model learns from, and how."""

    name = StrictCharField(required=False, max_length=100,
                           help_text="Default: r<next round>-<selection>-<time>. Unique per task.")
    rounds = serializers.ListField(child=StrictIntegerField(min_value=1, max_value=100_000), required=False,
                                   allow_empty=True, max_length=1000,
                                   help_text="Collection rounds to learn from; default: all of them.")
    selection = StrictChoiceField(choices=list(SELECTIONS.items()), default="verified",
                                  help_text="verified: every verified example; fooling: only those that fooled "
                                            "the model.")
    mode = StrictChoiceField(choices=list(MODES.items()), default="full",
                             help_text="full: full fine-tuning; head: only the task head, the encoder frozen "
                                       "(fast).")
    from_parent = StrictBooleanField(default=False,
                                     help_text="Start from the current target's weights instead of the backbone.")
    include_static = StrictBooleanField(default=True, help_text="Learn from round 0's static data too.")
    evaluate = StrictBooleanField(default=True, help_text="Queue the model's evaluation when it is registered.")
    allow_no_new_examples = StrictBooleanField(
        default=False, help_text="Train even when the chosen rounds hold no usable example today's target did not "
                                 "learn from (refused with 409 no_new_examples otherwise, nothing queued).")
    # Left out: the seed model's recipe (leaderboard.cycle.seed_recipe), not the library's defaults.
    epochs = StrictIntegerField(required=False, min_value=1, max_value=50)
    max_steps = StrictIntegerField(required=False, min_value=1, max_value=10_000_000)
    max_minutes = StrictIntegerField(required=False, min_value=1, max_value=7 * 24 * 60,
                                     help_text="A time budget: stop after this many minutes of training and keep "
                                               "what it reached (scored on dev there).")
    batch_size = StrictIntegerField(required=False, min_value=1, max_value=256)
    lr = serializers.FloatField(required=False, min_value=1e-8, max_value=1.0)
    seed = StrictIntegerField(required=False, min_value=0, max_value=2**31 - 1)


class PromoteSerializer(serializers.Serializer):
    model = StrictIntegerField(min_value=1, max_value=MAX_ID, help_text="The candidate model's id.")
    ensemble_size = StrictIntegerField(required=False, default=1, min_value=1, max_value=MAX_ENSEMBLE,
                                       help_text="1: the model alone; k: it and the last k-1 rounds' targets, "
                                                 "averaged.")
    allow_below_baseline = serializers.BooleanField(
        required=False, default=False,
        help_text="Promote even if a promotion rule refuses the model: its static-test interval does not lie "
                  "above the task's reference line (the majority-class answer; for extractive QA the "
                  "sliding-window baseline's F1), or it scores below today's target on the same examples "
                  "(refused with 409 otherwise). Needs a reason.")
    reason = StrictCharField(
        required=False, default="", allow_blank=True, max_length=2000,
        help_text="Why the rules are overridden; recorded with the promotion and in the round's description. "
                  "Required (non-empty) for the override to take effect.")


class EvaluationSerializer(serializers.ModelSerializer):
    round = serializers.IntegerField(source="round.number", read_only=True)

    class Meta:
        model = Evaluation
        fields = ["round", "split", "num_examples", "model_error_rate", "metrics", "created_at"]
        read_only_fields = fields


class ModelVersionSerializer(serializers.ModelSerializer):
    task = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    parent = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    trained_on_rounds = serializers.SlugRelatedField(slug_field="number", many=True, read_only=True)
    evaluations = EvaluationSerializer(many=True, read_only=True)
    evaluated = serializers.SerializerMethodField(help_text="An evaluation on every round has finished.")
    target_of_rounds = serializers.SlugRelatedField(slug_field="number", many=True, read_only=True)

    class Meta:
        model = ModelVersion
        fields = ["id", "task", "name", "status", "backbone", "parent", "sha256", "trained_on_rounds",
                  "target_of_rounds", "training_data", "metrics", "evaluations", "evaluated", "created_at"]
        read_only_fields = fields

    def get_evaluated(self, obj) -> bool:
        return has_finished_evaluation(obj)


# The splits a release names; the test split (the leaderboard's test data) only through
# release_test_split, so that nobody releases it without saying so.
RELEASE_SPLITS = [s for s in Example.Split.values if s != Example.Split.TEST]


class NewReleaseSerializer(serializers.Serializer):
    """What a data release holds: closed rounds, and splits."""

    rounds = serializers.ListField(child=StrictIntegerField(min_value=0, max_value=100_000), min_length=1,
                                   max_length=1000, help_text="Round numbers; closed rounds only (0: the static data).")
    splits = serializers.ListField(
        child=StrictChoiceField(choices=RELEASE_SPLITS, error_messages={
            "invalid_choice": '"{input}" is not a split named here: train or dev. The test split is the '
                              "leaderboard's test data, released on purpose only: release_test_split."}),
        min_length=1, max_length=2, required=False,
        help_text="Default: train and dev. Each is one Parquet file.")
    release_test_split = StrictBooleanField(
        required=False, default=False,
        help_text="Release the rounds' test split too, on purpose: it is the leaderboard's test data, public from "
                  "then on (the data browser too). Recorded on the release.")

    def validate(self, data):
        """The splits the service is asked for: those named (or train and dev), and test
        with ``release_test_split``."""
        splits = data.get("splits") or [s for s in RELEASE_SPLITS]
        if data.get("release_test_split"):
            splits = [*splits, Example.Split.TEST]
        return {**data, "splits": splits}


class ReleaseFileSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="The file's path in the release's folder.")
    sha256 = serializers.CharField()
    bytes = serializers.IntegerField()
    rows = serializers.IntegerField(allow_null=True, help_text="Examples in a split's file; empty for the others.")
    url = serializers.CharField(help_text="Where to download it.")


class ReleaseSerializer(serializers.ModelSerializer):
    """A published release: which rounds and splits, how many examples, its licence, and
    every file with its sha256 and download address."""

    task = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    rows = serializers.IntegerField(source="total_rows", help_text="Examples in every split together.")
    files = serializers.SerializerMethodField()

    class Meta:
        model = Release
        fields = ["task", "version", "rounds", "splits", "rows", "counts", "license", "files", "created_at"]
        read_only_fields = fields

    @extend_schema_field(ReleaseFileSerializer(many=True))
    def get_files(self, release) -> list[dict]:
        request = self.context.get("request")
        out = []
        for path, entry in release.files.items():
            if withheld(release, path):  # a test split nobody released on purpose
                continue
            url = reverse("release-file", args=[release.task.slug, release.version, path])
            out.append({"path": path, "sha256": entry["sha256"], "bytes": entry["bytes"], "rows": entry.get("rows"),
                        "url": request.build_absolute_uri(url) if request is not None else url})
        return out
