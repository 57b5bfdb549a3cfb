import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")
application = get_wsgi_application()


def _a_core_left_for_the_request_threads() -> None:
    """Embedded mode: the model runs on one torch thread fewer than the process has
    cores (at least one) unless ``DYNABENCH_TORCH_THREADS`` says otherwise, so the
    request threads keep a core. On two cores, one torch thread gave the same
    throughput under load with a lower median latency (bench/RESULTS.md: "The web
    process's torch threads"). Training jobs this process runs share the setting: a
    process that serves annotators does not give all its cores to a job. Service mode
    runs no model here, and its workers share their cores out themselves."""
    from annotation.inference import embedded

    if embedded():
        os.environ.setdefault("DYNABENCH_TORCH_THREADS", str(max(1, len(os.sched_getaffinity(0)) - 1)))


def _warm_up() -> None:
    """Embedded mode: load the open rounds' target models now, on the model thread,
    so the first example does not wait for a load. This runs where the application is
    imported: each gunicorn worker after its fork (never use --preload, which would
    load torch in the parent; see docs/operations.md: "Torch and fork"), and runserver's serving process."""
    from annotation.inference import embedded
    from annotation.runtime import warm_up_in_background

    if embedded() and os.environ.get("DYNABENCH_WARM_UP", "1") != "0":
        warm_up_in_background()


def _resume_jobs() -> None:
    """Embedded mode: run the jobs that wait (``make run`` queues the demo models'
    training before it serves), on this process's background job thread."""
    import logging

    from django.db import DatabaseError

    from jobs.engine import resume_queued_jobs

    try:
        sent = resume_queued_jobs()
    except DatabaseError as exc:  # not migrated yet: nothing can be queued
        logging.getLogger(__name__).warning("queued jobs not resumed: %s", exc)
        return
    if sent:
        logging.getLogger(__name__).info("resumed queued jobs %s on the background job thread", sent)


_a_core_left_for_the_request_threads()
_warm_up()
_resume_jobs()
