"""Context pools per round: a researcher uploads a file of contexts for a round.

Two formats, UTF-8 (a byte-order mark is dropped):

- JSON lines (``.jsonl``, ``.ndjson``, ``.json``): one JSON object per non-blank
  line, either ``{"fields": {...}, "external_id"?, "tag"?, "metadata"?}`` or flat,
  the task's context fields as keys beside the optional ``external_id``, ``tag``
  and ``metadata`` (a key that is a context field's name is that field);
- CSV (``.csv``): a header row naming the task's context fields, and optionally
  ``external_id`` and ``tag`` columns; cells may be quoted over several lines.

``read_context_file`` checks every row against the task's config (the same
``clean_context_fields`` as the API and ``Context.clean``) and against the
columns of ``Context``, and reports each problem with the line its row starts on
(the CSV header is line 1). ``upload_contexts`` writes a file all or nothing: one
bad row and nothing is added. Rows whose ``external_id`` the task has already are
skipped, so uploading a file twice adds nothing twice. The file is bounded by
``CONTEXT_UPLOAD_MAX_BYTES`` and ``CONTEXT_UPLOAD_MAX_ROWS`` (``TooLarge``).
"""

from __future__ import annotations

import codecs
import csv
import io
import logging
from dataclasses import dataclass, field
from pathlib import PurePath

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from core.errors import Conflict, Forbidden, InvalidInput, TooLarge
from core.rows import RowError, json_object_lines, json_type, numbered_records

from .config import TaskConfig
from .models import Context, Round, Task
from .roles import is_researcher
from .services import add_contexts

log = logging.getLogger(__name__)

FORMATS = ("jsonl", "csv")
EXTENSIONS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}
EXTERNAL_ID_MAX_LENGTH = Context._meta.get_field("external_id").max_length  # 200
TAG_MAX_LENGTH = Context._meta.get_field("tag").max_length  # 100
# A refusal lists at most this many problems (its message gives the count).
MAX_LISTED_ERRORS = 100
# Room for the multipart framing and the form's other fields around the file.
MULTIPART_OVERHEAD_BYTES = 64 * 1024
OPTIONAL_KEYS = ("external_id", "tag", "metadata")
CSV_OPTIONAL_COLUMNS = ("external_id", "tag")


@dataclass(frozen=True)
class UploadReport:
    """What an upload did: contexts created, rows skipped (their ``external_id`` was
    there already), the file's problems (every one; empty when the file was written)
    and the number of rows the file holds."""

    created: int
    skipped: int
    errors: list[RowError] = field(default_factory=list)
    rows: int = 0


class UploadRefused(InvalidInput):
    """The file has bad rows and nothing was written. ``errors`` lists the first
    ``MAX_LISTED_ERRORS`` problems as ``{"line", "message"}``; ``report.errors`` has them all."""

    def __init__(self, report: UploadReport):
        problems, lines = len(report.errors), len({e.line for e in report.errors})
        message = (f"The file has {_count(problems, 'problem')}, on {_count(lines, 'line')}; nothing was added. "
                   "Fix them and upload the whole file again.")
        if problems > MAX_LISTED_ERRORS:
            message += f" The first {MAX_LISTED_ERRORS} are listed."
        super().__init__([e._asdict() for e in report.errors[:MAX_LISTED_ERRORS]], message)
        self.report = report


# --- who may upload where -----------------------------------------------------------


def check_upload_allowed(task: Task, rnd: Round, user) -> None:
    """Refuse an upload by anyone but the task's researchers (``Forbidden``), and to a round
    of another task, round 0 (static data, never open for collection) or a closed round
    (``Conflict``). Draft and open rounds take contexts."""
    if not is_researcher(user, task):
        raise Forbidden(f"Only the researchers of task {task.slug} may upload its contexts.")
    if rnd.task_id != task.pk:
        raise Conflict(f"Round {rnd.number} (id {rnd.pk}) belongs to another task, not to {task.slug}.")
    if rnd.number == 0:
        raise Conflict(f"{task.slug} round 0 holds the task's static data and is never open for collection; "
                       "upload contexts to a collection round (1 or later).")
    if rnd.status == Round.Status.CLOSED:
        raise Conflict(f"{task.slug} round {rnd.number} is closed; contexts are added to draft or open rounds only.")


