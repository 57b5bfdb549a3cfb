# Long on purpose: one job's whole life (queue, send in either mode, run, heartbeat, cancel, re-run, sweep)
# in one place.
"""Long jobs: a Job row that pages show, its queue, its heartbeat, cancel, re-run and the sweeper.

The life of a job::

    queued --claim--> running --work returns--> succeeded
       |                 |------ work raises --> failed
       |                 |------ cancel -------> cancelled   (the worker stops at its next report)
       |                 '-- no heartbeat ----> queued again once (the sweeper), then failed
       '------ cancel ----------------------------> cancelled

A worker *claims* a job by moving it from queued to running and counting an
attempt; every later write of that worker is conditioned on (running, same
attempt). So a worker whose job was cancelled, or swept and handed to another
worker, matches no row at its next report and stops (``JobStopped``) instead of
writing over someone else's state. Celery redelivers a job whose worker died
(``acks_late``); the claim makes a redelivered or duplicate message harmless.

Embedded mode (no broker): a job runs on one background thread of the web
process, in order, so a request that starts a training job answers at once.
``JOBS_RUN_INLINE`` (the tests) runs it in the caller instead.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import IntegrityError, close_old_connections, transaction
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from core.errors import Conflict, DomainError, RetryLater

from .models import Job

log = logging.getLogger(__name__)


class JobStopped(Exception):
    """The job is no longer this worker's to run: cancelled, or swept and re-queued."""


def _stamp() -> str:
    return timezone.now().strftime("%H:%M:%S")


def _log_line(message: str):
    return Concat(F("log"), Value(f"[{_stamp()}] {message}\n"))


def create_job(kind: str, *, params: dict | None = None, task=None, user=None, rerun_of: Job | None = None) -> Job:
    """A queued Job row. A second active training job for the same task is refused (409)."""
    try:
        with transaction.atomic():
            return Job.objects.create(kind=kind, params=params or {}, task=task, created_by=user,
                                      rerun_of=rerun_of)
    except IntegrityError:
        active = Job.objects.filter(task=task, kind=kind, status__in=Job.ACTIVE).first()
        if active is None:
            raise
        raise Conflict(f"Task {task.slug} already has a training job {active.status}: job #{active.pk}. "
                       "Wait for it to finish or cancel it first.") from None


# --- sending -----------------------------------------------------------------------

RUNNER_NAME = "dynabench-jobs"
_embedded_runner: ThreadPoolExecutor | None = None
_runner_lock = threading.Lock()
_task_modules_lock = threading.Lock()


def _runner() -> ThreadPoolExecutor:
    global _embedded_runner
    with _runner_lock:
        if _embedded_runner is None:
            _embedded_runner = ThreadPoolExecutor(max_workers=1, thread_name_prefix=RUNNER_NAME)
        return _embedded_runner


_pending = 0  # jobs handed to the background thread and not yet finished there
_idle = threading.Condition()


def _count_pending(change: int) -> None:
    global _pending
    with _idle:
        _pending += change
        _idle.notify_all()


def _run_in_background(task, *args) -> None:
    def run():
        close_old_connections()
        try:
            task.apply(args=list(args), throw=False)
        except Exception:  # recorded on the job by run_job; never kill the runner thread
            log.exception("embedded task %s%s", task.name, args)
        finally:
            close_old_connections()
            _count_pending(-1)

    _count_pending(+1)
    try:
        _runner().submit(run)
    except BaseException:  # not handed over (the runner is shut down at exit): nothing to wait for
        _count_pending(-1)
        raise


def wait_for_background_jobs(timeout: float) -> bool:
    """Embedded mode: wait until this process's background job thread has finished every
    job handed to it (the jobs those jobs queue run inside them), its database work
    included; False if ``timeout`` seconds pass first. A retry still waiting on its
    timer (``_send_later``) is not handed to the thread yet, so it is not waited for."""
    with _idle:
        return _idle.wait_for(lambda: _pending == 0, timeout)


