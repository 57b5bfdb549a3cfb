from django.db import connection
from django.db.models import Count, Prefetch, Q
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils.safestring import mark_safe
from django.views.decorators.cache import never_cache

from .charts import error_rate_chart
from .models import Round, Task


def home(request):
    tasks = (
        Task.objects.public()
        .annotate(round_count=Count("rounds"))
        .prefetch_related(Prefetch("rounds", queryset=Round.objects.filter(status=Round.Status.OPEN),
                                   to_attr="open_rounds"))
        .order_by("name")
    )
    return render(request, "tasks/home.html", {"tasks": tasks})


def task_detail(request, slug):
    task = get_object_or_404(Task.objects.visible_to(request.user), slug=slug)
    rounds = list(
        task.rounds.annotate(target_count=Count("target_models", filter=Q(target_models__status="ready")))
        .order_by("number")
    )
    open_round = next((r for r in rounds if r.status == Round.Status.OPEN), None)
    chart = error_rate_chart([(r.number, r.model_error_rate, r.verified_model_error_rate) for r in rounds])
    return render(request, "tasks/task_detail.html", {
        "task": task, "rounds": rounds, "open_round": open_round, "config": task.parsed_config,
        "chart": mark_safe(chart),  # built from numbers only, see tasks/charts.py
    })


@never_cache
def healthz(request):
    """Liveness plus a database round trip, for load balancers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return JsonResponse({"ok": True, "database": connection.vendor})
    except Exception as exc:  # report, don't crash the probe
        return JsonResponse({"ok": False, "error": type(exc).__name__}, status=503)
