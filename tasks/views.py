import logging

from django.db import connection
from django.db.models import Count, Prefetch
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from .models import Round, Task

log = logging.getLogger(__name__)


def home(request):
    tasks = (
        Task.objects.public()
        .annotate(round_count=Count("rounds"))
        .prefetch_related(Prefetch("rounds", queryset=Round.objects.filter(status=Round.Status.OPEN),
                                   to_attr="open_rounds"))
        .order_by("name")
    )
    return render(request, "tasks/home.html", {"tasks": tasks})


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