_held = threading.local()


@contextmanager
def held_for_the_server():
    """Embedded mode: jobs queued inside the block are left queued, not run by this
    process. For a command that queues jobs and exits (``bootstrap_demo --background``):
    a job started on its background thread would die with it. The web process runs
    them when it starts (``resume_queued_jobs``). Service mode sends them as usual."""
    before = getattr(_held, "on", False)
    _held.on = True
    try:
        yield
    finally:
        _held.on = before


def _send(job: Job, task) -> None:
    if task.app.conf.task_always_eager:  # embedded mode
        if getattr(_held, "on", False):
            log.debug("job %s left queued for the server to run", job.pk)
            return
        if getattr(settings, "JOBS_RUN_INLINE", False) or threading.current_thread().name.startswith(RUNNER_NAME):
            # Inline; or queued by a job on the background thread (a training job's
            # evaluation): run next, before the jobs queued behind it, so a model's
            # evaluation follows its training at once rather than after every other training.
            task.apply(args=[job.pk], throw=False)
        else:
            _run_in_background(task, job.pk)
        return
    result = task.apply_async(args=[job.pk], queue=job.queue or None)
    Job.objects.filter(pk=job.pk).update(celery_task_id=result.id or "")


def _send_later(job: Job, seconds: float) -> None:
    """Send a job that was queued again, ``seconds`` from now: with the broker's countdown
    in service mode; on the background runner after a timer in embedded mode. Inline
    (``JOBS_RUN_INLINE``, the tests) it is left queued for the caller to run."""
    task = celery_task(job.celery_task_name)
    if not task.app.conf.task_always_eager:
        task.apply_async(args=[job.pk], queue=job.queue or None, countdown=seconds)
    elif not getattr(settings, "JOBS_RUN_INLINE", False):
        timer = threading.Timer(seconds, _run_in_background, args=(task, job.pk))
        timer.daemon = True
        timer.start()


def enqueue(job: Job, task, queue: str | None = None) -> None:
    """Send the Celery ``task`` with ``job.id`` on ``queue`` once the current transaction commits."""
    job.celery_task_name, job.queue = task.name, queue or settings.CELERY_TASK_DEFAULT_QUEUE
    Job.objects.filter(pk=job.pk).update(celery_task_name=job.celery_task_name, queue=job.queue)
    transaction.on_commit(lambda: _send(job, task))


def enqueue_by_name(job: Job, name: str, queue: str | None = None) -> None:
    """``enqueue`` with the Celery task named ``name``: a service queues its own app's
    task without importing the module that defines it (which imports the service)."""
    enqueue(job, celery_task(name), queue)


def celery_task(name: str):
    """The Celery task registered as ``name`` (an app's services and clients send their
    own app's tasks by name, so they need not import the module that defines them)."""
    if name not in current_app.tasks:
        # A process that has imported no task module yet (a web process at start):
        # the apps' task modules are found as a worker finds them, by one thread while
        # the others wait (two importing at once left one without the tasks registered).
        with _task_modules_lock:
            if name not in current_app.tasks:
                current_app.loader.import_default_modules()
    return current_app.tasks[name]


def send_task(name: str, *args) -> None:
    """Send the Celery task ``name`` now (in embedded mode: run it here), for small
    housekeeping tasks that are not jobs. Called by a lower app that must not import
    the higher one's task module."""
    celery_task(name).delay(*args)


def send_task_in_background(name: str, *args) -> None:
    """Like ``send_task``, for housekeeping that must not hold up its caller (a refit
    after a vote): in embedded mode it runs on the process's background job thread,
    not in the request (inline only under ``JOBS_RUN_INLINE``, the tests)."""
    task = celery_task(name)
    if task.app.conf.task_always_eager and not getattr(settings, "JOBS_RUN_INLINE", False) \
            and not threading.current_thread().name.startswith(RUNNER_NAME):
        _run_in_background(task, *args)
        return
    task.delay(*args)


