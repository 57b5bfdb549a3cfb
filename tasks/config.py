"""The task config: what a task asks annotators for and how it is judged.

A config is JSON checked in two steps: a JSON Schema for shape and types,
then cross-field rules (field names unique, model inputs refer to known
fields, the output agrees with the task type). ``validate_task_config``
returns a ``TaskConfig`` with defaults filled in, or raises Django's
``ValidationError`` with messages that name the offending path.

``TaskConfig`` is also the one place where a task's rules for data live: what
an annotator's inputs, answer and a context must look like
(``clean_inputs``, ``clean_target``, ``clean_context_fields``), when two answers
agree and so when the model was fooled (``answers_agree``, ``model_fooled``),
and the bounds the ML spec gets (``ml_spec_dict``). The API, the importer,
``Context.clean``, the validation flow and the evaluations all call these. What
depends on the kind of answer (a label, a span...) is the task kind's
(``TaskConfig.kind``, ``tasks.kinds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import jsonschema
from django.core.exceptions import ValidationError

from core.errors import InvalidInput
from ml.submissions import ConfigBounds

from .endpoint_config import ENDPOINT_DEFAULTS, ENDPOINT_SCHEMA, endpoint_problems
from .kinds import KINDS, ClassificationKind, ExtractiveQAKind, TaskKind, not_a_span  # noqa: F401 (re-exported)
from .licenses import DEFAULT_LANGUAGES, DEFAULT_LICENSE, LICENSES
from .onboarding_config import (  # noqa: F401
    JUDGE_ANSWERS,
    ONBOARDING_DEFAULTS,
    ONBOARDING_KINDS,
    ONBOARDING_SCHEMA,
    onboarding_problems,
)
from .onboarding_config import with_defaults as onboarding_defaults

# The built-in kinds' names (what tests and fixtures spell); product code asks the kind.
CLASSIFICATION = ClassificationKind.name
EXTRACTIVE_QA = ExtractiveQAKind.name
# The Django model's choices: the kinds built in (a kind registered later, by a test, is
# accepted by ``validate_task_config`` but not offered in forms).
TASK_TYPES = [(name, kind.title) for name, kind in KINDS.items()]
SAMPLING_STRATEGIES = ["least_used", "uniform", "least_fooled"]
METRICS = ["exact_match", "string_f1"]
# How an example is decided: ``fixed`` when ``num_matching_validations`` counted votes
# agree; ``adaptive`` as soon as the posterior that the writer is right (or wrong),
# from the votes and the validators' estimated reliability, reaches
# ``target_confidence`` (``annotation.reliability_model``), and by a researcher after
# ``max_votes`` votes without a decision.
VALIDATION_POLICIES = ["fixed", "adaptive"]
# The default is bench/validation_frontier.py's pick (docs/annotation.md), with at least two
# counted votes: one account, however well it did on gold items, never decides alone.
VALIDATION_DEFAULTS = {"policy": "adaptive", "target_confidence": 0.9, "min_votes": 2, "max_votes": 5,
                       "gold_rate": 0.1}
# Whose votes decide: ``decides`` "all" examples (the default) or only "paid" ones
# need a trusted validator (``annotation.trust``); ``min_reference_answers``: of the
# checked answers, how many must be on ordinary examples that others decided after the
# answer (gold items can be learnt; such a decision cannot be known in advance);
# ``gold_*``: below ``gold_min_agreement`` on at least ``gold_min_answers`` gold items,
# a validator's votes stop counting on the task (and a crowd worker is blocked there).
TRUST_DEFAULTS = {"min_answers": 20, "min_agreement": 0.8, "min_reference_answers": 5, "decides": "all",
                  "gold_min_answers": 5, "gold_min_agreement": 0.6}

# The sizes a submitted model's config.json may declare (``ml.submissions.ConfigBounds``,
# whose defaults apply to the names a task's ``model_limits`` leaves out), and the
# most a task may allow for each.
MODEL_LIMIT_CEILINGS = {
    "max_layers": 128,
    "max_hidden_size": 16384,
    "max_attention_heads": 256,
    "max_vocab_size": 1_000_000,
    "max_positions": 65536,
    "max_intermediate_size": 65536,
    "max_type_vocab_size": 1024,
    "max_inner_groups": 64,
}

_NAME = {"type": "string", "pattern": "^[a-z][a-z0-9_]{0,39}$"}
_FIELD = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": _NAME,
        "label": {"type": "string", "maxLength": 100},
        "placeholder": {"type": "string", "maxLength": 200},
    },
}
CONFIG_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["context_fields", "input_fields", "model_inputs"],
    "properties": {
        "context_fields": {"type": "array", "items": _FIELD, "maxItems": 5},
        "input_fields": {"type": "array", "items": _FIELD, "minItems": 1, "maxItems": 5},
        "labels": {
            "type": "array",
            "maxItems": 20,
            "items": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z][a-z0-9_-]{0,39}$"},
                    "description": {"type": "string", "maxLength": 300},
                },
            },
        },
        "answer_context_field": _NAME,
        "model_inputs": {"type": "array", "items": _NAME, "minItems": 1, "maxItems": 2},
        "model_wrong_metric": {
            "type": "object",
            "required": ["type"],
            "additionalProperties": False,
            "properties": {
                "type": {"enum": METRICS},
                "threshold": {"type": "number", "minimum": 0, "maximum": 1},
            },
        },
        "num_matching_validations": {"type": "integer", "minimum": 1, "maximum": 10},
        "context_sampling": {"enum": SAMPLING_STRATEGIES},
        "max_input_length": {"type": "integer", "minimum": 1, "maximum": 20000},
        "blind_validation": {"type": "boolean"},
        "validator_trust": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "min_answers": {"type": "integer", "minimum": 1, "maximum": 10000},
                "min_agreement": {"type": "number", "minimum": 0.5, "maximum": 1},
                "min_reference_answers": {"type": "integer", "minimum": 0, "maximum": 10000},
                "decides": {"enum": ["all", "paid"]},
                "gold_min_answers": {"type": "integer", "minimum": 1, "maximum": 10000},
                "gold_min_agreement": {"type": "number", "minimum": 0, "maximum": 1},
            },
        },
        "validation": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "policy": {"enum": VALIDATION_POLICIES},
                "target_confidence": {"type": "number", "exclusiveMinimum": 0.5, "exclusiveMaximum": 1},
                "min_votes": {"type": "integer", "minimum": 1, "maximum": 20},
                "max_votes": {"type": "integer", "minimum": 1, "maximum": 20},
                "gold_rate": {"type": "number", "minimum": 0, "maximum": 1},
            },
        },
        "crowd_limits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "examples_per_assignment": {"type": "integer", "minimum": 1, "maximum": 1000},
                "unconfirmed_per_hit": {"type": "integer", "minimum": 1, "maximum": 1000},
            },
        },
        "license": {"enum": list(LICENSES)},
        "language": {"type": "array", "minItems": 1, "maxItems": 20, "uniqueItems": True,
                     "items": {"type": "string", "pattern": "^[a-z]{2,3}(-[A-Za-z0-9]{2,8})?$"}},
        "model_limits": {
            "type": "object",
            "additionalProperties": False,
            "properties": {name: {"type": "integer", "minimum": 1, "maximum": ceiling}
                           for name, ceiling in MODEL_LIMIT_CEILINGS.items()},
        },
        "endpoint_models": ENDPOINT_SCHEMA,
        "onboarding": ONBOARDING_SCHEMA,
    },
}
DEFAULTS = {
    "labels": [],
    "model_wrong_metric": {"type": "exact_match"},
    "num_matching_validations": 3,
    "context_sampling": "least_used",
    "max_input_length": 1000,
    "blind_validation": True,
    "validator_trust": TRUST_DEFAULTS,
    "validation": VALIDATION_DEFAULTS,
    "model_limits": {},
    "crowd_limits": {},
    "endpoint_models": ENDPOINT_DEFAULTS,
    "license": DEFAULT_LICENSE,
    "language": DEFAULT_LANGUAGES,
    "onboarding": None,
}
DEFAULT_F1_THRESHOLD = 0.4
# Contexts (passages, premises) come from researchers and data sets, not from
# annotators: they get a generous bound of their own, not max_input_length.
CONTEXT_MAX_CHARS = 20000


@dataclass(frozen=True)
class TaskConfig:
    task_type: str
    context_fields: list[dict]
    input_fields: list[dict]
    model_inputs: list[str]
    labels: list[dict] = field(default_factory=list)
    answer_context_field: str | None = None
    model_wrong_metric: dict = field(default_factory=lambda: {"type": "exact_match"})
    num_matching_validations: int = 3
    context_sampling: str = "least_used"
    max_input_length: int = 1000
    blind_validation: bool = True
    # Who may decide an example (besides researchers and the MTurk workers of a
    # validation batch): a site account with at least ``min_answers`` answers on gold
    # items and on examples that others decided afterwards (``min_reference_answers`` of
    # them at least), agreeing at ``min_agreement`` or more, each part, and better than
    # always giving one answer would (``annotation.trust``); ``TRUST_DEFAULTS``.
    validator_trust: dict = field(default_factory=lambda: dict(DEFAULTS["validator_trust"]))
    # How examples are decided (``VALIDATION_POLICIES``): the policy and, for
    # ``adaptive``, its target confidence and vote bounds.
    validation: dict = field(default_factory=lambda: dict(VALIDATION_DEFAULTS))
    # Bounds on the sizes a submitted model's config.json declares (layers, hidden size,
    # heads, vocabulary, positions...), over ``ml.submissions.ConfigBounds``'s defaults.
    model_limits: dict = field(default_factory=dict)
    # Bounds on what made-up MTurk worker ids can do with a public HIT id
    # (``crowd.assignments``): ``examples_per_assignment``, the most examples one
    # assignment may write, retracted ones included (default: twice the HIT's own
    # number, never fewer than it); ``unconfirmed_per_hit``, the most assignments
    # MTurk has not confirmed that may be open on one HIT at once (default: twice the
    # HIT's assignments, plus 2).
    crowd_limits: dict = field(default_factory=dict)
    # What the task's data releases say about it (``leaderboard.releases``): the licence
    # (a key of ``LICENSES``) and the languages of its text (ISO 639 codes).
    license: str = DEFAULT_LICENSE
    language: list[str] = field(default_factory=lambda: list(DEFAULT_LANGUAGES))
    # How models behind endpoints are asked (``ENDPOINT_DEFAULTS``).
    endpoint_models: dict = field(default_factory=lambda: dict(ENDPOINT_DEFAULTS))
    # The onboarding quiz (``_ONBOARDING``, with ``ONBOARDING_DEFAULTS``), or None: the
    # task asks for none. ``annotation.onboarding`` runs it and enforces it.
    onboarding: dict | None = None

    @property
    def onboarding_needed(self) -> int:
        """How many of a try's items it must get right (0: no onboarding)."""
        if not self.onboarding:
            return 0
        items = self.onboarding["per_try"]
        return min(items, math.ceil(self.onboarding["pass_mark"] * items - 1e-9))

    def submission_bounds(self):
        """The ``ml.submissions.ConfigBounds`` a submitted model's config is checked against."""
        return ConfigBounds.from_dict(self.model_limits)

    @property
    def adaptive_validation(self) -> bool:
        return self.validation["policy"] == "adaptive"

    @property
    def kind(self) -> TaskKind:
        """The task's kind (``tasks.kinds``), bound to this config."""
        return KINDS[self.task_type](self)

    @property
    def label_names(self) -> list[str]:
        return self.kind.label_names

    @property
    def context_field_names(self) -> list[str]:
        return [f["name"] for f in self.context_fields]

    @property
    def input_field_names(self) -> list[str]:
        return [f["name"] for f in self.input_fields]

    @property
    def metric_threshold(self) -> float | None:
        if self.model_wrong_metric["type"] == "string_f1":
            return self.model_wrong_metric.get("threshold", DEFAULT_F1_THRESHOLD)
        return None

    # --- the task's data rules ------------------------------------------------------

    def clean_inputs(self, inputs) -> dict:
        """An annotator's inputs, checked: exactly the task's input fields, each
        non-empty text of at most ``max_input_length`` characters. Raises
        ``InvalidInput`` naming each bad field (``inputs.<name>``)."""
        names = self.input_field_names
        if not isinstance(inputs, dict):
            raise InvalidInput.field("inputs", f"Must be an object with the fields {names}.")
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise InvalidInput.field("inputs", f"Unknown fields {unknown}; expected {names}.")
        errors, cleaned = {}, {}
        for name in names:
            problem = text_problem(inputs.get(name), self.max_input_length, required=True)
            if problem:
                errors[f"inputs.{name}"] = [problem]
            else:
                cleaned[name] = inputs[name]
        if errors:
            raise InvalidInput(errors)
        return cleaned

    def clean_context_fields(self, fields) -> dict:
        """A context's fields, checked: exactly the task's context fields, each text
        of at most ``CONTEXT_MAX_CHARS``; those the model reads must not be empty."""
        expected = self.context_field_names
        if not isinstance(fields, dict):
            raise InvalidInput.field("fields", f"Must be an object with the fields {expected}.")
        missing = [n for n in expected if n not in fields]
        unknown = sorted(set(fields) - set(expected))
        if missing or unknown:
            raise InvalidInput.field("fields", (
                f"Expected the fields {expected}; missing {missing}, unknown {unknown}."))
        errors = {}
        for name in expected:
            problem = text_problem(fields[name], CONTEXT_MAX_CHARS, required=name in self.model_inputs)
            if problem:
                errors[f"fields.{name}"] = [problem]
        if errors:
            raise InvalidInput(errors)
        return {name: fields[name] for name in expected}

    def clean_target(self, target, context_fields: dict | None, *, field: str = "target",
                     need_start: bool = True) -> dict:
        """An answer to an example, checked by the task's kind: ``{"label"}`` from the
        task's labels, or for QA ``{"text", "start"}``, the passage's text at that
        character offset. Without ``need_start`` a QA answer may be the text alone (a
        validator's blind answer), and must then occur in the passage."""
        if not isinstance(target, dict):
            raise InvalidInput.field(field, "Must be an object.")
        return self.kind.clean_target(target, context_fields, field=field, need_start=need_start)

    def answers_agree(self, answer: dict, other: dict) -> bool:
        """Whether two answers (targets or predictions) say the same thing, by the
        task's metric: the same label; for QA a SQuAD exact match, or token F1 at
        least the threshold (``string_f1``). The one rule behind "fooled" and behind
        a blind validator agreeing with the writer."""
        return self.kind.answers_agree(answer, other)

    def model_fooled(self, target: dict, prediction: dict) -> bool:
        """The model got the writer's example wrong: its answer disagrees with the target."""
        return not self.answers_agree(target, prediction)

    def ml_spec_dict(self) -> dict:
        """The Django-free description that ``ml.TaskSpec.from_dict`` takes."""
        kind = self.kind
        names = kind.ml_field_names()
        contexts = set(self.context_field_names)
        return {
            "kind": kind.ml_kind,
            "labels": self.label_names,
            "input_fields": list(names.values()),
            "max_chars": self.max_input_length,
            "field_max_chars": {names[f]: CONTEXT_MAX_CHARS for f in self.model_inputs if f in contexts},
        }


