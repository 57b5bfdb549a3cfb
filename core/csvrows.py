"""CSV records with the physical line each starts on (a quoted cell may span lines),
for error messages that point at the right line. No Django here."""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator

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
