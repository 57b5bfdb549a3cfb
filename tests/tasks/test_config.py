import copy

import pytest
from django.core.exceptions import ValidationError

from tasks.config import CLASSIFICATION, EXTRACTIVE_QA, validate_task_config
from tasks.services import DEFAULT_TASK_SLUGS, load_definition


@pytest.mark.parametrize("slug", DEFAULT_TASK_SLUGS)
def test_the_four_task_definitions_pass_the_schema(slug):
    definition = load_definition(slug)
    config = validate_task_config(definition["task_type"], definition["config"])
    assert config.num_matching_validations == 3
    assert config.max_input_length == 1000
    assert config.context_sampling == "least_used"


def test_defaults_are_filled_in():
    config = validate_task_config(CLASSIFICATION, {
        "context_fields": [], "input_fields": [{"name": "text"}], "model_inputs": ["text"],
        "labels": [{"name": "yes"}, {"name": "no"}],
    })
    assert config.model_wrong_metric == {"type": "exact_match"}
    assert config.blind_validation is True
    assert config.ml_spec_dict() == {
        "kind": "classification", "labels": ["yes", "no"], "input_fields": ["text"], "max_chars": 1000,
        "field_max_chars": {},
    }


def test_qa_threshold_defaults_to_0_4_and_spec_is_extractive():
    definition = load_definition("qa")
    config = validate_task_config(EXTRACTIVE_QA, definition["config"])
    assert config.metric_threshold == 0.4
    assert config.ml_spec_dict()["kind"] == "extractive_qa"
    assert config.ml_spec_dict()["input_fields"] == ["passage", "question"]
    # Passages come from data sets: longer than an annotator's 1,000 characters.
    assert config.ml_spec_dict()["field_max_chars"] == {"passage": 20000}
    import ml

    spec = ml.TaskSpec.from_dict(config.ml_spec_dict())
    spec.validate_inputs({"passage": "word " * 1000, "question": "Which word?"})
    with pytest.raises(ml.InputError):
        spec.validate_inputs({"passage": "short", "question": "why? " * 300})


def messages(exc_info):
    return " ".join(exc_info.value.message_dict["config"])


def nli():
    return copy.deepcopy(load_definition("nli")["config"])


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda c: c.pop("input_fields"), "'input_fields' is a required property"),
        (lambda c: c.update(num_matching_validations=0), "config.num_matching_validations"),
        (lambda c: c.update(num_matching_validations="3"), "is not of type 'integer'"),
        (lambda c: c.update(context_sampling="random"), "config.context_sampling"),
        (lambda c: c.update(model_wrong_metric={"type": "bleu"}), "config.model_wrong_metric.type"),
        (lambda c: c.update(model_wrong_metric={"type": "string_f1", "threshold": 0.4}),
         "classification tasks use exact_match"),
        (lambda c: c.update(labels=[{"name": "entailment"}]), "at least two labels"),
        (lambda c: c.update(labels=[{"name": "a"}, {"name": "a"}]), "label names must be unique"),
        (lambda c: c.update(model_inputs=["premise", "nope"]), "'nope' is not a context or input field"),
        (lambda c: c.update(input_fields=[{"name": "premise"}]), "repeated: premise"),
        (lambda c: c.update(max_input_length=-5), "config.max_input_length"),
        (lambda c: c.update(unexpected=True), "Additional properties are not allowed"),
        (lambda c: c["input_fields"][0].update(name="Bad Name"), "config.input_fields.0.name"),
    ],
)
def test_bad_classification_configs_get_clear_messages(mutate, expected):
    config = nli()
    mutate(config)
    with pytest.raises(ValidationError) as exc_info:
        validate_task_config(CLASSIFICATION, config)
    assert expected in messages(exc_info)


def test_bad_qa_configs():
    config = copy.deepcopy(load_definition("qa")["config"])
    config["labels"] = [{"name": "x"}, {"name": "y"}]
    config["model_inputs"] = ["question", "passage"]
    with pytest.raises(ValidationError) as exc_info:
        validate_task_config(EXTRACTIVE_QA, config)
    text = messages(exc_info)
    assert "an extractive QA task has no labels" in text
    assert "passage first" in text

    config = copy.deepcopy(load_definition("qa")["config"])
    config["answer_context_field"] = "title_missing"
    with pytest.raises(ValidationError) as exc_info:
        validate_task_config(EXTRACTIVE_QA, config)
    assert "'title_missing' is not a context field" in messages(exc_info)


