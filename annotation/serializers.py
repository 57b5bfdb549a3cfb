# Long on purpose: the annotation API's request and response shapes in one catalogue,
# which the schema is generated from.
"""Request and response shapes of the annotation API.

Request serializers check the shape (types, sizes); what a task accepts (its input
fields, labels, passage spans) is checked by the task config in the services, and
reported with the same field names.
"""

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.fields import (
    StrictCharField,
    StrictChoiceField,
    StrictIntegerChoiceField,
    StrictIntegerField,
)
from tasks.models import Round

from . import reliability, trust
from .examples import MAX_DATABASE_ID, MAX_REASON_LENGTH
from .exporting import anonymise
from .gold import told
from .models import Example, Validation
from .stats import verified_rate
from .validation import may_see_target

MAX_TEXT = 20000  # the largest max_input_length a task config allows
MAX_ROUND_NUMBER = 2**31 - 1  # Round.number is a 32-bit column


class SessionSerializer(serializers.Serializer):
    """An annotation session's counters (a plain Serializer: it is on every write's answer,
    and a ModelSerializer builds its fields from the model anew each time)."""

    examples_written = serializers.IntegerField(read_only=True)
    examples_fooled = serializers.IntegerField(read_only=True)
    validations_done = serializers.IntegerField(read_only=True)


class SessionTokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="Send as X-Dynabench-Token.")
    expires_at = serializers.DateTimeField(help_text="When the token stops working at the latest.")
    session = SessionSerializer()


class NextContextSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    fields = serializers.DictField(child=serializers.CharField(), help_text="The context's text fields.")
    tag = serializers.CharField(allow_blank=True)
    round = serializers.IntegerField(source="round_number", help_text="The round it is served for.")
    session = SessionSerializer(source="served_to", help_text="The caller's session counters.")


class AnswerSerializer(serializers.Serializer):
    """An answer: ``label`` for classification tasks, ``text`` and ``start`` for QA."""

    label = StrictCharField(required=False, max_length=40, help_text="Classification: one of the task's labels.")
    text = StrictCharField(required=False, max_length=MAX_TEXT, trim_whitespace=False,
                           help_text="QA: the answer, a span of the passage.")
    # null is read as "not given": the service then says what the answer lacks (a span of
    # the passage, or its offset), never a bare "may not be null".
    start = StrictIntegerField(required=False, allow_null=True, min_value=0, max_value=MAX_DATABASE_ID,
                               help_text="QA: the span's character offset in the passage.")


class ExampleCreateSerializer(serializers.Serializer):
    context = StrictIntegerField(min_value=1, max_value=MAX_DATABASE_ID,
                                 help_text="The id of the context from contexts/next/.")
    inputs = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False, max_length=MAX_TEXT),
        help_text="What the annotator wrote: exactly the task's input fields, each non-empty text "
                  "of at most the task's max_input_length characters.")
    target = AnswerSerializer(help_text='The writer\'s answer: {"label": ...} or, for QA, {"text": ..., "start": ...}.')


