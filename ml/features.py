"""Training rows, checked, and the features ``ml.train`` learns from: a classification
row as its encoded inputs and label id, an extractive QA row as one feature per
passage window with the answer's token positions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .errors import InputError
from .inference import context_range, encode_classification, encode_qa
from .spec import TaskSpec

# -- row validation --------------------------------------------------------------------


def _qa_answers(row: Mapping[str, Any], passage: str, where: str) -> list[tuple[str, int]]:
    """``[(text, start_char)]`` from ``answer`` or ``answers``; the first is trained on."""
    raw = row.get("answers")
    if raw is None:
        raw = [row.get("answer")] if row.get("answer") is not None else []
    if isinstance(raw, Mapping):
        raw = [raw]
    if not raw:
        raise InputError("answer", f"{where}: an answer is required")
    answers = []
    for answer in raw:
        if not isinstance(answer, Mapping):
            raise InputError("answer", f"{where}: must be {{'text': ..., 'start': ...}}")
        text = answer.get("text")
        if not isinstance(text, str) or not text.strip():
            raise InputError("answer", f"{where}: answer text must not be empty")
        start = answer.get("start", answer.get("answer_start"))
        if start is None:
            start = passage.find(text)
            if start < 0:
                raise InputError(
                    "answer", f"{where}: answer {text!r} does not occur in the passage"
                )
        if not isinstance(start, int) or isinstance(start, bool) or start < 0:
            raise InputError("answer", f"{where}: answer start must be a character offset")
        if passage[start : start + len(text)] != text:
            raise InputError(
                "answer",
                f"{where}: passage[{start}:{start + len(text)}] is not the answer {text!r}",
            )
        answers.append((text, start))
    return answers


def validate_rows(spec: TaskSpec, rows: Sequence[Mapping[str, Any]], split: str) -> list[dict]:
    """Validate training/dev rows; returns ``[{"inputs", "label"|"answers"}]``."""
    clean = []
    for i, row in enumerate(rows):
        where = f"{split} row {i}"
        if not isinstance(row, Mapping) or "inputs" not in row:
            raise InputError("inputs", f"{where}: each row needs an 'inputs' mapping")
        try:
            inputs = spec.validate_inputs(row["inputs"])
        except InputError as exc:
            raise InputError(exc.field, f"{where}: {exc.message}") from exc
        if spec.is_classification:
            if "label" not in row:
                raise InputError("label", f"{where}: a label is required")
            try:
                label = spec.label_index(row["label"])
            except InputError as exc:
                raise InputError("label", f"{where}: {exc.message}") from exc
            clean.append({"inputs": inputs, "label": label})
        else:
            clean.append({"inputs": inputs, "answers": _qa_answers(row, inputs["passage"], where)})
    return clean


# -- features ---------------------------------------------------------------------------


def classification_features(tokenizer, spec: TaskSpec, rows: list[dict]) -> list[dict]:
    encoding = encode_classification(
        tokenizer, spec, [r["inputs"] for r in rows], padding=False, return_tensors=None
    )
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in encoding]
    return [
        {**{k: encoding[k][i] for k in keys}, "labels": row["label"]} for i, row in enumerate(rows)
    ]


def qa_features(tokenizer, spec: TaskSpec, rows: list[dict]) -> list[dict]:
    """One training feature per passage window, with the answer's token positions.

    A window that does not contain the whole (first) answer points both positions at
    the [CLS] token (index 0), the usual SQuAD recipe.
    """
    encoding = encode_qa(tokenizer, spec, [r["inputs"] for r in rows])
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in encoding]
    features = []
    for i in range(len(encoding["input_ids"])):
        row = rows[encoding["overflow_to_sample_mapping"][i]]
        text, start_char = row["answers"][0]
        end_char = start_char + len(text)
        offsets = encoding["offset_mapping"][i]
        ctx = context_range(encoding, i)
        start_pos = end_pos = 0
        if ctx is not None:
            c0, c1 = ctx
            if offsets[c0][0] <= start_char and offsets[c1][1] >= end_char:
                start_pos = c0
                while start_pos <= c1 and offsets[start_pos][0] <= start_char:
                    start_pos += 1
                start_pos -= 1
                end_pos = c1
                while end_pos >= c0 and offsets[end_pos][1] >= end_char:
                    end_pos -= 1
                end_pos += 1
        features.append(
            {
                **{k: encoding[k][i] for k in keys},
                "start_positions": start_pos,
                "end_positions": end_pos,
            }
        )
    return features