def text_problem(value, max_length: int, *, required: bool) -> str | None:
    """What is wrong with a text value, or None: text, no NUL, at most ``max_length``
    characters, and (``required``) not empty or blank."""
    if value is None:
        return "This field is required."
    if not isinstance(value, str):
        return "Must be text."
    if required and not value.strip():
        return "Must not be empty."
    if len(value) > max_length:
        return f"Must be at most {max_length} characters (got {len(value)})."
    if "\x00" in value:
        return "Must not contain NUL characters."
    return None


def _path(error: jsonschema.ValidationError) -> str:
    parts = ["config", *[str(p) for p in error.absolute_path]]
    return ".".join(parts)


def validate_task_config(task_type: str, config) -> TaskConfig:
    """Check ``config`` for a task of ``task_type``; return it with defaults."""
    kind = KINDS.get(task_type)
    if kind is None:
        raise ValidationError({"task_type": f"Unknown task type {task_type!r}."})
    if not isinstance(config, dict):
        raise ValidationError({"config": "The config must be a JSON object."})
    validator = jsonschema.Draft202012Validator(CONFIG_SCHEMA)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        raise ValidationError({"config": [f"{_path(e)}: {e.message}" for e in errors]})

    merged = {**DEFAULTS, **config}
    merged["validator_trust"] = {**DEFAULTS["validator_trust"], **merged["validator_trust"]}
    merged["validation"] = {**VALIDATION_DEFAULTS, **merged["validation"]}
    merged["language"] = list(merged["language"])
    merged["endpoint_models"] = {**ENDPOINT_DEFAULTS, **merged["endpoint_models"]}
    problems: list[str] = []
    context_names = [f["name"] for f in merged["context_fields"]]
    input_names = [f["name"] for f in merged["input_fields"]]
    all_names = context_names + input_names
    duplicates = sorted({n for n in all_names if all_names.count(n) > 1})
    if duplicates:
        problems.append(f"config: field names must be unique; repeated: {', '.join(duplicates)}.")
    label_names = [label["name"] for label in merged["labels"]]
    if len(set(label_names)) != len(label_names):
        problems.append("config.labels: label names must be unique.")
    for name in merged["model_inputs"]:
        if name not in all_names:
            problems.append(f"config.model_inputs: {name!r} is not a context or input field.")
    if len(set(merged["model_inputs"])) != len(merged["model_inputs"]):
        problems.append("config.model_inputs: a field is listed twice.")

    validation = merged["validation"]
    if validation["min_votes"] > validation["max_votes"]:
        problems.append(f"config.validation: min_votes ({validation['min_votes']}) is more than max_votes "
                        f"({validation['max_votes']}).")

    problems += endpoint_problems(merged, kind)
    problems += kind.config_problems(merged, context_names, label_names)
    if problems:
        raise ValidationError({"config": problems})

    if merged["onboarding"] is not None:
        merged["onboarding"] = onboarding_defaults(merged["onboarding"])
    parsed = TaskConfig(task_type=task_type, **merged)
    problems = onboarding_problems(parsed)
    if problems:
        raise ValidationError({"config": problems})
    return parsed