class ExampleCreatedSerializer(serializers.Serializer):
    """The model's answer to a new example (from ``services.examples.Created``)."""

    id = serializers.IntegerField(source="example.pk")
    prediction = serializers.SerializerMethodField(
        help_text="The model's label (or, for QA, its answer text); null when a model behind an endpoint gave an "
                  "answer that could not be read (see unreadable_answer).")
    unreadable_answer = serializers.SerializerMethodField(
        help_text="What a model behind an endpoint answered when it could not be read as a label or span; else null.")
    probabilities = serializers.SerializerMethodField()
    span = serializers.SerializerMethodField(help_text="QA: the model's answer offsets in the passage.")
    fooled = serializers.BooleanField(source="example.fooled")
    model = serializers.SerializerMethodField(help_text="The answering model's name (' + '-joined for an ensemble).")
    models = serializers.SerializerMethodField(help_text="The answering model versions' ids.")
    latency_ms = serializers.FloatField(source="example.latency_ms")
    session = SessionSerializer()

    def _shown(self, created) -> dict:
        """The prediction's parts, as the task's kind shows them (the task came with the example)."""
        example = created.example
        return example.task.parsed_config.kind.shown_prediction(example.prediction)

    def get_prediction(self, created) -> str | None:
        return self._shown(created)["prediction"]

    def get_unreadable_answer(self, created) -> str | None:
        """A model behind an endpoint whose answer could not be read: what it said (cut short)."""
        prediction = created.example.prediction
        if not prediction.get("unparseable"):
            return None
        return str((prediction.get("endpoint") or {}).get("raw", ""))[:500]

    def get_probabilities(self, created) -> dict[str, float] | None:
        return self._shown(created)["probabilities"]

    def get_span(self, created) -> dict[str, int] | None:
        return self._shown(created)["span"]

    def get_models(self, created) -> list[int]:
        return sorted(int(k) for k in created.example.model_predictions)

    def get_model(self, created) -> str:
        return " + ".join(created.model_names.get(i, str(i)) for i in self.get_models(created))


class ExplainSerializer(serializers.Serializer):
    n_steps = StrictIntegerChoiceField(
        choices=list(settings.EXPLANATION_STEPS), required=False, default=10,
        help_text="Integrated-gradients steps: more is slower and closer. One of a few values, so that "
                  "explanations are computed once and cached.")


class WordHeatSerializer(serializers.Serializer):
    field = serializers.CharField()
    text = serializers.CharField()
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    attribution = serializers.FloatField()
    heat = serializers.FloatField()


class ExplanationSerializer(serializers.Serializer):
    target = serializers.JSONField(help_text="What was explained: the label, or the answer span for QA.")
    convergence_delta = serializers.FloatField(
        allow_null=True, help_text="Integrated gradients' convergence delta; null for a black-box explanation "
                                   "(leave one word out) of a model behind an endpoint.")
    n_steps = serializers.IntegerField()
    method = serializers.CharField(default="integrated_gradients",
                                   help_text="integrated_gradients, or occlusion (a model behind an endpoint).")
    words = WordHeatSerializer(many=True)
    model_version = serializers.IntegerField()


class ReasonSerializer(serializers.Serializer):
    reason = StrictCharField(required=False, allow_blank=True, max_length=MAX_REASON_LENGTH, default="")


class GoldSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=["correct", "incorrect"],
                                      help_text="Whether the writer's answer is right.")


class ValidationCreateSerializer(serializers.Serializer):
    label = StrictChoiceField(choices=["correct", "incorrect", "flagged"])
    reason = StrictCharField(required=False, allow_blank=True, max_length=MAX_REASON_LENGTH, default="")


class BlindAnswerCreateSerializer(serializers.Serializer):
    answer = AnswerSerializer(help_text='Your own answer: {"label": ...}, or for QA {"text": ...} '
                                        '(with "start" if you know it).')


class BlindAnswerSerializer(serializers.Serializer):
    answer = serializers.JSONField(source="blind_answer", help_text="Your answer, as stored.")
    agrees = serializers.BooleanField(source="blind_agrees", help_text="Whether it agrees with the writer's.")
    target = serializers.JSONField(source="example.target", help_text="The writer's answer, shown now.")


class RevealSerializer(serializers.Serializer):
    target = serializers.JSONField(help_text="The writer's answer.")


