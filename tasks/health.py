"""The health check, written once: ``/healthz`` (for load balancers) and the
``dynabench.health_check`` Celery task (a round trip through broker and worker) both
report what ``database_health`` finds."""

from __future__ import annotations

from django.db import connection


def database_health() -> dict:
    """A round trip to the database: ``{"ok": ..., "database": <vendor>}``. What the
    database raises (it is down, unreachable, refusing) is raised to the caller, which
    decides: the page answers 503, the task fails."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        ok = cursor.fetchone()[0] == 1
    return {"ok": ok, "database": connection.vendor}
