"""The one exporter of examples: which ones (``Selection``), read a page at a time by
primary key, written as JSON Lines or as a flat CSV. ``manage.py export_dataset`` and
the admin's export job (``annotation.exports``) both write through here.

JSON Lines is the exact form: one record per example (``example_record``) with uid,
task, round, split, source, context (its fields), inputs, target, each model's
prediction, the round's prediction, fooled, a validation summary, an anonymised
annotator id and the metadata; ``import_dataset --format dynabench`` reads it back.

CSV is the same records, flat: no JSON inside a cell. A column is a path into the
record, its parts joined by dots: ``context.<field>`` and ``inputs.<field>`` for each
of the task config's context and input fields (field names have no dots, so they
never meet another column), ``target.label`` (or ``target.text`` and
``target.start`` for extractive QA), ``prediction.label`` and its
``prediction.probabilities.<label>``, ``validation.status`` and its counts,
``model_predictions.<model id>.label``..., and ``metadata.<key>`` (nested keys and list
items as further parts: ``metadata.answers.0.text``). The context's id and tag are
``context_id`` and ``context_tag``. The columns that depend on the rows (predictions,
metadata) are found by a first pass over the same pages. True and false are
``true``/``false``, null an empty cell, and text that a spreadsheet would run as a
formula starts with an apostrophe (``core.rows.spreadsheet_safe``).

Memory stays bounded whatever the number of rows: every pass reads pages of
``page_size`` rows in primary-key order (``pk > last``), never all rows at once, and
never holds a server-side cursor open between pages. Rows created after an export
starts are left out (it reads up to the largest id it saw first).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime

from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.utils.dateparse import parse_datetime

from core.errors import InvalidInput, NotFound, TooLarge
from core.rows import spreadsheet_safe

from .models import Example

FORMAT_VERSION = 1
PSEUDONYM_SALT = "dynabench.export.annotator"
# An imported example has no annotator user: the pseudonym its export carried
# is kept in its metadata under this key, and exported again as "annotator".
ANNOTATOR_METADATA_KEY = "_exported_annotator"
# Accounts deleted before deleted accounts kept their examples (crowd.accounts) were cut
# off from them, keeping only the release's annotator pseudonym
# (leaderboard.releases.rows.pseudonym), here. Deleted accounts now stay linked, wiped.
DELETED_ANNOTATOR_KEY = "_deleted_annotator"
HIDDEN_METADATA_KEYS = (ANNOTATOR_METADATA_KEY, DELETED_ANNOTATOR_KEY)
RECORD_KEYS = (
    "format", "uid", "external_uid", "task", "round", "split", "source", "context", "inputs",
    "target", "model_predictions", "prediction", "fooled", "retracted", "flagged", "validation",
    "annotator", "metadata", "created_at",
)
FORMATS = ("jsonl", "csv")
PAGE_SIZE = 500
# The most columns a CSV may find in the rows' predictions and metadata: past it the rows
# are not a table (a list of thousands of items in each row's metadata); JSON Lines holds them.
MAX_FOUND_COLUMNS = 500
# What to do with retracted and flagged examples: leave them out (the default), include
# them, or export only them.
EXCLUDE, INCLUDE, ONLY = "exclude", "include", "only"
WITHDRAWN_CHOICES = (EXCLUDE, INCLUDE, ONLY)
FOOLED_CHOICES = ("yes", "no", "unknown")  # unknown: no model answered
# The passes of an export and their share of its work, for a progress in percent.
FINDING_COLUMNS, WRITING = "finding the CSV columns", "exporting"
PHASES = {"jsonl": ((WRITING, 1.0),), "csv": ((FINDING_COLUMNS, 0.25), (WRITING, 0.75))}

Advance = Callable[[str, int, int], None]  # (label, rows done, rows in all), as core.progress takes


# --- the record ---------------------------------------------------------------


def anonymise(user_id: int | None) -> str | None:
    """A stable pseudonym for a user id; not reversible without SECRET_KEY."""
    if user_id is None:
        return None
    return "a-" + salted_hmac(PSEUDONYM_SALT, str(user_id), algorithm="sha256").hexdigest()[:16]


def _exported_metadata(metadata):
    if isinstance(metadata, dict) and any(key in metadata for key in HIDDEN_METADATA_KEYS):
        return {k: v for k, v in metadata.items() if k not in HIDDEN_METADATA_KEYS}
    return metadata


def example_record(example) -> dict:
    context = example.context
    annotator = anonymise(example.annotator_id)
    if annotator is None and isinstance(example.metadata, dict):
        annotator = example.metadata.get(ANNOTATOR_METADATA_KEY) or example.metadata.get(DELETED_ANNOTATOR_KEY)
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
        "metadata": _exported_metadata(example.metadata),
        "created_at": example.created_at.isoformat() if example.created_at else None,
    }


# --- which examples -------------------------------------------------------------


def _choice(errors: dict, name: str, value, choices, *, blank_ok: bool = True):
    if value in (None, "") and blank_ok:
        return None
    if value not in choices:
        errors[name] = f"{value!r} is not one of {', '.join(map(str, choices))}."
        return None
    return value


def _moment(errors: dict, name: str, value) -> datetime | None:
    if value in (None, ""):
        return None
    moment = parse_datetime(value) if isinstance(value, str) else None
    if moment is None:
        errors[name] = f"{value!r} is not a date and time (ISO 8601)."
        return None
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, timezone.UTC)


@dataclass(frozen=True)
class Selection:
    """Which of a task's examples an export takes. Every field but the task is optional
    (None: any). Retracted and flagged examples are left out unless asked."""

    task_id: int
    round_number: int | None = None
    split: str | None = None
    source: str | None = None
    validation_status: str | None = None
    fooled: str | None = None  # "yes", "no", "unknown" (no model answered)
    retracted: str = EXCLUDE
    flagged: str = EXCLUDE
    created_from: datetime | None = field(default=None)
    created_before: datetime | None = field(default=None)

    @classmethod
    def from_params(cls, task_id: int, params: dict) -> Selection:
        """A selection from plain values (a job's parameters, a form's data); InvalidInput
        names each bad one."""
        errors: dict[str, str] = {}
        number = params.get("round_number")
        if number not in (None, "") and (isinstance(number, bool) or not str(number).isdigit()):
            errors["round_number"] = f"{number!r} is not a round number (0 or more)."
        selection = cls(
            task_id=task_id,
            round_number=int(number) if number not in (None, "") and "round_number" not in errors else None,
            split=_choice(errors, "split", params.get("split"), Example.Split.values),
            source=_choice(errors, "source", params.get("source"), Example.Source.values),
            validation_status=_choice(errors, "validation_status", params.get("validation_status"),
                                      Example.ValidationStatus.values),
            fooled=_choice(errors, "fooled", params.get("fooled"), FOOLED_CHOICES),
            retracted=_choice(errors, "retracted", params.get("retracted") or EXCLUDE, WITHDRAWN_CHOICES) or EXCLUDE,
            flagged=_choice(errors, "flagged", params.get("flagged") or EXCLUDE, WITHDRAWN_CHOICES) or EXCLUDE,
            created_from=_moment(errors, "created_from", params.get("created_from")),
            created_before=_moment(errors, "created_before", params.get("created_before")),
        )
        if errors:
            raise InvalidInput(errors)
        return selection

    def to_params(self) -> dict:
        """Plain JSON values (a job's parameters); ``from_params`` reads them back."""
        params = asdict(self)
        params.pop("task_id")
        for name in ("created_from", "created_before"):
            if params[name] is not None:
                params[name] = params[name].isoformat()
        return params

    def describe(self) -> str:
        """In words, for a job's log and a page: "round 1, train, verified; retracted and flagged left out"."""
        parts = []
        if self.round_number is not None:
            parts.append(f"round {self.round_number}")
        parts += [p for p in (self.split, self.source, self.validation_status) if p]
        if self.fooled:
            parts.append({"yes": "fooled the model", "no": "did not fool the model",
                          "unknown": "no model answered"}[self.fooled])
        if self.created_from:
            parts.append(f"written from {self.created_from:%Y-%m-%d %H:%M}")
        if self.created_before:
            parts.append(f"written before {self.created_before:%Y-%m-%d %H:%M}")
        withdrawn = {EXCLUDE: "left out", INCLUDE: "included", ONLY: "only"}
        if self.retracted == self.flagged:
            tail = f"retracted and flagged {withdrawn[self.retracted]}" if self.retracted != ONLY \
                else "only examples both retracted and flagged"
        else:
            tail = f"retracted {withdrawn[self.retracted]}, flagged {withdrawn[self.flagged]}"
        return ", ".join(parts or ["every round"]) + "; " + tail

    def examples(self, task):
        """The selected examples of ``task`` (unordered); NotFound if the round does not exist."""
        if task.pk != self.task_id:
            raise ValueError(f"this selection is of task #{self.task_id}, not {task.slug}")
        rows = Example.objects.filter(task=task)
        if self.round_number is not None:
            rnd = task.rounds.filter(number=self.round_number).first()
            if rnd is None:
                raise NotFound(f"Task {task.slug} has no round {self.round_number}.")
            rows = Example.objects.filter(round=rnd)  # the round's own indexes; a round is of one task
        exact = {"split": self.split, "source": self.source, "validation_status": self.validation_status}
        rows = rows.filter(**{name: value for name, value in exact.items() if value is not None})
        if self.fooled:
            rows = rows.filter(fooled__isnull=True) if self.fooled == "unknown" else \
                rows.filter(fooled=self.fooled == "yes")
        for name in ("retracted", "flagged"):
            choice = getattr(self, name)
            if choice != INCLUDE:
                rows = rows.filter(**{name: choice == ONLY})
        if self.created_from:
            rows = rows.filter(created_at__gte=self.created_from)
        if self.created_before:
            rows = rows.filter(created_at__lt=self.created_before)
        return rows


# --- reading in pages -----------------------------------------------------------


def pages(rows, page_size: int | None = None, *, up_to: int | None = None) -> Iterator[list]:
    """``rows`` (a queryset) as lists of at most ``page_size``, in primary-key order, each
    page one query that starts after the last page's last id (an index walk, however far
    in), up to the id ``up_to`` if given. Only one page is in memory at a time."""
    page_size = page_size or PAGE_SIZE
    if page_size < 1:
        raise ValueError("page_size must be at least 1")
    rows = rows.order_by("pk")
    if up_to is not None:
        rows = rows.filter(pk__lte=up_to)
    last = None
    while True:
        page = list((rows if last is None else rows.filter(pk__gt=last))[:page_size])
        if page:
            yield page
        if len(page) < page_size:
            return
        last = page[-1].pk if hasattr(page[-1], "pk") else page[-1][0]


def _last_id(rows) -> int | None:
    return rows.order_by("-pk").values_list("pk", flat=True).first()


def records(rows, page_size: int | None = None, *, up_to: int | None = None) -> Iterator[dict]:
    """The export record of each row, a page at a time."""
    for page in pages(rows.select_related("task", "round", "context"), page_size, up_to=up_to):
        yield from map(example_record, page)


# --- flat rows -----------------------------------------------------------------------


def flatten(value, prefix: str, out: dict) -> dict:
    """``out`` with a dotted path for each plain value inside ``value`` (objects by key,
    lists by position); an empty object or list adds nothing."""
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(item, f"{prefix}.{key}", out)
    elif isinstance(value, list):
        for position, item in enumerate(value):
            flatten(item, f"{prefix}.{position}", out)
    else:
        out[prefix] = value
    return out


def _natural(path: str) -> tuple:
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in path.split("."))


