"""The export of a batch's assignments, with what each worker wrote in the HIT's
feedback box: one CSV row per assignment, read a page at a time (``iterator``), so
that a large batch costs memory by the page. Cells a spreadsheet would run as a
formula (=, +, -, @ first) are led by an apostrophe: workers write the feedback."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator

from .models import Assignment

COLUMNS = ["batch", "task", "mode", "hit_id", "assignment_id", "worker_id", "status", "accepted_at", "finished_at",
           "submitted_at", "decided_at", "examples_written", "validations_done", "examples_fooled",
           "worker_feedback"]
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str:
    if value is None:
        return ""
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    return "'" + text if text.startswith(FORMULA_LEADS) else text


def assignment_rows(batch_ids: Iterable[int]) -> Iterator[list[str]]:
    """The header, then one row per assignment of the batches, in batch and arrival order."""
    yield COLUMNS
    assignments = (Assignment.objects.filter(hit__batch_id__in=list(batch_ids))
                   .select_related("hit__batch__task", "worker", "session")
                   .order_by("hit__batch_id", "accepted_at", "id"))
    for a in assignments.iterator(chunk_size=500):
        batch = a.hit.batch
        yield [_cell(v) for v in (
            batch.pk, batch.task.slug, batch.mode, a.hit.hit_id, a.assignment_id, a.worker.worker_id, a.status,
            a.accepted_at, a.finished_at, a.submitted_at, a.decided_at, a.session.examples_written,
            a.session.validations_done, a.session.examples_fooled, a.worker_feedback)]


def csv_lines(rows: Iterable[list[str]]) -> Iterator[str]:
    """``rows`` as CSV text, a line at a time (for a streamed response)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for row in rows:
        writer.writerow(row)
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
