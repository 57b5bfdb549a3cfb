"""The export format: one JSON object per example, streamed.

Each record carries: uid, task, round, split, source, context (its fields),
inputs, target, each model's prediction, the round's prediction, fooled,
a validation summary and an anonymised annotator id. The same records are
read back by ``import_dataset --format dynabench``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from django.utils.crypto import salted_hmac

FORMAT_VERSION = 1
PSEUDONYM_SALT = "dynabench.export.annotator"
# An imported example has no annotator user: the pseudonym its export carried
# is kept in its metadata under this key, and exported again as "annotator".
ANNOTATOR_METADATA_KEY = "_exported_annotator"
RECORD_KEYS = (
    "format", "uid", "external_uid", "task", "round", "split", "source", "context", "inputs",
    "target", "model_predictions", "prediction", "fooled", "retracted", "flagged", "validation",
    "annotator", "metadata", "created_at",
)


def anonymise(user_id: int | None) -> str | None:
    """A stable pseudonym for a user id; not reversible without SECRET_KEY."""
    if user_id is None:
        return None
    return "a-" + salted_hmac(PSEUDONYM_SALT, str(user_id), algorithm="sha256").hexdigest()[:16]


def example_record(example) -> dict:
    context = example.context
    metadata = example.metadata
    annotator = anonymise(example.annotator_id)
    if isinstance(metadata, dict) and ANNOTATOR_METADATA_KEY in metadata:
        metadata = {k: v for k, v in metadata.items() if k != ANNOTATOR_METADATA_KEY}
        if annotator is None:
            annotator = example.metadata[ANNOTATOR_METADATA_KEY]
    return {
        "format": FORMAT_VERSION,
        "uid": str(example.uid),
        "external_uid": example.external_uid or None,
        "task": example.task.slug,
        "round": example.round.number,
        "split": example.split,
        "source": example.source,
        "context": None if context is None else {
            "id": context.external_id or None,
            "fields": context.fields,
            "tag": context.tag,
        },
        "inputs": example.inputs,
        "target": example.target,
        "model_predictions": example.model_predictions,
        "prediction": example.prediction,
        "fooled": example.fooled,
        "retracted": example.retracted,
        "flagged": example.flagged,
        "validation": {
            "status": example.validation_status,
            "correct": example.validations_correct,
            "incorrect": example.validations_incorrect,
            "flagged": example.validations_flagged,
        },
        "annotator": annotator,
        "metadata": metadata,
        "created_at": example.created_at.isoformat() if example.created_at else None,
    }


def iter_jsonl(queryset, chunk_size: int = 500) -> Iterator[str]:
    """Lines of JSONL, reading the rows in chunks (constant memory)."""
    rows = queryset.select_related("task", "round", "context").order_by("pk")
    for example in rows.iterator(chunk_size=chunk_size):
        yield json.dumps(example_record(example), ensure_ascii=False) + "\n"
