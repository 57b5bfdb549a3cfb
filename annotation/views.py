"""Annotation pages: server-rendered, with a small script (static/js/dynabench.js).

They work inside an MTurk iframe: framing is allowed for the MTurk worker
sites only, and the script authenticates API calls with a signed session
token in a header, so no third-party cookie is needed. A page may be opened
with ``?token=...`` (the MTurk landing passes one) instead of a login.
"""

from csp.constants import SELF
from csp.decorators import csp_replace
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.shortcuts import get_object_or_404, render
from django.views.decorators.clickjacking import xframe_options_exempt
from rest_framework.exceptions import APIException, AuthenticationFailed

from tasks.models import Task

from . import services
from .serializers import ValidationItemSerializer
from .tokens import make_token, session_from_token

frameable = csp_replace({"frame-ancestors": [SELF, *settings.MTURK_FRAME_ANCESTORS]})


def _session(request, task):
    """(session, None) for a signed-in user or a valid ``?token=``; else (None, response)."""
    token = request.GET.get("token")
    if token:
        try:
            session = session_from_token(token)
        except AuthenticationFailed as exc:
            return None, render(request, "annotation/error.html", {"message": exc.detail, "task": task}, status=403)
        if session.task_id != task.pk:
            return None, render(request, "annotation/error.html",
                                {"message": "This token is for another task.", "task": task}, status=403)
        return session, None
    if not request.user.is_authenticated:
        return None, redirect_to_login(request.get_full_path())
    return services.start_session(request.user, task), None


def _page_context(task, session):
    config = task.parsed_config
    return {
        "task": task, "config": config, "session": session, "token": make_token(session),
        "round": task.open_round(),
    }


def _task_page(request, slug):
    """(task, session, None), or (task, None, response) when the caller may not enter."""
    tasks = Task.objects.all() if request.GET.get("token") else Task.objects.visible_to(request.user)
    task = get_object_or_404(tasks, slug=slug)
    session, response = _session(request, task)
    return task, session, response


@xframe_options_exempt
@frameable
def create_page(request, slug):
    task, session, response = _task_page(request, slug)
    if response:
        return response
    context = _page_context(task, session)
    context["closed"] = context["round"] is None
    return render(request, "annotation/create.html", context)


@xframe_options_exempt
@frameable
def validate_page(request, slug):
    task, session, response = _task_page(request, slug)
    if response:
        return response
    context = _page_context(task, session)
    try:
        example = services.next_for_validation(task, session.user)
    except APIException:
        example = None
    context["example"] = example
    context["item"] = ValidationItemSerializer(example).data if example else None
    return render(request, "annotation/validate.html", context)