class ValidationItemSerializer(serializers.ModelSerializer):
    """An example to validate. While validation is blind for the caller, it carries
    neither the writer's answer (``target``) nor the model's (``prediction``) nor
    whether it fooled the model (``fooled``): all three are null until the caller
    has given their own answer (``blind_answer``). Needs ``context={"user": ...}``."""

    context = serializers.SerializerMethodField()
    round = serializers.IntegerField(source="round.number")
    blind = serializers.SerializerMethodField(help_text="Whether the caller must answer before seeing the target.")
    blind_answer = serializers.SerializerMethodField(help_text="The caller's stored blind answer, if any.")
    target = serializers.SerializerMethodField()
    prediction = serializers.SerializerMethodField()
    fooled = serializers.SerializerMethodField()

    class Meta:
        model = Example
        # Nothing about other validators' votes: on a gold item they would read differently
        # (its answers decide nothing, and it is served to many), so no item carries them.
        fields = ["id", "round", "context", "inputs", "blind", "blind_answer", "target", "prediction", "fooled"]
        read_only_fields = fields

    def to_representation(self, obj):
        # Decided once per item (it may cost a query): every field below reads it.
        obj.shown_to_caller = may_see_target(obj, self.context["user"],
                                             blind_answer_given=self.get_blind_answer(obj) is not None)
        return super().to_representation(obj)

    def _shown(self, obj) -> bool:
        return obj.shown_to_caller

    def get_context(self, obj) -> dict[str, str] | None:
        return obj.context.fields if obj.context_id else None

    def get_blind(self, obj) -> bool:
        return not self._shown(obj)

    def get_blind_answer(self, obj) -> dict | None:
        return getattr(obj, "my_blind_answer", None)

    def get_target(self, obj) -> dict | None:
        return obj.target if self._shown(obj) else None

    def get_prediction(self, obj) -> dict | None:
        return obj.prediction if self._shown(obj) else None

    def get_fooled(self, obj) -> bool | None:
        return obj.fooled if self._shown(obj) else None


class ExampleStateSerializer(serializers.ModelSerializer):
    class Meta:
        model = Example
        fields = ["id", "retracted", "flagged", "flag_reason", "validation_status", "validations_correct",
                  "validations_incorrect", "validations_flagged"]
        read_only_fields = fields


class DecisionSerializer(serializers.Serializer):
    """How the example is being decided (``services.reliability.decision_state``)."""

    policy = serializers.ChoiceField(choices=["fixed", "adaptive"])
    counted_votes = serializers.IntegerField(help_text="Counted correct/incorrect decisions so far.")
    posterior_right = serializers.FloatField(
        allow_null=True, help_text="Adaptive: the probability that the writer's answer is right, given the "
                                   "counted votes and the validators' estimated reliability.")
    prior_right = serializers.FloatField(allow_null=True, help_text="Adaptive: the same before any vote.")
    target_confidence = serializers.FloatField(allow_null=True)
    min_votes = serializers.IntegerField(allow_null=True)
    max_votes = serializers.IntegerField(allow_null=True)
    matching_needed = serializers.IntegerField(allow_null=True, help_text="Fixed: matching votes that decide.")


class ExampleDetailSerializer(serializers.ModelSerializer):
    """An example as its author and the task's researchers see it, with how it is being
    decided."""

    task = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    round = serializers.IntegerField(source="round.number", read_only=True)
    context = serializers.SerializerMethodField()
    decision = serializers.SerializerMethodField()

    class Meta:
        model = Example
        fields = ["id", "task", "round", "context", "inputs", "target", "prediction", "fooled", "retracted",
                  "flagged", "flag_reason", "validation_status", "validations_correct", "validations_incorrect",
                  "validations_flagged", "decision", "created_at"]
        read_only_fields = fields

    def get_context(self, obj) -> dict[str, str] | None:
        return obj.context.fields if obj.context_id else None

    @extend_schema_field(DecisionSerializer)
    def get_decision(self, obj) -> dict:
        return DecisionSerializer(reliability.decision_state(obj)).data