def max_request_bytes() -> int:
    """The largest request body an upload endpoint reads: the file's bound plus the framing."""
    return settings.CONTEXT_UPLOAD_MAX_BYTES + MULTIPART_OVERHEAD_BYTES


def read_upload(uploaded) -> bytes:
    """The bytes of an uploaded file (Django's ``UploadedFile``), refused (``TooLarge``)
    without being read when it is over ``CONTEXT_UPLOAD_MAX_BYTES``."""
    _check_size(uploaded.size)
    uploaded.seek(0)
    limit = settings.CONTEXT_UPLOAD_MAX_BYTES
    data = uploaded.read(limit + 1)
    if len(data) > limit:  # it said it was smaller
        raise TooLarge(f"The file is over the limit of {limit} bytes. Split it into several files.")
    return data


def _check_size(size: int | None) -> None:
    limit = settings.CONTEXT_UPLOAD_MAX_BYTES
    if size is not None and size > limit:
        raise TooLarge(f"The file is {size} bytes; the limit is {limit} bytes. Split it into several files.")


# --- reading a file -----------------------------------------------------------------


def resolve_format(file_format: str | None, filename: str = "") -> str:
    """``file_format`` if given, else the one the file name's extension says; ``InvalidInput`` otherwise."""
    if file_format:
        if file_format not in FORMATS:
            raise InvalidInput.field("format", f"Unknown format {file_format!r}; choose one of {list(FORMATS)}.")
        return file_format
    guessed = EXTENSIONS.get(PurePath(filename or "").suffix.lower())
    if guessed is None:
        raise InvalidInput.field("format", (
            f"Cannot tell the format of {filename or 'the file'!r} from its name; name it .jsonl or .csv, "
            "or choose the format."))
    return guessed


def read_context_file(task: Task, data: bytes, *, file_format: str | None,
                      filename: str = "") -> tuple[list[dict], list[RowError]]:
    """The rows of a file of contexts, checked against ``task``'s config: ``(rows,
    errors)``, where ``rows`` (for ``add_contexts``) are the good rows and ``errors``
    has one ``RowError`` per problem. A file that cannot be read at all (not UTF-8)
    is one error. Raises ``InvalidInput`` for an unknown format or a file without
    rows, ``TooLarge`` for a file over the byte or row bounds."""
    rows, errors, _ = _read(task, data, file_format=file_format, filename=filename)
    return rows, errors


def _read(task: Task, data: bytes, *, file_format: str | None, filename: str):
    file_format = resolve_format(file_format, filename)
    _check_size(len(data))
    text, problem = _decode(data)
    if problem is not None:
        return [], [problem], 0
    reader = _RowChecker(task.parsed_config, settings.CONTEXT_UPLOAD_MAX_ROWS)
    if file_format == "jsonl":
        reader.read_jsonl(text)
    else:
        reader.read_csv(text)
    if not reader.count and not reader.errors:
        raise InvalidInput.field("file", "The file holds no contexts.")
    return reader.rows, sorted(reader.errors, key=lambda e: e.line), reader.count


def _decode(data: bytes) -> tuple[str | None, RowError | None]:
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[start:].decode("utf-8"), None
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        line = data.count(b"\n", 0, offset) + 1
        hint = " It looks like UTF-16." if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else ""
        return None, RowError(line, (
            f"The file is not UTF-8: the byte 0x{data[offset]:02x} at byte offset {offset} (line {line}) "
            f"is not valid there.{hint} Save the file as UTF-8 and upload it again."))