def test_config_must_be_an_object_and_type_known():
    with pytest.raises(ValidationError) as exc_info:
        validate_task_config(CLASSIFICATION, ["not", "an", "object"])
    assert "must be a JSON object" in messages(exc_info)
    with pytest.raises(ValidationError) as exc_info:
        validate_task_config("translation", nli())
    assert "Unknown task type" in str(exc_info.value)


def test_model_clean_uses_the_schema(db):
    from tasks.models import Task

    task = Task(slug="bad", name="Bad", task_type=CLASSIFICATION, config={"input_fields": []})
    with pytest.raises(ValidationError) as exc_info:
        task.full_clean()
    assert "config" in exc_info.value.message_dict


def test_a_task_bounds_the_sizes_of_submitted_models():
    from ml.submissions import ConfigBounds
    from tasks.config import MODEL_LIMIT_CEILINGS

    base = {"context_fields": [], "input_fields": [{"name": "text"}], "model_inputs": ["text"],
            "labels": [{"name": "yes"}, {"name": "no"}]}
    assert validate_task_config(CLASSIFICATION, base).submission_bounds() == ConfigBounds()
    config = validate_task_config(CLASSIFICATION, {**base, "model_limits": {"max_layers": 12}})
    assert config.submission_bounds() == ConfigBounds(max_layers=12)
    assert set(MODEL_LIMIT_CEILINGS) == set(ConfigBounds.__dataclass_fields__)  # every bound can be set
    for limits, message in [({"max_floors": 3}, "Additional properties are not allowed"),
                            ({"max_layers": 1000}, "1000 is greater than the maximum of 128"),
                            ({"max_vocab_size": 0}, "0 is less than the minimum of 1")]:
        with pytest.raises(ValidationError, match=message):
            validate_task_config(CLASSIFICATION, {**base, "model_limits": limits})


@pytest.mark.django_db
def test_tasks_made_before_the_default_moved_keep_fixed_three_matching():
    """Migration tasks 0007: a task whose config left the validation rule to the default
    (fixed 3-matching then) keeps that rule; what a config says itself is kept; a new
    task gets the adaptive default."""
    import importlib

    from django.apps import apps

    from tasks.models import Task

    pin = importlib.import_module("tasks.migrations.0007_pin_validation_policy").pin
    base = load_definition("sentiment")["config"]
    made = {
        "bare": Task.objects.create(slug="bare", name="Bare", task_type=CLASSIFICATION, config=copy.deepcopy(base)),
        "gold": Task.objects.create(slug="gold", name="Gold", task_type=CLASSIFICATION,
                                    config={**base, "validation": {"gold_rate": 0.2}}),
        "chose": Task.objects.create(slug="chose", name="Chose", task_type=CLASSIFICATION, config={
            **base, "validation": {"policy": "adaptive", "target_confidence": 0.99}}),
    }
    pin(apps, None)
    for task in made.values():
        task.refresh_from_db()
    bare = made["bare"].parsed_config
    assert (bare.validation["policy"], bare.num_matching_validations, bare.adaptive_validation) == ("fixed", 3, False)
    assert made["gold"].config["validation"] == {"gold_rate": 0.2, "policy": "fixed", "target_confidence": 0.998,
                                                 "min_votes": 1}
    assert made["chose"].config["validation"] == {"policy": "adaptive", "target_confidence": 0.99, "min_votes": 1}
    new = Task(slug="new", name="New", task_type=CLASSIFICATION, config=copy.deepcopy(base))
    assert new.parsed_config.adaptive_validation


def test_the_licence_and_language_of_a_tasks_releases():
    base = {"context_fields": [], "input_fields": [{"name": "text"}], "model_inputs": ["text"],
            "labels": [{"name": "yes"}, {"name": "no"}]}
    config = validate_task_config(CLASSIFICATION, base)
    assert (config.license, config.language) == ("unspecified", ["en"])
    config = validate_task_config(CLASSIFICATION, {**base, "license": "cc-by-sa-4.0", "language": ["de", "pt-BR"]})
    assert (config.license, config.language) == ("cc-by-sa-4.0", ["de", "pt-BR"])
    with pytest.raises(ValidationError) as bad:
        validate_task_config(CLASSIFICATION, {**base, "license": "CC-BY"})
    assert "config.license: 'CC-BY' is not one of ['unspecified', 'cc0-1.0', 'cc-by-4.0'" in str(bad.value)
    with pytest.raises(ValidationError, match="config.language.0: 'English' does not match"):
        validate_task_config(CLASSIFICATION, {**base, "language": ["English"]})
    with pytest.raises(ValidationError, match="'licence' was unexpected"):
        validate_task_config(CLASSIFICATION, {**base, "licence": "mit"})