class ExampleListQuerySerializer(serializers.Serializer):
    """The examples list's filters, from the query string. A value outside a filter's
    set, a filter given twice and a parameter the list does not take are 400s that
    name the parameter and what it takes (a typo never reads as "no filter")."""

    PAGE_PARAMETERS = ("cursor", "page_size", "format")

    round = serializers.IntegerField(
        required=False, min_value=0, max_value=MAX_ROUND_NUMBER,
        help_text="A round number of the task (0 is the static round); 404 if the task has no such round.")
    split = serializers.ChoiceField(
        required=False, choices=Example.Split.choices,
        error_messages={"invalid_choice": f'"{{input}}" is not a split: one of {", ".join(Example.Split.values)}.'})
    status = serializers.ChoiceField(
        required=False, choices=Example.ValidationStatus.choices,
        error_messages={"invalid_choice": f'"{{input}}" is not a validation status: one of '
                                          f'{", ".join(Example.ValidationStatus.values)} (a retracted example '
                                          f'keeps its status and says "retracted": true).'},
        help_text="The validation status. Retracted examples are listed under theirs, with `retracted` true.")

    def to_internal_value(self, data):
        errors = {}
        for name in data:
            if name not in self.fields and name not in self.PAGE_PARAMETERS:
                taken = ", ".join([*self.fields, *self.PAGE_PARAMETERS[:2]])
                errors[name] = [f"Not a parameter of this list: it takes {taken}."]
            elif len(data.getlist(name)) > 1:
                errors[name] = ["Give it once."]
            elif data.get(name) == "" and isinstance(self.fields.get(name), serializers.ChoiceField):
                errors[name] = [self.fields[name].error_messages["invalid_choice"].format(input="")]
        if errors:
            raise serializers.ValidationError(errors)
        round_text = data.get("round")
        if round_text is not None and not (round_text.isascii() and round_text.isdigit()):
            raise serializers.ValidationError({"round": [f"Must be a round number: a whole number from 0 to "
                                                         f"{MAX_ROUND_NUMBER}."]})
        return super().to_internal_value(data)


class ExampleRowSerializer(serializers.Serializer):
    """An example as the task's researchers list it (``services.listing.task_examples``):
    what an export needs, with the annotator as a pseudonym (the one exports and round
    statistics use) and, for researchers, by username."""

    id = serializers.IntegerField()
    uid = serializers.UUIDField()
    external_uid = serializers.SerializerMethodField(help_text="Its id in the source it was imported from.")
    round = serializers.IntegerField(source="round.number")
    split = serializers.ChoiceField(choices=Example.Split.choices)
    source = serializers.ChoiceField(choices=Example.Source.choices, help_text="Written here, imported or seed.")
    context = serializers.IntegerField(source="context_id", allow_null=True, help_text="The context's id.")
    inputs = serializers.JSONField(help_text="What the annotator wrote, by input field.")
    target = serializers.JSONField(help_text="The writer's answer.")
    prediction = serializers.JSONField(allow_null=True, help_text="The round's (ensemble) prediction.")
    fooled = serializers.BooleanField(allow_null=True, help_text="Null when no model answered.")
    validation_status = serializers.ChoiceField(choices=Example.ValidationStatus.choices)
    validations_correct = serializers.IntegerField()
    validations_incorrect = serializers.IntegerField()
    validations_flagged = serializers.IntegerField()
    retracted = serializers.BooleanField()
    flagged = serializers.BooleanField()
    flag_reason = serializers.CharField(allow_blank=True)
    annotator = serializers.SerializerMethodField(
        help_text="A pseudonym, the same as in exports and round statistics; for an imported example, the one "
                  "its export carried.")
    annotator_username = serializers.CharField(
        allow_null=True, help_text="The writer's username (a deleted account's is its pseudonym, deleted-...); null "
                                   "for an imported example, or an account deleted before deleted accounts kept "
                                   "their examples.")
    created_at = serializers.DateTimeField()

    def get_external_uid(self, obj) -> str | None:
        return obj.external_uid or None

    def get_annotator(self, obj) -> str | None:
        return anonymise(obj.annotator_id) or obj.exported_annotator


