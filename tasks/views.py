import logging

from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache

log = logging.getLogger(__name__)


@never_cache
def healthz(request):
    """Liveness plus a database round trip, for load balancers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return JsonResponse({"ok": True, "database": connection.vendor})
    except Exception as exc:  # report, don't crash the probe
        log.warning("health check: the database is unavailable: %s", exc)
        return JsonResponse({"ok": False, "error": type(exc).__name__}, status=503)
