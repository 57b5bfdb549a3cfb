import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")
application = get_wsgi_application()


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

    from tasks.jobs import resume_queued_jobs

    try:
        sent = resume_queued_jobs()
    except DatabaseError as exc:  # not migrated yet: nothing can be queued
        logging.getLogger(__name__).warning("queued jobs not resumed: %s", exc)
        return
    if sent:
        logging.getLogger(__name__).info("resumed queued jobs %s on the background job thread", sent)


_warm_up()
_resume_jobs()