class ValidatorReliabilitySerializer(serializers.Serializer):
    """A validator's estimated reliability on the task (researchers only)."""

    validator = serializers.CharField(source="validator.username")
    votes = serializers.IntegerField(help_text="Counted decisions the estimate rests on.")
    accuracy = serializers.FloatField(help_text="Estimated share of votes that match the truth.")
    accuracy_low = serializers.FloatField(help_text="The 95% interval's low end.")
    accuracy_high = serializers.FloatField(help_text="The 95% interval's high end.")
    sensitivity = serializers.FloatField(help_text="P(says correct | the writer is right).")
    specificity = serializers.FloatField(help_text="P(says incorrect | the writer is wrong).")
    weight = serializers.FloatField(help_text="How much one vote moves a decision (log odds); about 0 for "
                                              "someone who always says correct or answers at random.")
    fitted_at = serializers.DateTimeField()


class DecidedExampleSerializer(serializers.Serializer):
    """The example after a decision. A validator is told nothing of the other validators'
    votes or of the outcome (null): on a gold item they would read differently (its
    answers decide nothing), so no item tells them. A researcher's answer has them all."""

    id = serializers.IntegerField()
    retracted = serializers.BooleanField()
    flagged = serializers.BooleanField()
    flag_reason = serializers.CharField(allow_blank=True)
    validation_status = serializers.ChoiceField(choices=Example.ValidationStatus.choices, allow_null=True,
                                                help_text="The task's researchers only; null for a validator.")
    validations_correct = serializers.IntegerField(allow_null=True, help_text="The task's researchers only.")
    validations_incorrect = serializers.IntegerField(allow_null=True, help_text="The task's researchers only.")
    validations_flagged = serializers.IntegerField(allow_null=True, help_text="The task's researchers only.")


class ValidatedSerializer(serializers.Serializer):
    """The answer to a decision (from ``validation.Validated``): the decision, whether it
    counts and why not, told alike on every item (``gold.told``)."""

    example = serializers.SerializerMethodField()
    label = serializers.CharField(source="validation.label")
    mode = serializers.CharField(source="validation.mode")
    counted = serializers.SerializerMethodField(help_text="Whether the decision counts towards the example's outcome.")
    not_counted_because = serializers.SerializerMethodField(help_text="Why it does not count (empty when it does).")
    note = serializers.SerializerMethodField(help_text="What the validator reads about a decision that does not count.")
    session = SessionSerializer()

    @extend_schema_field(DecidedExampleSerializer)
    def get_example(self, obj) -> dict:
        example = obj.example
        shown = {"id": example.pk, "retracted": example.retracted, "flagged": example.flagged,
                 "flag_reason": example.flag_reason, "validation_status": None, "validations_correct": None,
                 "validations_incorrect": None, "validations_flagged": None}
        if obj.validation.mode == Validation.Mode.OWNER:
            shown.update(validation_status=example.validation_status,
                         validations_correct=example.validations_correct,
                         validations_incorrect=example.validations_incorrect,
                         validations_flagged=example.validations_flagged)
        return DecidedExampleSerializer(shown).data

    def get_counted(self, obj) -> bool:
        return told(obj.validation)[0]

    @extend_schema_field(serializers.ChoiceField(choices=[c for c in Validation.NotCounted.values
                                                          if c != Validation.NotCounted.GOLD]))
    def get_not_counted_because(self, obj) -> str:
        return told(obj.validation)[1]

    def get_note(self, obj) -> str:
        return trust.explain(Validation(example=obj.example, validator=obj.validation.validator,
                                        not_counted_because=told(obj.validation)[1]))


VERIFIED_RATE_HELP = ("Verified model-fooling examples / examples collected; null until a collected example "
                      "is decided (verified or rejected).")


