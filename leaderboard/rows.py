"""Examples as ``ml`` rows: which examples a model may learn from or be scored on, and
how an example becomes a training or test row. The lowest layer of the leaderboard app."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable

import ml
from annotation.examples import signature_ok
from annotation.models import Example
from core.errors import InvalidInput
from datafiles.readers import RowError, read_records
from jobs.engine import JobReporter
from tasks.config import validate_task_config
from tasks.models import Task
from tasks.services import SEED_DIR, load_definition

log = logging.getLogger(__name__)



def ml_spec(task: Task):
    return ml.TaskSpec.from_dict(task.parsed_config.ml_spec_dict())


def example_row(config, context_fields: dict | None, inputs: dict, target: dict) -> dict:
    """An Example (context fields + inputs + target) as an ``ml`` training row."""
    fields = {**(context_fields or {}), **inputs}
    return config.kind.training_row({name: fields.get(name, "") for name in config.model_inputs}, target)


def example_rows(task: Task, examples: Iterable) -> list[dict]:
    config = task.parsed_config
    return [
        example_row(config, ex.context.fields if ex.context_id else None, ex.inputs, ex.target)
        for ex in examples
    ]


def usable_examples(task: Task, *, split: str | None, rounds: Iterable[int] | None = None,
                    fooling_only: bool = False):
    """Examples fit to train or score on: VERIFIED (imports are verified when imported),
    not flagged, not retracted. Pending, rejected and flagged ones never count.
    ``split=None``: every split."""
    qs = Example.objects.filter(task=task, retracted=False, flagged=False,
                                validation_status=Example.ValidationStatus.VERIFIED)
    if split is not None:
        qs = qs.filter(split=split)
    if rounds is not None:
        qs = qs.filter(round__number__in=list(rounds))
    if fooling_only:
        qs = qs.filter(fooled=True)
    return qs.select_related("context").order_by("pk")


def untampered(examples: Iterable[Example], reporter: JobReporter | None = None) -> list[Example]:
    """``examples`` without the written ones whose signature does not check (their text,
    answer, the model's answer or ``fooled`` changed after the model answered)."""
    kept, dropped = [], 0
    for example in examples:
        if example.source == Example.Source.ANNOTATION and not signature_ok(example):
            dropped += 1
            log.warning("example %s: signature does not match its data; left out", example.pk)
            continue
        kept.append(example)
    if dropped and reporter:
        reporter.progress(0, f"left out {dropped} example(s) whose signature does not match their data")
    return kept


def read_seed_rows(slug: str, config=None) -> dict[str, list[dict]]:
    """The shipped seed examples of a task, by split, as ``ml`` rows.

    Read with the same ``seed`` reader that ``import_dataset`` uses. Without
    ``config``, the task's shipped definition is used (no database needed).
    """
    if config is None:
        definition = load_definition(slug)
        config = validate_task_config(definition["task_type"], definition["config"])
    path = SEED_DIR / "examples" / f"{slug}.jsonl"
    splits: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    if not path.exists():
        return splits
    for record in read_records("seed", path):
        if isinstance(record, RowError):
            raise InvalidInput([{"line": record.line, "message": record.message}], message=f"{path} has a bad row.")
        context_fields = record.context["fields"] if record.context else None
        splits[record.split or "train"].append(example_row(config, context_fields, record.inputs, record.target))
    return splits


def data_summary(rows_by_split: dict[str, list[dict]], **extra) -> dict:
    summary = dict(extra)
    for split, rows in rows_by_split.items():
        labels = Counter(r["label"] for r in rows if "label" in r)
        summary[split] = {"count": len(rows), **({"labels": dict(sorted(labels.items()))} if labels else {})}
    return summary


def primary_metric(task: Task) -> str:
    """The number a round's column shows (the task kind's): accuracy, or SQuAD F1 for QA."""
    return task.parsed_config.kind.primary_metric
