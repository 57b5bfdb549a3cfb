"""Task specification shared by training, prediction and explanation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError

CLASSIFICATION = "classification"
EXTRACTIVE_QA = "extractive_qa"
KINDS = (CLASSIFICATION, EXTRACTIVE_QA)

#: Extractive QA always reads these two fields (the passage is the context).
QA_FIELDS = ["passage", "question"]


@dataclass
class TaskSpec:
    """What a model reads and predicts.

    ``input_fields`` are in model order: for a pair task ``["premise", "hypothesis"]``
    is encoded as ``[CLS] premise [SEP] hypothesis [SEP]``.  For extractive QA the
    fields are always ``["passage", "question"]`` (encoded question first, passage
    second, the usual SQuAD layout).

    ``max_chars`` limits every field and is checked before tokenisation;
    ``field_max_chars`` overrides it per field (QA passages are usually longer than
    questions).  ``max_tokens`` is the model's sequence length; longer QA passages
    are read in overlapping windows, longer classification inputs are truncated.
    """

    kind: str
    labels: list[str] = field(default_factory=list)
    input_fields: list[str] = field(default_factory=list)
    max_chars: int = 1000
    max_tokens: int = 256
    field_max_chars: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError("kind", f"must be one of {', '.join(KINDS)}, got {self.kind!r}")
        self.labels = list(self.labels)
        self.input_fields = list(self.input_fields)
        self.field_max_chars = dict(self.field_max_chars)
        if self.kind == CLASSIFICATION:
            if len(self.labels) < 2:
                raise InputError("labels", "a classification task needs at least two labels")
            if any(not isinstance(x, str) or not x.strip() for x in self.labels):
                raise InputError("labels", "labels must be non-empty strings")
            if len(set(self.labels)) != len(self.labels):
                raise InputError("labels", "labels must be unique")
            if len(self.input_fields) not in (1, 2):
                raise InputError(
                    "input_fields", "a classification task reads one or two text fields"
                )
        else:
            if self.labels:
                raise InputError("labels", "an extractive QA task has no labels")
            if not self.input_fields:
                self.input_fields = list(QA_FIELDS)
            if self.input_fields != QA_FIELDS:
                raise InputError("input_fields", f"extractive QA reads exactly {QA_FIELDS}")
        if any(not isinstance(f, str) or not f for f in self.input_fields):
            raise InputError("input_fields", "field names must be non-empty strings")
        if len(set(self.input_fields)) != len(self.input_fields):
            raise InputError("input_fields", "field names must be unique")
        if self.max_chars < 1:
            raise InputError("max_chars", "must be at least 1")
        if not 16 <= self.max_tokens <= 4096:
            raise InputError("max_tokens", "must be between 16 and 4096")
        for name, limit in self.field_max_chars.items():
            if name not in self.input_fields:
                raise InputError("field_max_chars", f"unknown field {name!r}")
            if int(limit) < 1:
                raise InputError("field_max_chars", f"{name}: must be at least 1")

    # -- helpers -----------------------------------------------------------------
    @property
    def is_classification(self) -> bool:
        return self.kind == CLASSIFICATION

    @property
    def is_qa(self) -> bool:
        return self.kind == EXTRACTIVE_QA

    @property
    def label_map(self) -> dict[str, int]:
        """Label -> class index, in the order of ``labels``."""
        return {label: i for i, label in enumerate(self.labels)}

    def max_chars_for(self, field_name: str) -> int:
        return int(self.field_max_chars.get(field_name, self.max_chars))

    def label_index(self, label: Any) -> int:
        """Index of ``label``; raises :class:`InputError` for an unknown label."""
        if not isinstance(label, str) or label not in self.label_map:
            raise InputError(
                "label", f"unknown label {label!r}; expected one of {', '.join(self.labels)}"
            )
        return self.label_map[label]

    def validate_inputs(self, inputs: Mapping[str, Any]) -> dict[str, str]:
        """Check one example's inputs; return only the model's fields, unchanged.

        Raises :class:`InputError` for a missing, non-string, empty, whitespace-only
        or too long field.  Text is never stripped: character offsets returned by
        predict/explain point into exactly the text given here.
        """
        if not isinstance(inputs, Mapping):
            raise InputError("inputs", "must be a mapping of field name to text")
        clean: dict[str, str] = {}
        for name in self.input_fields:
            if name not in inputs or inputs[name] is None:
                raise InputError(name, "this field is required")
            text = inputs[name]
            if not isinstance(text, str):
                raise InputError(name, "must be text")
            if not text.strip():
                raise InputError(name, "must not be empty")
            limit = self.max_chars_for(name)
            if len(text) > limit:
                raise InputError(name, f"is {len(text)} characters long; the limit is {limit}")
            clean[name] = text
        return clean

    # -- serialisation -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "labels": list(self.labels),
            "input_fields": list(self.input_fields),
            "max_chars": self.max_chars,
            "max_tokens": self.max_tokens,
            "field_max_chars": dict(self.field_max_chars),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskSpec:
        if not isinstance(data, Mapping) or "kind" not in data:
            raise InputError("spec", "a task spec needs at least a 'kind'")
        known = {"kind", "labels", "input_fields", "max_chars", "max_tokens", "field_max_chars"}
        unknown = set(data) - known
        if unknown:
            raise InputError("spec", f"unknown keys: {', '.join(sorted(unknown))}")
        return cls(**{k: data[k] for k in known if k in data})