# The columns found in the rows, by the part of the record they come from.
FOUND_PARTS = ("prediction", "model_predictions", "metadata")


def fixed_columns(config) -> dict[str, list[str]]:
    """The columns every CSV of a task has, in groups around the found ones."""
    kind = config.kind
    return {
        "head": ["uid", "external_uid", "task", "round", "split", "source", "context_id", "context_tag",
                 *(f"context.{name}" for name in config.context_field_names),
                 *(f"inputs.{name}" for name in config.input_field_names),
                 *(f"target.{part}" for part in kind.export_target_parts)],
        "prediction": [f"prediction.{part}" for part in kind.export_prediction_parts],
        "middle": ["fooled", "retracted", "flagged", "validation.status", "validation.correct",
                   "validation.incorrect", "validation.flagged", "annotator", "created_at"],
    }


def find_columns(config, rows, page_size: int | None = None, *, up_to: int | None = None,
                 advance: Callable[[int], None] | None = None) -> list[str]:
    """Every column of the CSV of ``rows``: the task's fixed ones, and the paths found in
    the rows' predictions and metadata (a first pass that reads those three columns only)."""
    fixed = fixed_columns(config)
    found: dict[str, set[str]] = {part: set() for part in FOUND_PARTS}
    done = 0
    for page in pages(rows.values_list("pk", *FOUND_PARTS), page_size, up_to=up_to):
        for _pk, *values in page:
            for part, value in zip(FOUND_PARTS, values, strict=True):
                if part == "metadata":
                    value = _exported_metadata(value)
                if value not in (None, {}, []):
                    found[part].update(flatten(value, part, {}))
        if sum(map(len, found.values())) > MAX_FOUND_COLUMNS:
            raise TooLarge(f"The examples' predictions and metadata hold more than {MAX_FOUND_COLUMNS} distinct "
                           "fields: too many columns for a CSV. Export them as JSON Lines instead.")
        done += len(page)
        if advance is not None:
            advance(done)
    found["prediction"] -= set(fixed["prediction"])
    return [*fixed["head"], *fixed["prediction"], *sorted(found["prediction"], key=_natural), *fixed["middle"],
            *sorted(found["model_predictions"], key=_natural), *sorted(found["metadata"], key=_natural)]