class RoundStatsFieldsMixin(serializers.Serializer):
    collected = serializers.IntegerField(source="n_collected", read_only=True)
    fooled = serializers.IntegerField(source="n_fooled", read_only=True)
    verified = serializers.IntegerField(source="n_verified", read_only=True)
    verified_fooled = serializers.IntegerField(source="n_verified_fooled", read_only=True)
    validations = serializers.IntegerField(source="n_validations", read_only=True)
    model_error_rate = serializers.SerializerMethodField()
    verified_model_error_rate = serializers.SerializerMethodField(help_text=VERIFIED_RATE_HELP)

    def get_model_error_rate(self, obj) -> float | None:
        return obj.n_fooled / obj.n_collected if obj.n_collected else None

    def get_verified_model_error_rate(self, obj) -> float | None:
        return verified_rate(obj.n_verified_fooled, obj.n_collected, obj.n_verified + obj.n_rejected)


class RoundSerializer(RoundStatsFieldsMixin, serializers.ModelSerializer):
    """A round with its counts (its counters, through ``services.stats.with_counts``)."""

    task = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    target_models = serializers.SlugRelatedField(slug_field="name", many=True, read_only=True)

    class Meta:
        model = Round
        fields = ["task", "number", "status", "ensemble_mode", "description", "target_models",
                  "starts_at", "ends_at", "opened_at", "closed_at", "collected", "fooled", "verified",
                  "verified_fooled", "validations", "model_error_rate", "verified_model_error_rate"]
        read_only_fields = fields


class AnnotatorStatsSerializer(serializers.Serializer):
    annotator = serializers.CharField(allow_null=True, help_text="A pseudonym.")
    collected = serializers.IntegerField()
    fooled = serializers.IntegerField()
    verified_fooled = serializers.IntegerField()
    model_error_rate = serializers.FloatField(allow_null=True)
    verified_model_error_rate = serializers.FloatField(allow_null=True)
    blind_answers = serializers.IntegerField(help_text="Blind answers validators gave to this writer's examples.")
    blind_agreement = serializers.FloatField(allow_null=True,
                                             help_text="Share of those that agreed with the writer's answer.")


class RoundStatsSerializer(serializers.Serializer):
    task = serializers.CharField()
    round = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Round.Status.choices)
    collected = serializers.IntegerField()
    fooled = serializers.IntegerField()
    verified = serializers.IntegerField()
    verified_fooled = serializers.IntegerField()
    validations = serializers.IntegerField()
    model_error_rate = serializers.FloatField(allow_null=True)
    verified_model_error_rate = serializers.FloatField(allow_null=True, help_text=VERIFIED_RATE_HELP)
    blind_answers = serializers.IntegerField()
    blind_agreement = serializers.FloatField(allow_null=True,
                                             help_text="Share of blind answers that agreed with the writer's.")
    target_models = serializers.ListField(child=serializers.CharField())
    annotators = AnnotatorStatsSerializer(
        many=True, help_text="The writers with the most verified model-fooling examples (at most 100).")
    annotators_total = serializers.IntegerField(help_text="How many writers have collected examples in the round.")


class RoundCreateSerializer(serializers.Serializer):
    """A new draft round. Its status changes only through open and close (or promote)."""

    number = StrictIntegerField(required=False, min_value=1, max_value=100_000,
                                help_text="Default: the task's last round number + 1.")
    target_models = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=MAX_DATABASE_ID), required=False, max_length=5,
        help_text="Ids of ready models of this task.")
    ensemble_mode = StrictChoiceField(choices=Round.EnsembleMode.choices, required=False,
                                      default=Round.EnsembleMode.SINGLE)
    description = StrictCharField(required=False, allow_blank=True, max_length=2000, default="")


class RoundTargetsSerializer(serializers.Serializer):
    target_models = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=MAX_DATABASE_ID), min_length=1, max_length=5,
        help_text="Ids of ready models of this task.")
    ensemble_mode = StrictChoiceField(choices=Round.EnsembleMode.choices, required=False)