class _RowChecker:
    """Reads a file's rows and checks each; collects the good rows and every problem."""

    def __init__(self, config: TaskConfig, max_rows: int):
        self.config = config
        self.field_names = config.context_field_names
        self.max_rows = max_rows
        self.rows: list[dict] = []
        self.errors: list[RowError] = []
        self.count = 0
        self.first_line_of: dict[str, int] = {}

    def _counted(self) -> None:
        self.count += 1
        if self.count > self.max_rows:
            raise TooLarge(f"The file has more than {self.max_rows} rows; split it into several files.")

    # --- JSON lines ---

    def read_jsonl(self, text: str) -> None:
        # Lines end at "\n" only: JSON strings may hold U+2028 and other characters
        # that str.splitlines() would split at.
        reserved = [key for key in OPTIONAL_KEYS if key not in self.field_names]
        lines = text.split("\n")
        first = next((i for i, raw in enumerate(lines, 1) if raw.strip()), None)
        if first is not None and lines[first - 1].lstrip().startswith("["):
            self.errors.append(RowError(first, (
                "The file is a JSON array; upload JSON lines: one JSON object per line.")))
            return
        for read in json_object_lines(lines):
            self._counted()
            if isinstance(read, RowError):
                self.errors.append(read)
                continue
            line, item = read
            if "fields" in item and "fields" not in self.field_names:
                unknown = sorted(set(item) - {"fields", *OPTIONAL_KEYS})
                if unknown:
                    self.errors.append(RowError(line, (
                        f"Unknown keys {unknown}: a row is {{\"fields\": {{...}}}} with optional "
                        f"{list(OPTIONAL_KEYS)}, or flat with the fields {self.field_names}.")))
                    continue
                optional = {key: item.get(key) for key in OPTIONAL_KEYS}
                self._check(line, item["fields"], optional, wrapped=True)
            else:
                fields = {key: value for key, value in item.items() if key not in reserved}
                self._check(line, fields, {key: item.get(key) for key in reserved})

    # --- CSV ---

    def read_csv(self, text: str) -> None:
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        header: list[str] | None = None
        for start, record in numbered_records(reader):
            if isinstance(record, csv.Error):
                self.errors.append(RowError(start, f"Not valid CSV: {record}."))
                if header is None:
                    return
                continue
            if not any(cell.strip() for cell in record):
                continue  # a blank line
            if header is None:
                header = [cell.strip() for cell in record]
                if not self._check_header(start, header):
                    return
                continue
            self._counted()
            if len(record) != len(header):
                self.errors.append(RowError(start, f"The row has {len(record)} cells; the header has {len(header)}."))
                continue
            cells = dict(zip(header, record, strict=True))
            fields = {name: cells[name] for name in self.field_names}
            optional = {key: cells.get(key) or None for key in CSV_OPTIONAL_COLUMNS if key not in self.field_names}
            self._check(start, fields, optional)

    def _check_header(self, line: int, header: list[str]) -> bool:
        allowed_optional = [c for c in CSV_OPTIONAL_COLUMNS if c not in self.field_names]
        problems = []
        if any(not name for name in header):
            problems.append("A column has no name.")
        repeated = sorted({name for name in header if name and header.count(name) > 1})
        if repeated:
            problems.append(f"Columns named twice: {repeated}.")
        missing = [name for name in self.field_names if name not in header]
        unknown = [name for name in dict.fromkeys(header)
                   if name and name not in self.field_names and name not in allowed_optional]
        if missing or unknown:
            problems.append(f"The header must name the context fields {self.field_names}, and may add "
                            f"{allowed_optional}; missing {missing}, unknown {unknown}.")
        self.errors.extend(RowError(line, problem) for problem in problems)
        return not problems

    # --- one row ---

    def _check(self, line: int, fields, optional: dict, *, wrapped: bool = False) -> None:
        """Check one row; keep it, or record each of its problems."""
        problems = []
        try:
            cleaned = self.config.clean_context_fields(fields)
        except InvalidInput as exc:
            for path, messages in exc.errors.items():
                # "fields.premise" names a field; "fields" is the row's set of fields as a whole.
                if path != "fields":
                    prefix = f"{path.removeprefix('fields.')}: "
                else:
                    prefix = "fields: " if wrapped else ""
                problems += [prefix + message for message in messages]
            cleaned = None
        else:
            problems += [f"{name}: {problem}" for name, value in cleaned.items()
                         if (problem := _unicode_problem(value))]
        external_id = optional.get("external_id")
        tag = optional.get("tag")
        metadata = optional.get("metadata")
        for key, value, limit in (("external_id", external_id, EXTERNAL_ID_MAX_LENGTH),
                                  ("tag", tag, TAG_MAX_LENGTH)):
            problem = _optional_text_problem(value, limit)
            if problem:
                problems.append(f"{key}: {problem}")
        if metadata is not None:
            if not isinstance(metadata, dict):
                problems.append(f"metadata: Must be a JSON object, not {json_type(metadata)}.")
            elif problem := _json_text_problem(metadata):
                problems.append(f"metadata: {problem}")
        if isinstance(external_id, str) and external_id:
            first = self.first_line_of.setdefault(external_id, line)
            if first != line:
                problems.append(f"external_id {external_id!r} repeats the row on line {first}.")
        if problems:
            self.errors.extend(RowError(line, problem) for problem in problems)
            return
        row = {"fields": cleaned, "external_id": external_id or "", "tag": tag or ""}
        if metadata:
            row["metadata"] = metadata
        self.rows.append(row)