def flat_row(record: dict) -> dict:
    """A record's cells by column (see the module's docstring)."""
    context = record["context"] or {}
    row = {key: record[key] for key in ("uid", "external_uid", "task", "round", "split", "source", "fooled",
                                        "retracted", "flagged", "annotator", "created_at")}
    row["context_id"], row["context_tag"] = context.get("id"), context.get("tag")
    flatten(context.get("fields") or {}, "context", row)
    for part in ("inputs", "target", "prediction", "validation", "model_predictions", "metadata"):
        if record[part] is not None:
            flatten(record[part], part, row)
    return row


def csv_cell(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return spreadsheet_safe(value)


# --- writing ---------------------------------------------------------------------------


@dataclass
class ExportReport:
    rows: int = 0
    columns: list[str] = field(default_factory=list)
    # Cells whose column appeared after the columns were found (a row's metadata edited
    # during the export): left out of the CSV, and counted here.
    cells_left_out: int = 0


def write_examples(task, out, selection: Selection | None = None, *, fmt: str = "jsonl",
                   page_size: int | None = None, advance: Advance | None = None) -> ExportReport:
    """Write the selected examples of ``task`` to the text stream ``out`` (opened with
    ``newline=""`` for CSV), in primary-key order. ``advance(label, done, total)`` is
    called after each page of each pass (``PHASES`` lists them by format)."""
    if fmt not in FORMATS:
        raise ValueError(f"Unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}.")
    selection = selection or Selection(task_id=task.pk)
    page_size = page_size or PAGE_SIZE
    rows = selection.examples(task)
    report = ExportReport()
    up_to = _last_id(rows)
    if up_to is None:
        if fmt == "csv":
            report.columns = find_columns(task.parsed_config, rows.none())
            csv.writer(out, lineterminator="\n").writerow(report.columns)
        return report
    total = rows.filter(pk__lte=up_to).count() if advance is not None else 0

    def step(label):
        return None if advance is None else (lambda done: advance(label, done, total))

    if fmt == "jsonl":
        def write(record):
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        report.columns = find_columns(task.parsed_config, rows, page_size, up_to=up_to,
                                      advance=step(FINDING_COLUMNS))
        known = set(report.columns)
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(report.columns)

        def write(record):
            cells = flat_row(record)
            report.cells_left_out += sum(1 for column in cells if column not in known)
            writer.writerow([csv_cell(cells.get(column)) for column in report.columns])
    progress = step(WRITING)
    for record in records(rows, page_size, up_to=up_to):
        write(record)
        report.rows += 1
        if progress is not None and report.rows % page_size == 0:
            progress(report.rows)
    if progress is not None:
        progress(report.rows)
    return report
