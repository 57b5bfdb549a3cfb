"""Model submissions: a signed-in user uploads a zip of a Hugging Face model for a
task. The web request only reads and bounds the upload and looks at the archive's
directory; a worker job checks the model in a child process, registers it and
queues its evaluation on every dataset of the task.

- **In the request** (cheap, no torch): the name; the size, bounded while the body
  is read (``core.uploads``: 413 above ``SUBMISSION_MAX_BYTES``, the byte after the
  limit is never stored); the daily limit; the archive's end record and file list
  (``ml.submissions.inspect_archive``: a zip, safe paths, allowlisted files, no
  pickles or code). Junk is a 400 at once; an archive that passes is kept in the
  incoming folder and a "check a submitted model" job is queued (202).
- **In the job** (``run_submission_check_job``): unpacking, the config's sizes
  against the task's limits (``model_limits``, read as JSON before anything is
  built), loading, two forward passes and saving, all in a child process with at
  most ``SUBMISSION_CHECK_MEMORY_MB`` of memory and ``SUBMISSION_CHECK_SECONDS``
  (``ml.sandbox``), inside bubblewrap (``SUBMISSION_SANDBOX``): no network, nothing of
  ``var/`` or the data sets, none of the worker's environment. A refusal, or a check
  over either limit, fails the job with the reason; the worker carries on. Where the
  sandbox is missing or cannot start, the model is not checked at all: the job fails
  saying so, and the worker's log says why. An accepted model is registered and its
  evaluation queued, in one transaction.
- Per user and task, at most ``SUBMISSIONS_PER_DAY`` attempts a day (refused ones
  count too), counted atomically; the task's researchers are exempt. The count
  lives in the shared cache, and when the cache cannot count, no submission is
  taken (503 with ``Retry-After``): the limit fails closed.
- Per user, at most ``SUBMISSION_CHECKS_QUEUED`` check jobs queued or running at
  once, whatever the task (checks share the training worker); one more is a 429.
- A submission is public or private. A private one shows only to its owner and
  the task's researchers (``visible_models``), on the board, the API and exports.
- Nothing is written outside the models folder's ``.submissions`` work area and
  the task's submissions folder. The job removes its archive and work folder
  whatever happens; one whose worker was killed leaves them, and the next check
  removes those of every job that is no longer running.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction

from core import celery_names
from core.errors import DomainError, InvalidInput, TooLarge, TooMany, Unavailable
from core.ratelimit import Limiter
from jobs.engine import JobReporter, create_job, enqueue_by_name, run_job
from jobs.models import Job
from ml.sandbox import MIB, ChildLimits, Sandbox, SandboxUnavailable, check_in_child
from ml.submissions import SubmissionLimits, SubmissionRejected, inspect_archive
from registry.services import check_new_model_name, models_root, register_model
from tasks.models import Task
from tasks.roles import is_researcher

from .evaluation import start_evaluation
from .rows import ml_spec

log = logging.getLogger(__name__)

DAY = 24 * 3600
WORK_AREA = ".submissions"
_ARCHIVE_NAME = re.compile(r"^[0-9a-f]{32}\.zip$")
# An incoming archive no job refers to (its request died before the job was saved) is
# removed once it is this old.
_ORPHAN_SECONDS = 3600
_HEARTBEAT_SECONDS = 5.0


class ModelRefused(DomainError):
    """A submitted model failed its checks; the message says why, for the submitter."""

    code = "refused"


def limiter() -> Limiter:
    return Limiter("model-submissions", settings.SUBMISSIONS_PER_DAY, DAY)


# --- where uploads wait and are checked -------------------------------------------------


def incoming_folder() -> Path:
    """Archives that passed the request's checks, waiting for their job."""
    return models_root() / WORK_AREA / "incoming"


def checking_folder() -> Path:
    """One work folder per running check job (``job-<id>``): the child's unpacking and the artifact it saves."""
    return models_root() / WORK_AREA / "checking"


def archive_limits():
    return SubmissionLimits(max_archive_bytes=settings.SUBMISSION_MAX_BYTES)


def child_limits():
    return ChildLimits(memory_bytes=settings.SUBMISSION_CHECK_MEMORY_MB * MIB,
                       seconds=settings.SUBMISSION_CHECK_SECONDS, threads=settings.SUBMISSION_CHECK_THREADS)


UNCONFINED = ("WARNING: this model is checked WITHOUT a sandbox (SUBMISSION_SANDBOX=none), with the worker's "
              "rights and network: a development setting only, never for uploads from people you do not trust")
