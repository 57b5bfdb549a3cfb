"""Exports of a task's examples as jobs: a researcher asks for a selection of the
task's examples (``exporting.Selection``: a round, a split, retracted and flagged ones
left out unless asked...), and a Job writes them with the one exporter
(``annotation.exporting``), a page of rows at a time, reporting its progress; the file
is kept for the task's researchers to download from the job's page
(``jobs.files``)."""

from __future__ import annotations

import os
import tempfile

from django.db import transaction
from django.utils import timezone

from core import celery_names
from core.errors import Forbidden, InvalidInput, NotFound
from jobs.engine import JobReporter, create_job, enqueue_by_name, run_job
from jobs.files import delete_job_file, save_job_file
from jobs.models import Job
from tasks.models import Task
from tasks.roles import is_researcher

from .exporting import FORMATS, PHASES, Selection, write_examples


def start_export(user, task: Task, selection: Selection, fmt: str = "csv") -> Job:
    """Queue a job that exports ``selection`` of ``task``'s examples as ``fmt``; only the
    task's researchers may. A round the task lacks is refused here, before queueing."""
    if not is_researcher(user, task):
        raise Forbidden(f"Only the researchers of task {task.slug} can export its examples.")
    if selection.task_id != task.pk:
        raise InvalidInput({"task": "The selection is of another task."})
    if fmt not in FORMATS:
        raise InvalidInput({"format": f"{fmt!r} is not one of {', '.join(FORMATS)}."})
    selection.examples(task)  # NotFound: no such round
    job = create_job(Job.Kind.EXPORT_EXAMPLES, params={"format": fmt, **selection.to_params()}, task=task,
                     user=user)
    enqueue_by_name(job, celery_names.EXPORT_EXAMPLES)
    return job


def _phases(fmt: str) -> dict[str, tuple[float, float]]:
    """Each pass's (start, share) of the job's 0-100%."""
    spans, start = {}, 0.0
    for label, share in PHASES[fmt]:
        spans[label] = (start, share)
        start += share
    return spans


def export_work(job: Job, reporter: JobReporter) -> dict:
    task = job.task
    if task is None:
        raise NotFound("The task of this export was deleted.")
    user = job.created_by
    if user is None or not is_researcher(user, task):
        raise Forbidden(f"Who asked for this export no longer researches task {task.slug}: nothing was exported.")
    params = dict(job.params)
    fmt = params.pop("format", "csv")
    if fmt not in FORMATS:
        raise InvalidInput({"format": f"{fmt!r} is not one of {', '.join(FORMATS)}."})
    selection = Selection.from_params(task.pk, params)
    reporter.progress(0, f"exporting the examples of {task.slug} ({selection.describe()}) as {fmt}")
    spans, said = _phases(fmt), set()

    def advance(label: str, done: int, total: int) -> None:
        start, share = spans[label]
        message = ""
        if label not in said:
            said.add(label)
            message = f"{label}: {total} examples"
        # 100% is the file stored (``complete``), not the last row read.
        reporter.progress(min(99.0, 100 * (start + share * (done / total if total else 1))), message)

    handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", newline="", suffix=f".{fmt}", delete=False)
    try:
        with handle:
            report = write_examples(task, handle, selection, fmt=fmt, advance=advance)
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        stored = save_job_file(job, handle.name, f"{task.slug}-examples-{stamp}-job{job.pk}.{fmt}")
    finally:
        os.unlink(handle.name)
    result = {**stored, "format": fmt, "rows": report.rows, "columns": len(report.columns),
              "selection": selection.describe()}
    if report.cells_left_out:
        result["cells_left_out"] = report.cells_left_out
    reporter.progress(99, f"wrote {report.rows} examples ({stored['bytes']} bytes)"
                      + (f"; {report.cells_left_out} values of rows changed meanwhile were left out"
                         if report.cells_left_out else ""))
    try:
        with transaction.atomic():
            reporter.complete(result)
    except BaseException:
        delete_job_file(stored["file"])  # cancelled at the last moment: no file without its job
        raise
    return result


def run_export_job(job_id: int) -> Job:
    return run_job(job_id, export_work)
