import logging

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache

from core.api import http_status
from core.errors import DomainError
from jobs import files as job_files

from .api import visible_jobs
from .health import database_health
from .roles import is_researcher

log = logging.getLogger(__name__)


@never_cache
def healthz(request):
    """Liveness plus a database round trip, for load balancers."""
    try:
        report = database_health()
    except Exception as exc:  # report, don't crash the probe
        log.warning("health check: the database is unavailable: %s", exc)
        return JsonResponse({"ok": False, "error": type(exc).__name__}, status=503)
    return JsonResponse(report, status=200 if report["ok"] else 503)


def _said(message: str, status: int) -> HttpResponse:
    return HttpResponse(message + "\n", status=status, content_type="text/plain; charset=utf-8")


@never_cache
@login_required
def job_file(request, pk):
    """The file a job made (an export), for the researchers of the job's task only: one
    who started it and researches the task no more gets 403, like anyone else."""
    job = visible_jobs(request.user).select_related("task").filter(pk=pk).first()
    if job is None:
        return _said(f"No job #{pk} among your tasks' jobs.", 404)
    if job.task is None or not is_researcher(request.user, job.task):
        return _said("Only the researchers of the job's task can download its file.", 403)
    try:
        handle, filename = job_files.open_job_file(job)
    except DomainError as exc:
        return _said(exc.message, http_status(exc))
    return FileResponse(handle, as_attachment=True, filename=filename)