def requeue(job: Job) -> None:
    """Send an existing queued job again, with the task that first ran it."""
    transaction.on_commit(lambda: _send(job, celery_task(job.celery_task_name)))


def resume_queued_jobs() -> list[int]:
    """Embedded mode: send every queued job to this process's background runner, and
    the running ones whose process stopped.

    ``bootstrap_demo --background`` (``make run``) queues the demo models' training
    from a command that exits at once; a web process restarted while jobs waited left
    them queued too. The claim makes a job that two processes send run once.
    Returns the ids sent."""
    if not current_app.conf.task_always_eager:
        return []  # service mode: the broker holds them
    # A job "running" in a process that was stopped (Ctrl-C during `make run`, a restart)
    # would stay so: nothing sweeps in embedded mode. One silent for
    # EMBEDDED_JOB_STALE_SECONDS is taken as lost and queued again (sent on commit).
    swept = sweep_stale_jobs(stale=timedelta(seconds=settings.EMBEDDED_JOB_STALE_SECONDS))
    if swept.requeued:
        log.warning("jobs %s were running in a process that stopped; queued again", swept.requeued)
    jobs = list(Job.objects.filter(status=Job.Status.QUEUED).exclude(celery_task_name="")
                .exclude(pk__in=swept.requeued).order_by("pk"))
    for job in jobs:
        _send(job, celery_task(job.celery_task_name))
    return sorted([*swept.requeued, *(job.pk for job in jobs)])


# --- running --------------------------------------------------------------------------


class JobReporter:
    """Writes progress, log lines and the heartbeat of one attempt of a job.

    Every write is conditioned on the job still being this attempt's and running;
    when it is not (cancelled, swept) the write raises ``JobStopped``, which ends
    the work at its next report.
    """

    def __init__(self, job_id: int, attempt: int | None = None):
        self.job_id = job_id
        self.attempt = attempt
        self._last_percent = -1
        self.completed = False

    def _mine(self):
        rows = Job.objects.filter(pk=self.job_id)
        if self.attempt is not None:
            rows = rows.filter(status=Job.Status.RUNNING, attempts=self.attempt)
        return rows

    def progress(self, percent: float, message: str = "") -> None:
        pct = max(0, min(100, int(percent)))
        updates = {"heartbeat_at": timezone.now()}
        if pct != self._last_percent:
            updates["progress"] = pct
            self._last_percent = pct
        if message:
            updates["log"] = _log_line(message)
        if not self._mine().update(**updates) and self.attempt is not None:
            raise JobStopped(f"job {self.job_id} is no longer running here")

    __call__ = progress

    def beat(self) -> None:
        """A heartbeat without progress, for long steps."""
        self.progress(max(self._last_percent, 0))

    def complete(self, result: dict) -> None:
        """Mark the job succeeded; call it inside the transaction that commits the
        job's outcome, so a cancel either comes before (nothing committed) or after."""
        mine = self._mine().select_for_update()
        if self.attempt is not None and not mine.exists():
            raise JobStopped(f"job {self.job_id} is no longer running here")
        mine.update(status=Job.Status.SUCCEEDED, finished_at=timezone.now(), progress=100, result=result,
                    heartbeat_at=timezone.now())
        self.completed = True


def claim(job_id: int) -> int | None:
    """Move a queued job to running for a new attempt; None if it is not queued."""
    now = timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id, status=Job.Status.QUEUED).first()
        if job is None:
            return None
        attempt = job.attempts + 1
        Job.objects.filter(pk=job_id).update(
            status=Job.Status.RUNNING, attempts=attempt, started_at=now, heartbeat_at=now, error="",
            progress=0, log=_log_line(f"attempt {attempt} started"),
        )
    return attempt


