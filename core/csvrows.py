"""CSV records with the physical line each starts on (a quoted cell may span lines),
for error messages that point at the right line. No Django here."""

from __future__ import annotations

import csv
from collections.abc import Iterator


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
