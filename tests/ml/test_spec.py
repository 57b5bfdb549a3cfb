"""TaskSpec: validation of specs and of user inputs (before any tokenisation)."""

from __future__ import annotations

import pytest

from ml import InputError, TaskSpec

NLI = TaskSpec(
    kind="classification",
    labels=["entailment", "neutral", "contradiction"],
    input_fields=["premise", "hypothesis"],
    max_chars=50,
)


def test_round_trip():
    assert TaskSpec.from_dict(NLI.to_dict()) == NLI
    qa = TaskSpec(kind="extractive_qa", max_tokens=384, field_max_chars={"passage": 5000})
    assert qa.input_fields == ["passage", "question"]
    assert TaskSpec.from_dict(qa.to_dict()) == qa
    assert qa.max_chars_for("passage") == 5000
    assert qa.max_chars_for("question") == 1000


def test_valid_inputs_are_returned_unchanged_and_extra_keys_dropped():
    inputs = {"premise": "  A man sleeps. ", "hypothesis": "He rests.", "context_id": 7}
    assert NLI.validate_inputs(inputs) == {"premise": "  A man sleeps. ", "hypothesis": "He rests."}


@pytest.mark.parametrize(
    "inputs, field, words",
    [
        ({"hypothesis": "x"}, "premise", "required"),
        ({"premise": "", "hypothesis": "x"}, "premise", "empty"),
        ({"premise": " \n\t ", "hypothesis": "x"}, "premise", "empty"),
        ({"premise": "x", "hypothesis": "y" * 51}, "hypothesis", "limit is 50"),
        ({"premise": 3, "hypothesis": "x"}, "premise", "text"),
        ({"premise": None, "hypothesis": "x"}, "premise", "required"),
    ],
)
def test_bad_inputs(inputs, field, words):
    with pytest.raises(InputError) as info:
        NLI.validate_inputs(inputs)
    assert info.value.field == field
    assert words in info.value.message


def test_max_chars_boundary_is_inclusive():
    assert NLI.validate_inputs({"premise": "p" * 50, "hypothesis": "h"})["premise"] == "p" * 50


def test_unknown_label():
    assert NLI.label_index("neutral") == 1
    with pytest.raises(InputError) as info:
        NLI.label_index("maybe")
    assert info.value.field == "label"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"kind": "regression"},
        {"kind": "classification", "labels": ["only"], "input_fields": ["text"]},
        {"kind": "classification", "labels": ["a", "a"], "input_fields": ["text"]},
        {"kind": "classification", "labels": ["a", "b"], "input_fields": []},
        {"kind": "classification", "labels": ["a", "b"], "input_fields": ["x", "y", "z"]},
        {"kind": "extractive_qa", "labels": ["a"]},
        {"kind": "extractive_qa", "input_fields": ["context", "question"]},
        {"kind": "classification", "labels": ["a", "b"], "input_fields": ["t"], "max_tokens": 4},
    ],
)
def test_bad_specs(kwargs):
    with pytest.raises(InputError):
        TaskSpec(**kwargs)


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(InputError):
        TaskSpec.from_dict({**NLI.to_dict(), "colour": "blue"})
