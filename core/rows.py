"""Rows of files, the one reader for every file the platform takes in: JSON lines and
CSV records with the physical line each starts on (a quoted cell may span lines), and
``RowError``, one problem with one row, for error messages that point at the right
line. Uploads (``tasks.uploads``, untrusted) and data set imports
(``datafiles.readers``) both read through here. Also ``spreadsheet_safe`` for the CSV
files the platform writes. No Django here."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator
from typing import NamedTuple

# The API (core.parsers) refuses JSON bodies nested deeper with the same check.
MAX_JSON_DEPTH = 32


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Whether the JSON text nests arrays and objects deeper than ``limit``.

    Cheap for ordinary bodies: only a text with more than ``limit`` opening brackets
    in all is scanned (strings skipped)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
    return False


class RowError(NamedTuple):
    """A problem with a row of a file: the line the row starts on, and what is wrong."""

    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"

# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection):
# "=HYPERLINK(...)" in an example's text or a model's name must stay text.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")


def spreadsheet_safe(value):
    """``value`` as a CSV cell no spreadsheet runs: text that starts like a formula gets a
    leading apostrophe (shown as text, not as a formula); numbers, "-0.5" included, and
    everything else stay as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_START) and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def numbered_records(reader) -> Iterator[tuple[int, list[str] | csv.Error]]:
    """``(line, values)`` for each record ``reader`` (a ``csv.reader``) has left; a
    record that cannot be read comes as its ``csv.Error`` instead of its values."""
    end = reader.line_num
    while True:
        start = end + 1
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            values = exc
        end = reader.line_num
        yield start, values


def json_type(value) -> str:
    """How an error message names a JSON value's type."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "text", list: "an array",
            dict: "an object"}.get(type(value), type(value).__name__)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


def json_object_lines(lines: Iterable[str], start: int = 1) -> Iterator[tuple[int, dict] | RowError]:
    """``(line, object)`` for each non-blank line of JSON lines, or a ``RowError`` for a
    line that is not one JSON object: not JSON, NaN or Infinity (not JSON either),
    nested deeper than ``MAX_JSON_DEPTH``, or another JSON value than an object."""
    for line, raw in enumerate(lines, start):
        if not raw.strip():
            continue
        if json_depth_exceeds(raw, MAX_JSON_DEPTH):
            yield RowError(line, f"JSON nested deeper than {MAX_JSON_DEPTH} levels is not accepted.")
            continue
        try:
            item = json.loads(raw, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            yield RowError(line, f"Not valid JSON: {exc.msg} (column {exc.colno}).")
            continue
        except (ValueError, RecursionError) as exc:
            yield RowError(line, f"Not valid JSON: {exc}.")
            continue
        if not isinstance(item, dict):
            yield RowError(line, f"Each line must be a JSON object, not {json_type(item)}.")
            continue
        yield line, item