def run_job(job_id: int, work: Callable[[Job, JobReporter], dict]) -> Job:
    """Claim the job and run ``work(job, reporter)``; record its outcome.

    Re-raises nothing: a failure is recorded on the job, not lost. A job that is
    not queued (finished, cancelled, or running elsewhere) is left alone.
    """
    attempt = claim(job_id)
    if attempt is None:
        job = Job.objects.get(pk=job_id)
        log.info("job %s is %s; not running it again", job_id, job.status)
        return job
    job = Job.objects.select_related("task", "created_by").get(pk=job_id)
    reporter = JobReporter(job_id, attempt)
    try:
        result = work(job, reporter) or {}
        if not reporter.completed:
            with transaction.atomic():
                reporter.complete(result)
    except JobStopped as exc:
        log.info("job %s attempt %s stopped: %s", job_id, attempt, exc)
        Job.objects.filter(pk=job_id, status=Job.Status.CANCELLED, finished_at__isnull=True).update(
            finished_at=timezone.now(), log=_log_line("stopped: cancelled"))
    except RetryLater as exc:  # the artifact store is down: worth another attempt later, not a failure yet
        if attempt < settings.JOB_MAX_ATTEMPTS and job.celery_task_name:
            log.warning("job %s attempt %s: %s; queued again in %s s", job_id, attempt, exc, exc.retry_after)
            again = reporter._mine().update(
                status=Job.Status.QUEUED, progress=0,
                log=_log_line(f"{exc} Queued again in {exc.retry_after} s "
                              f"(attempt {attempt + 1} of {settings.JOB_MAX_ATTEMPTS})."))
            if again:
                transaction.on_commit(lambda wait=exc.retry_after: _send_later(job, wait))
        else:
            reporter._mine().update(status=Job.Status.FAILED, finished_at=timezone.now(), error=str(exc),
                                    log=_log_line(f"failed after {attempt} attempt(s): {exc}"))
    except DomainError as exc:  # a refusal with its reason (a submitted model that fails its check): no traceback
        log.info("job %s refused: %s", job_id, exc)
        reporter._mine().update(status=Job.Status.FAILED, finished_at=timezone.now(), error=str(exc),
                                log=_log_line(f"failed: {exc}"))
    except Exception as exc:
        log.exception("job %s failed", job_id)
        reporter._mine().update(
            status=Job.Status.FAILED, finished_at=timezone.now(),
            error=f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc(limit=8)}",
            log=_log_line(f"failed: {type(exc).__name__}: {exc}"),
        )
    return Job.objects.get(pk=job_id)


def wait_for_job(job: Job, *, on_log: Callable[[str], None] | None = None, timeout: float | None = None,
                 poll_seconds: float = 0.5) -> Job:
    """Poll ``job`` until it has finished, passing each new line of its log to ``on_log``.

    It only reads the Job row, so it works wherever the job runs: inline (already
    finished), on the embedded background thread, or on a Celery worker. A job is
    sent when the transaction that queued it commits: waiting inside that
    transaction would never end, so it is refused. Raises ``TimeoutError`` after
    ``timeout`` seconds (the job goes on).
    """
    job.refresh_from_db()
    if transaction.get_connection().in_atomic_block and job.status == Job.Status.QUEUED:
        raise RuntimeError(f"Job #{job.pk} starts when the current transaction commits; "
                           "wait for it outside the transaction.")
    started, shown = time.monotonic(), 0
    while True:
        job.refresh_from_db()
        lines = job.log.splitlines()
        if on_log is not None:
            for line in lines[shown:]:
                on_log(line)
        shown = len(lines)
        if job.status in Job.FINISHED:
            return job
        if timeout is not None and time.monotonic() - started > timeout:
            raise TimeoutError(f"job #{job.pk} is still {job.status} after {timeout:.0f} s")
        time.sleep(poll_seconds)


# --- researcher actions -----------------------------------------------------------