def _optional_text_problem(value, max_length: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        return f"Must be text, not {json_type(value)}."
    if len(value) > max_length:
        return f"Must be at most {max_length} characters (got {len(value)})."
    if "\x00" in value:
        return "Must not contain NUL characters."
    return _unicode_problem(value)


def _unicode_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "Must be valid Unicode text (it holds a lone surrogate such as \\ud800)."
    return None


def _json_text_problem(value) -> str | None:
    """NUL characters or lone surrogates anywhere in a JSON value (keys too): neither can be stored."""
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _json_text_problem(key) or _json_text_problem(item)
            if problem:
                return problem
    elif isinstance(value, list):
        for item in value:
            problem = _json_text_problem(item)
            if problem:
                return problem
    elif isinstance(value, str):
        if "\x00" in value:
            return "Must not contain NUL characters."
        return _unicode_problem(value)
    return None


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


# --- writing ------------------------------------------------------------------------


def upload_contexts(task: Task, rnd: Round, data: bytes, *, file_format: str | None = None, filename: str = "",
                    user) -> UploadReport:
    """Add the contexts of a file to round ``rnd`` of ``task``, all or nothing.

    Only the task's researchers may (``Forbidden``); a round of another task, round 0
    and a closed round are refused (``Conflict``). Any bad row and nothing is written:
    ``UploadRefused`` (an ``InvalidInput``) lists the problems by line. Rows whose
    ``external_id`` the task has already are skipped."""
    check_upload_allowed(task, rnd, user)
    rows, errors, count = _read(task, data, file_format=file_format, filename=filename)
    if errors:
        raise UploadRefused(UploadReport(created=0, skipped=0, errors=errors, rows=count))
    with transaction.atomic():
        # The round's row lock: a round closed meanwhile takes nothing.
        locked = Round.objects.select_for_update().get(pk=rnd.pk)
        check_upload_allowed(task, locked, user)
        try:
            created, skipped = add_contexts(task, rows, round=locked)
        except ValidationError as exc:  # the checks above mirror Context's; this is a rule they miss
            raise InvalidInput({"file": exc.messages}, "A row does not fit a context; nothing was added.") from None
    log.info("contexts uploaded to %s by %s: %d created, %d skipped", locked, user, created, skipped)
    return UploadReport(created=created, skipped=skipped, errors=[], rows=count)
