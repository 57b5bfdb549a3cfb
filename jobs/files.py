"""Files that jobs make (an export of a task's examples): kept in the ``job_files``
storage (``STORAGES``; by default the folder ``DYNABENCH_JOB_FILES_DIR``, which the web
and the workers must share), named in the job's result, and downloaded from the job's
page by the researchers of the job's task only (``tasks.views.job_file``). A file is
stored whole once its job has written it: a job that fails or is cancelled leaves none."""

from __future__ import annotations

from pathlib import Path

from django.core.files import File
from django.core.files.storage import storages

from core.errors import Gone, NotFound

from .models import Job

STORAGE = "job_files"


def storage():
    return storages[STORAGE]


def save_job_file(job: Job, local_path: str | Path, filename: str) -> dict:
    """Store the file at ``local_path`` as ``job``'s result file, downloaded as
    ``filename``; the entries for the job's result: ``file`` (its name in the storage),
    ``filename`` and ``bytes``."""
    size = Path(local_path).stat().st_size
    with open(local_path, "rb") as handle:
        name = storage().save(f"job-{job.pk}/{filename}", File(handle, name=filename))
    return {"file": name, "filename": filename, "bytes": size}


def delete_job_file(name: str) -> None:
    storage().delete(name)


def open_job_file(job: Job):
    """``(binary file, filename)`` of a finished job's file; NotFound if it made none,
    Gone if it was removed from the storage since."""
    name = (job.result or {}).get("file")
    if job.status != Job.Status.SUCCEEDED or not name:
        raise NotFound(f"Job #{job.pk} has no file" + (" yet." if job.is_active else "."))
    try:
        return storage().open(name, "rb"), job.result.get("filename") or Path(name).name
    except FileNotFoundError:
        raise Gone(f"The file of job #{job.pk} was removed; run the job again to make it anew.") from None