def cancel_job(job: Job, user=None) -> Job:
    """Cancel a queued or running job. A running one stops at its next progress report;
    what it would have registered is never registered."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.status not in Job.ACTIVE:
            raise Conflict(f"Job #{job.pk} has {job.status} already; only a queued or running job can be cancelled.")
        was_running = job.status == Job.Status.RUNNING
        who = f" by {user.get_username()}" if user is not None else ""
        Job.objects.filter(pk=job.pk).update(
            status=Job.Status.CANCELLED, log=_log_line(f"cancelled{who}"),
            finished_at=None if was_running else timezone.now(),
        )
    job.refresh_from_db()
    return job


def rerun_job(job: Job, user=None) -> Job:
    """A new job with the same kind and parameters as a finished one."""
    if job.status in Job.ACTIVE:
        raise Conflict(f"Job #{job.pk} is {job.status}; cancel it or wait for it before running it again.")
    if job.kind == Job.Kind.CHECK_SUBMISSION:
        raise Conflict(f"Job #{job.pk} checked an uploaded model, whose archive is removed when its check ends; "
                       "the model is uploaded again instead.")
    if job.kind == Job.Kind.TRAIN_MODEL and job.status == Job.Status.SUCCEEDED:
        raise Conflict(f"Job #{job.pk} succeeded and registered its model; start a new training job instead.")
    if job.kind == Job.Kind.RELEASE_DATASET and job.status == Job.Status.SUCCEEDED:
        raise Conflict(f"Job #{job.pk} succeeded and published its release; a release is never made twice from "
                       "one job. Make a new release instead.")
    if not job.celery_task_name:
        raise Conflict(f"Job #{job.pk} was run outside a queue; it cannot be re-run from here.")
    new = create_job(job.kind, params=job.params, task=job.task, user=user or job.created_by, rerun_of=job)
    enqueue(new, celery_task(job.celery_task_name), queue=job.queue or None)
    return new


# --- the sweeper -------------------------------------------------------------------------


@dataclass
class SweepReport:
    requeued: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)


def stale_after() -> timedelta:
    return timedelta(seconds=settings.JOB_STALE_SECONDS)


def sweep_stale_jobs(now=None, stale: timedelta | None = None) -> SweepReport:
    """Running jobs whose worker stopped beating (killed, lost) for ``stale`` (default
    ``JOB_STALE_SECONDS``): re-queued once (``JOB_MAX_ATTEMPTS``), then failed.
    Cancelled jobs whose worker died before it noticed are closed."""
    now = now or timezone.now()
    cutoff = now - (stale if stale is not None else stale_after())
    report = SweepReport()
    stale = Job.objects.filter(status__in=[Job.Status.RUNNING, Job.Status.CANCELLED], finished_at__isnull=True,
                               heartbeat_at__lt=cutoff)
    for job_id in stale.values_list("pk", flat=True):
        with transaction.atomic():
            job = Job.objects.select_for_update().filter(pk=job_id).first()
            if job is None or job.finished_at is not None or not job.heartbeat_at or job.heartbeat_at >= cutoff:
                continue
            silent = int((now - job.heartbeat_at).total_seconds())
            if job.status == Job.Status.CANCELLED:
                Job.objects.filter(pk=job.pk).update(finished_at=now)
                report.closed.append(job.pk)
            elif job.attempts < settings.JOB_MAX_ATTEMPTS and job.celery_task_name:
                Job.objects.filter(pk=job.pk).update(
                    status=Job.Status.QUEUED, progress=0,
                    log=_log_line(f"no heartbeat for {silent} s (worker lost); queued again "
                                  f"(attempt {job.attempts + 1} of {settings.JOB_MAX_ATTEMPTS})"),
                )
                requeue(job)
                report.requeued.append(job.pk)
            else:
                Job.objects.filter(pk=job.pk).update(
                    status=Job.Status.FAILED, finished_at=now,
                    error=f"No heartbeat for {silent} s: the worker was lost (killed or out of memory) "
                          f"after {job.attempts} attempt(s). Nothing it was doing was registered.",
                    log=_log_line(f"no heartbeat for {silent} s; failed after {job.attempts} attempt(s)"),
                )
                report.failed.append(job.pk)
    return report