NOT_CHECKED = ("This server cannot check submitted models safely right now (the sandbox it checks them in is not "
               "available), so this model was not checked and nothing of it was kept. The site's operators have "
               "been told; upload it again once they have fixed it.")


def check_sandbox() -> Sandbox | None:
    """The sandbox a check runs in: bubblewrap (``SUBMISSION_SANDBOX``), shown none of
    the private folders (var/, the data sets, the models and job files). None (no
    sandbox) only for ``SUBMISSION_SANDBOX=none`` with DEBUG on; with DEBUG off that is
    :class:`SandboxUnavailable` (the settings refuse it too)."""
    program = settings.SUBMISSION_SANDBOX
    if program.lower() == "none":
        if not settings.DEBUG:
            raise SandboxUnavailable("SUBMISSION_SANDBOX=none (no sandbox) is allowed only with DEBUG on")
        return None
    private = (settings.VAR_DIR, settings.DYNABENCH_DATA_DIR, settings.DYNABENCH_MODELS_DIR,
               settings.DYNABENCH_JOB_FILES_DIR, settings.DYNABENCH_ARTIFACTS_CACHE)
    return Sandbox(program=program, private=tuple(str(folder) for folder in private if folder))


# --- the request ---------------------------------------------------------------------------


def take_daily(user, task: Task) -> None:
    """Count one submission of ``user`` on ``task`` against ``SUBMISSIONS_PER_DAY``:
    TooMany over it; Unavailable when the cache cannot count (``Limiter.hit`` answers
    0 then, where a counted event is 1 or more), so an outage opens no door."""
    limits = limiter()
    key = f"{user.pk}:{task.pk}"
    count = limits.hit(key)  # counted and checked at once: parallel uploads cannot slip past
    if count == 0:
        raise Unavailable("Submissions cannot be counted against the daily limit right now (the shared cache is "
                          "unavailable); nothing was stored. Try again in a minute.", retry_after=60)
    if count > limits.limit:
        wait = limits.retry_after(key) or 1
        raise TooMany(f"At most {settings.SUBMISSIONS_PER_DAY} submissions per task per day; "
                      f"try again in {wait} s.", retry_after=wait)


def check_queued(user) -> None:
    """TooMany when ``user`` already has ``SUBMISSION_CHECKS_QUEUED`` check jobs queued
    or running: one account cannot fill the training worker's queue."""
    waiting = Job.objects.filter(kind=Job.Kind.CHECK_SUBMISSION, created_by=user, status__in=Job.ACTIVE).count()
    if waiting >= settings.SUBMISSION_CHECKS_QUEUED:
        raise TooMany(f"You have {waiting} submitted models waiting for their checks (at most "
                      f"{settings.SUBMISSION_CHECKS_QUEUED} at once); submit again when one is done.", retry_after=60)



