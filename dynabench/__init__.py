import os

# How long an idle OpenMP worker thread spins before it sleeps (GNU libgomp, which
# torch's CPU wheel uses); read once, when torch first loads, so it is set here,
# before any of our processes imports torch. The default spin lasts milliseconds of
# CPU after every model pass: on a small box that is a core taken from the web
# process's writes, the Celery worker's bookkeeping and the database, right when
# they run. 10000 spins keep the threads hot between the operations of one pass
# and let them sleep soon after it (a small fraction of that CPU after a pass, the
# pass itself as fast). Set GOMP_SPINCOUNT to override.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

from .celery import app as celery_app  # noqa: E402

__all__ = ["celery_app"]
