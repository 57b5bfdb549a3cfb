# Long on purpose: the import engine for examples (checks, duplicates, shared contexts, batched writes) in one place.
"""Importing data sets into a task (exporting them is ``annotation.exporting``).

``import_records`` takes the records that ``datafiles.readers`` reads (public
data sets, our seed files, our own export) and writes them as examples of a
task: each row is checked against the task's config, duplicates are skipped,
contexts are shared by id, and the rows are written with ``bulk_create`` in
batches.

Choices worth knowing:

- An imported example is ``source="import"`` (``"seed"`` for the seed files),
  has no annotator, and is ``verified`` by default: its label is the data
  set's gold label, and a pending import would flood the validation queue.
  Records from our own export keep everything they carried.
- Round statistics (examples collected, fooled, verified) count only what
  annotators wrote on the platform against the round's target models
  (``source="annotation"``); imported history is not that.
- A round that does not exist yet is created closed (imported history); an
  existing round is left as it is.
- Contexts are found by ``external_id`` (a hash of their text for public
  data, so the same premise is one context). A new one is attached to the
  round it came with: it is that round's material, not a context for every
  round's annotators (Context.round empty means "usable in every round").
- ``max_input_length`` applies to annotator input fields only; contexts
  (e.g. SQuAD passages) may be longer.
- Duplicates are skipped by (task, external_uid); rows of our own export also
  by uid. An export row whose uid belongs to another task's example (copying
  a task's data into a new task on the same database) gets a fresh uid and
  keeps the original as its external_uid, so re-importing it is skipped too.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import islice

from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import InvalidInput
from datafiles.readers import FORMATS, SPLITS, FormatError, Record, RowError
from tasks.models import Context, Round, Task

from . import counters
from .exporting import ANNOTATOR_METADATA_KEY
from .models import Example

BATCH_SIZE = 1000
MAX_ID_LENGTH = 200
MAX_TAG_LENGTH = 100


class DatasetImportError(Exception):
    """The import cannot go on (or, when strict, found malformed rows)."""

    def __init__(self, message: str, errors: list[RowError] | None = None, report=None):
        super().__init__(message)
        self.errors = errors or []
        self.report = report


@dataclass
class ImportReport:
    created: int = 0
    skipped_duplicates: int = 0
    errors: list[RowError] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # (split, label or None) -> examples created
    rounds: Counter = field(default_factory=Counter)  # round number -> examples created
    rounds_created: list[int] = field(default_factory=list)
    contexts_created: int = 0
    uids_reassigned: int = 0

    @property
    def rows(self) -> int:
        return self.created + self.skipped_duplicates + len(self.errors)

    def counts_by_split(self) -> dict[str, dict]:
        table: dict[str, dict] = {}
        def order(item):
            (split, label), _n = item
            return (SPLITS.index(split) if split in SPLITS else len(SPLITS), split, str(label))

        for (split, label), n in sorted(self.counts.items(), key=order):
            table.setdefault(split, {})[label] = n
        return table


def check_format(task: Task, format_name: str) -> None:
    """Raise DatasetImportError if the format cannot fit the task at all."""
    if format_name not in FORMATS:
        raise DatasetImportError(
            f"Unknown format {format_name!r}; known formats: {', '.join(sorted(FORMATS))}."
        )
    fmt = FORMATS[format_name]
    task_inputs = task.parsed_config.input_field_names
    if fmt.input_fields is not None and sorted(fmt.input_fields) != sorted(task_inputs):
        raise DatasetImportError(
            f"Format {format_name!r} gives the input field(s) {', '.join(fmt.input_fields)}, but task "
            f"{task.slug!r} takes {', '.join(task_inputs)}."
        )


def _signature(fields) -> str:
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha1(canonical.encode("utf-8")).hexdigest()


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass
class _Row:
    record: Record
    split: str
    round_number: int
    context_key: object = None
    uid: uuid.UUID | None = None
    external_uid: str = ""
    created_at: datetime | None = None


class _Importer:
    def __init__(self, task, *, round_number, split, strict, source, validation_status, batch_size):
        self.task = task
        self.config = task.parsed_config
        self.round_override = round_number
        self.split_override = split
        self.strict = strict
        self.source = source
        self.validation_status = validation_status
        self.batch_size = batch_size
        self.report = ImportReport()
        self.rounds: dict[int, Round] = {}
        self.contexts: dict[object, list] = {}  # key -> [signature of fields, pk or None]
        self.seen: set[str] = set()  # external uids and uids taken in this run
        self.context_names = self.config.context_field_names
        self.without_context = self.config.kind.without_context
        if split is not None and split not in SPLITS:
            raise DatasetImportError(f"Unknown split {split!r}; expected one of {', '.join(SPLITS)}.")
        if round_number is not None and (not _is_int(round_number) or round_number < 0):
            raise DatasetImportError(f"The round must be a whole number from 0 (round 0: static data), "
                                     f"not {round_number!r}.")

    # --- checks -------------------------------------------------------------

    def problem(self, record: Record) -> str | None:
        """What is wrong with ``record`` for this task, or None. The inputs, the
        context and the answer are checked by the task config's own rules, the same
        ones the API applies (``TaskConfig.clean_*``)."""
        config = self.config
        context = record.context
        try:
            config.clean_inputs(record.inputs)
            if context is not None:
                if not self.context_names:
                    return "the row has a context but the task has no context fields"
                if not isinstance(context, dict):
                    return "the context must be a JSON object"
                config.clean_context_fields(context.get("fields"))
            elif self.without_context:
                return self.without_context
            config.clean_target(record.target, context["fields"] if context else None)
        except InvalidInput as exc:
            return str(exc)
        if context is not None:
            if len(context.get("external_id") or "") > MAX_ID_LENGTH:
                return f"the context id is longer than {MAX_ID_LENGTH} characters"
            if not isinstance(context.get("tag") or "", str) or len(context.get("tag") or "") > MAX_TAG_LENGTH:
                return f"the context tag must be text of at most {MAX_TAG_LENGTH} characters"
        if len(record.external_uid or "") > MAX_ID_LENGTH:
            return f"the id is longer than {MAX_ID_LENGTH} characters"
        if not isinstance(record.metadata, dict):
            return "the metadata must be a JSON object"
        if record.platform is not None:
            return self.platform_problem(record.platform)
        if not record.external_uid:
            return "the row has no id"
        return None

    def platform_problem(self, platform: dict) -> str | None:
        try:
            uuid.UUID(str(platform["uid"]))
        except ValueError:
            return f"uid {platform['uid']!r} is not a UUID"
        if platform["source"] not in Example.Source.values:
            return f"unknown source {platform['source']!r}"
        validation = platform["validation"]
        if validation.get("status") not in Example.ValidationStatus.values:
            return f"unknown validation status {validation.get('status')!r}"
        for key in ("correct", "incorrect", "flagged"):
            if not _is_int(validation.get(key, 0)) or validation.get(key, 0) < 0:
                return f"validation {key!r} must be a whole number >= 0"
        if platform["fooled"] not in (None, True, False):
            return "'fooled' must be true, false or null"
        if not isinstance(platform["model_predictions"], dict):
            return "'model_predictions' must be a JSON object"
        if platform["annotator"] is not None and not isinstance(platform["annotator"], str):
            return "'annotator' must be a pseudonym (text) or null"
        if platform["created_at"] is not None:
            try:
                datetime.fromisoformat(platform["created_at"])
            except (TypeError, ValueError):
                return f"created_at {platform['created_at']!r} is not an ISO 8601 time"
        return None

    def placement(self, record: Record) -> tuple[str, int]:
        split = self.split_override or record.split
        if split is None:
            raise DatasetImportError(
                f"line {record.line}: the file gives no split; say which split it is (--split)."
            )
        number = self.round_override if self.round_override is not None else record.round
        if number is None:
            raise DatasetImportError(
                f"line {record.line}: the file gives no round; say which round it is (--round)."
            )
        return split, number

    # --- the run ------------------------------------------------------------

    def run(self, items: Iterable[Record | RowError]) -> ImportReport:
        iterator = iter(items)
        while True:
            batch = list(islice(iterator, self.batch_size))
            if not batch:
                return self.report
            self.process(batch)

    def process(self, batch: list) -> None:
        report = self.report
        checked: list[_Row] = []
        for item in batch:
            if isinstance(item, RowError):
                report.errors.append(item)
                continue
            if not isinstance(item, Record):
                raise TypeError(f"expected Record or RowError items, got {type(item).__name__}")
            split, number = self.placement(item)
            problem = self.problem(item)
            if problem:
                report.errors.append(RowError(item.line, problem))
                continue
            row = _Row(item, split, number, external_uid=item.external_uid)
            if item.platform is not None:
                row.uid = uuid.UUID(str(item.platform["uid"]))
                if item.platform["created_at"]:
                    created = datetime.fromisoformat(item.platform["created_at"])
                    if timezone.is_naive(created):
                        created = created.replace(tzinfo=UTC)
                    row.created_at = created
            checked.append(row)

        accepted = self.deduplicate(checked)
        accepted = self.resolve_contexts(accepted)
        if not accepted or (self.strict and report.errors):
            return  # strict: keep checking the rest, but write nothing more
        self.write(accepted)

    def deduplicate(self, rows: list[_Row]) -> list[_Row]:
        external = {r.external_uid for r in rows if r.external_uid}
        external |= {str(r.uid) for r in rows if r.uid is not None}
        existing_external = set(
            Example.objects.filter(task=self.task, external_uid__in=external).values_list(
                "external_uid", flat=True)
        ) if external else set()
        uids = [r.uid for r in rows if r.uid is not None]
        uid_owner = dict(Example.objects.filter(uid__in=uids).values_list("uid", "task_id")) if uids else {}
        accepted = []
        for row in rows:
            keys = [row.external_uid] if row.external_uid else []
            if row.uid is not None:
                keys.append(str(row.uid))
            duplicate = any(k in self.seen or k in existing_external for k in keys)
            if row.uid is not None and uid_owner.get(row.uid) == self.task.pk:
                duplicate = True
            if duplicate:
                self.report.skipped_duplicates += 1
                continue
            if row.uid is not None and row.uid in uid_owner:
                # Another task's example has this uid: this is a copy.
                if not row.external_uid:
                    row.external_uid = str(row.uid)
                row.uid = uuid.uuid4()
                self.report.uids_reassigned += 1
            self.seen.update(keys)
            accepted.append(row)
        return accepted

    def resolve_contexts(self, rows: list[_Row]) -> list[_Row]:
        wanted = {
            r.record.context["external_id"] for r in rows
            if r.record.context is not None and r.record.context.get("external_id")
        } - set(self.contexts)
        if wanted:
            for external_id, pk, fields in Context.objects.filter(
                task=self.task, external_id__in=wanted
            ).values_list("external_id", "pk", "fields"):
                self.contexts[external_id] = [_signature(fields), pk]
        accepted = []
        for row in rows:
            context = row.record.context
            if context is None:
                accepted.append(row)
                continue
            signature = _signature(context["fields"])
            external_id = context.get("external_id") or ""
            key = external_id or ("", _signature([context["fields"], context.get("tag") or ""]))
            known = self.contexts.get(key)
            if known is None:
                self.contexts[key] = [signature, None]
            elif known[0] != signature:
                self.report.errors.append(RowError(
                    row.record.line, f"context {external_id!r} exists already with different fields"))
                for k in [row.external_uid, str(row.uid) if row.uid else None]:
                    self.seen.discard(k)
                continue
            row.context_key = key
            accepted.append(row)
        return accepted

    def round_for(self, number: int) -> Round:
        rnd = self.rounds.get(number)
        if rnd is None:
            rnd, created = Round.objects.get_or_create(
                task=self.task, number=number,
                defaults={"status": Round.Status.CLOSED, "closed_at": timezone.now(),
                          "description": "Static data (round 0): never open for collection." if number == 0
                          else "Imported data."},
            )
            if created:
                self.report.rounds_created.append(number)
            self.rounds[number] = rnd
        return rnd

    def new_context(self, row: _Row, key) -> Context:
        context = row.record.context
        return Context(
            task=self.task, round=self.round_for(row.round_number),
            external_id=key if isinstance(key, str) else "",
            fields=context["fields"], tag=context.get("tag") or "",
        )

    def new_example(self, row: _Row) -> Example:
        record = row.record
        metadata = dict(record.metadata)
        example = Example(
            task=self.task, round=self.round_for(row.round_number),
            context_id=self.contexts[row.context_key][1] if row.context_key is not None else None,
            external_uid=row.external_uid, source=self.source, split=row.split,
            inputs=record.inputs, target=record.target, metadata=metadata,
            validation_status=self.validation_status,
        )
        if row.created_at is not None:
            example.created_at = row.created_at
        platform = record.platform
        if platform is not None:
            validation = platform["validation"]
            example.uid = row.uid
            example.source = platform["source"]
            example.model_predictions = platform["model_predictions"]
            example.prediction = platform["prediction"]
            example.fooled = platform["fooled"]
            example.retracted = platform["retracted"]
            example.flagged = platform["flagged"]
            example.validation_status = validation["status"]
            example.validations_correct = validation.get("correct", 0)
            example.validations_incorrect = validation.get("incorrect", 0)
            example.validations_flagged = validation.get("flagged", 0)
            if platform["annotator"]:
                metadata[ANNOTATOR_METADATA_KEY] = platform["annotator"]
        # bulk_create does not call save(), which sets these
        example.queue_priority, example.queue_priority_adaptive = example.queue_priorities()
        return example

    def write(self, rows: list[_Row]) -> None:
        for number in {r.round_number for r in rows}:
            self.round_for(number)
        pending, pending_keys = [], set()
        for row in rows:
            key = row.context_key
            if key is not None and self.contexts[key][1] is None and key not in pending_keys:
                pending.append((key, row))
                pending_keys.add(key)
        try:
            with transaction.atomic():
                contexts = Context.objects.bulk_create(
                    [self.new_context(row, key) for key, row in pending], batch_size=self.batch_size)
                for (key, _row), context in zip(pending, contexts, strict=True):
                    self.contexts[key][1] = context.pk
                examples = Example.objects.bulk_create([self.new_example(row) for row in rows],
                                                       batch_size=self.batch_size)
                counters.record_new(examples)
        except IntegrityError:
            # Someone else wrote some of these rows meanwhile: go row by row.
            for key, _row in pending:
                self.contexts[key][1] = None
            self.write_slowly(rows)
            return
        self.report.contexts_created += len(pending)
        for row in rows:
            self.count(row)

    def write_slowly(self, rows: list[_Row]) -> None:
        for row in rows:
            key = row.context_key
            if key is not None and self.contexts[key][1] is None:
                context = self.new_context(row, key)
                if context.external_id:
                    context, created = Context.objects.get_or_create(
                        task=self.task, external_id=context.external_id,
                        defaults={"round": context.round, "fields": context.fields, "tag": context.tag},
                    )
                else:
                    context.save()
                    created = True
                self.contexts[key][1] = context.pk
                self.report.contexts_created += created
            example = self.new_example(row)
            try:
                with transaction.atomic():
                    example.save()  # which counts it
            except IntegrityError:
                self.report.skipped_duplicates += 1
                continue
            self.count(row)

    def count(self, row: _Row) -> None:
        self.report.created += 1
        self.report.counts[(row.split, row.record.label)] += 1
        self.report.rounds[row.round_number] += 1


def import_records(
    task: Task,
    records: Iterable[Record | RowError],
    *,
    round_number: int | None = None,
    split: str | None = None,
    strict: bool = False,
    source: str = Example.Source.IMPORT,
    validation_status: str = Example.ValidationStatus.VERIFIED,
    batch_size: int = BATCH_SIZE,
) -> ImportReport:
    """Write ``records`` as examples of ``task``; see the module docstring.

    ``round_number`` and ``split``, when given, override what the records
    carry. Non-strict: good rows are written, bad ones are reported in
    ``report.errors`` with their line numbers. Strict: one transaction; any
    bad row raises ``DatasetImportError`` listing them all, and nothing is
    written. Raises ``DatasetImportError`` too when the file gives no split
    or round and none was passed, and ``datafiles.readers.FormatError`` when the file
    cannot be read in its format at all.
    """
    importer = _Importer(task, round_number=round_number, split=split, strict=strict, source=source,
                         validation_status=validation_status, batch_size=batch_size)
    if not strict:
        return importer.run(records)
    with transaction.atomic():
        report = importer.run(records)
        if report.errors:
            n = len(report.errors)
            raise DatasetImportError(
                f"{n} malformed row{'s' if n != 1 else ''}; nothing was written.\n"
                + "\n".join(str(e) for e in report.errors),
                errors=report.errors, report=report,
            )
    return report


__all__ = [
    "BATCH_SIZE", "DatasetImportError", "FormatError", "ImportReport", "check_format", "import_records",
]