def submit_model(task: Task, user, upload, *, name, public: bool = True) -> Job:
    """Take an uploaded model for checking; returns its check job (queued). The model
    is registered, and its evaluation queued, once the job has checked it."""
    name = check_new_model_name(task, name)
    if upload is None:
        raise InvalidInput.field("file", "Upload the model as a .zip file in the 'file' field.")
    if upload.size > settings.SUBMISSION_MAX_BYTES:  # the upload handler stopped larger ones already
        raise TooLarge(f"The archive is {upload.size:,} bytes; the limit is {settings.SUBMISSION_MAX_BYTES:,}.")
    check_queued(user)
    if not is_researcher(user, task):
        take_daily(user, task)
    folder = incoming_folder()
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / f"{uuid.uuid4().hex}.zip"
    partial = archive.with_name(archive.name + ".part")
    try:
        with open(partial, "wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
        os.replace(partial, archive)
        try:
            inspect_archive(archive, limits=archive_limits())
        except SubmissionRejected as exc:
            raise InvalidInput.field("file", str(exc)) from None
        with transaction.atomic():
            job = create_job(Job.Kind.CHECK_SUBMISSION, task=task, user=user,
                             params={"name": name, "public": bool(public), "archive": archive.name})
            enqueue_by_name(job, celery_names.CHECK_SUBMISSION, queue=celery_names.TRAINING_QUEUE)
    except BaseException:
        partial.unlink(missing_ok=True)
        archive.unlink(missing_ok=True)
        raise
    return job



# --- the job ---------------------------------------------------------------------------


def run_submission_check_job(job_id: int) -> Job:
    """Check a submitted model in a child process; register it and queue its evaluation."""

    def work(job: Job, reporter: JobReporter) -> dict:
        remove_leftovers()
        task, params = job.task, job.params
        archive = _incoming_archive(params.get("archive"))
        scratch = checking_folder() / f"job-{job.pk}"
        shutil.rmtree(scratch, ignore_errors=True)  # an attempt of this job whose worker was killed
        dest = None
        try:
            if task is None:
                raise ModelRefused("The task this model was submitted to no longer exists.")
            if archive is None or not archive.is_file():
                raise ModelRefused("The uploaded archive is no longer there (a check runs once); upload the model "
                                   "again.")
            limits = child_limits()
            try:
                sandbox = check_sandbox()
                if sandbox is None:
                    log.warning("job %s: %s", job.pk, UNCONFINED)
                    reporter.progress(5, UNCONFINED)
                reporter.progress(5, f"checking the model in a separate process{' in a sandbox' if sandbox else ''} "
                                     f"(at most {limits.memory_bytes // (1024 * 1024):,} MB of memory and "
                                     f"{limits.seconds:g} s)")
                stages = iter(range(20, 100, 15))
                info = check_in_child(
                    archive, scratch, ml_spec(task), limits=archive_limits(),
                    bounds=task.parsed_config.submission_bounds(), child=limits, sandbox=sandbox,
                    progress=lambda line: reporter.progress(next(stages, 95), line),
                    waiting=_heartbeat(reporter),
                )
            except SubmissionRejected as exc:
                raise ModelRefused(exc.reason) from None
            except SandboxUnavailable as exc:  # the submitter is told it was not checked; the operator why
                log.error("job %s: a submitted model was not checked, its sandbox is unavailable: %s",
                          job.pk, exc.reason)
                raise ModelRefused(NOT_CHECKED) from None
            dest = models_root() / task.slug / "submissions" / uuid.uuid4().hex
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(info.path, dest)
            result: dict = {}
            try:
                with transaction.atomic():
                    model = register_model(task, dataclasses.replace(info, path=dest), name=params["name"],
                                           user=job.created_by)
                    model.is_public, model.submitted = bool(params.get("public", True)), True
                    model.save(update_fields=["is_public", "submitted"])
                    evaluation = start_evaluation(model, user=job.created_by)
                    result.update(model_version=model.pk, name=model.name, evaluation_job=evaluation.pk)
                    reporter.complete(result)  # in the registration's transaction: a cancel wins or loses whole
            except IntegrityError:
                raise ModelRefused(f"Task {task.slug} has a model named {params['name']!r} now; "
                                   "submit this one under another name.") from None
            return result
        except BaseException:
            if dest is not None:
                shutil.rmtree(dest, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
            if archive is not None:
                archive.unlink(missing_ok=True)

    return run_job(job_id, work)


def _incoming_archive(name) -> Path | None:
    if not isinstance(name, str) or not _ARCHIVE_NAME.match(name):
        return None
    return incoming_folder() / name


def _heartbeat(reporter: JobReporter):
    """A ``waiting`` callback that beats every few seconds (it raises ``JobStopped`` once the job is cancelled)."""
    last = time.monotonic()

    def beat() -> None:
        nonlocal last
        if time.monotonic() - last >= _HEARTBEAT_SECONDS:
            last = time.monotonic()
            reporter.beat()

    return beat


def remove_leftovers() -> list[str]:
    """Remove what killed check jobs left behind: the work folders of check jobs that
    are not running, and incoming archives that no queued or running job waits for,
    once their job has ended (or, for one no job refers to, an hour after it was
    written). Returns the names removed."""
    removed: list[str] = []
    checks = Job.objects.filter(kind=Job.Kind.CHECK_SUBMISSION)
    checking = checking_folder()
    if checking.is_dir():
        running = {f"job-{pk}" for pk in checks.filter(status=Job.Status.RUNNING).values_list("pk", flat=True)}
        for path in checking.iterdir():
            if path.name in running:
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path.name)
    incoming = incoming_folder()
    if incoming.is_dir():
        names = {path.name: path for path in incoming.iterdir()}
        waiting = set(checks.filter(status__in=Job.ACTIVE, params__archive__in=list(names))
                      .values_list("params__archive", flat=True))
        ended = set(checks.exclude(status__in=Job.ACTIVE).filter(params__archive__in=list(names))
                    .values_list("params__archive", flat=True))
        old = time.time() - _ORPHAN_SECONDS
        for name, path in names.items():
            try:
                stale = name not in waiting and (name in ended or path.stat().st_mtime < old)
            except FileNotFoundError:  # its job removed it meanwhile
                continue
            if stale:
                path.unlink(missing_ok=True)
                removed.append(name)
    return removed
