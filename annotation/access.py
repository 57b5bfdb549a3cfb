"""What a request may reach: the task or example it names, checked against the
caller's visibility and, for a session token, the token's own task."""

from __future__ import annotations

from core.errors import Forbidden, NotFound
from core.ratelimit import client_ip
from tasks.models import Task
from tasks.roles import is_researcher

from .models import AnnotationSession, Example
from .trust import record_address


def token_session(request) -> AnnotationSession | None:
    return request.auth if isinstance(request.auth, AnnotationSession) else None


def task_for(request, slug: str) -> Task:
    """The task ``slug`` if the caller may see it; a session token only reaches its own."""
    session = token_session(request)
    if session is not None:
        if session.task.slug != slug:
            raise Forbidden(f"This session token is for task {session.task.slug!r}, not {slug!r}.")
        task = session.task  # loaded with the token: no query
        if task.is_public or is_researcher(request.user, task):
            return task
        raise NotFound(f"No task {slug!r}.")
    task = Task.objects.visible_to(request.user).filter(slug=slug).first()
    if task is None:
        raise NotFound(f"No task {slug!r}.")
    return task


def example_for(request, pk: int) -> Example:
    """Example ``pk`` if it belongs to a task the caller may see (a token's own task)."""
    examples = Example.objects.select_related("task", "round", "context")
    session = token_session(request)
    if session is not None:
        examples = examples.filter(task=task_for(request, session.task.slug))  # its own task, if still visible
    else:
        examples = examples.filter(task__in=Task.objects.visible_to(request.user))
    example = examples.filter(pk=pk).first()
    if example is None:
        raise NotFound("No such example.")
    return example


def seen(request) -> None:
    """Record the caller's address (``trust``): writes and validations do."""
    record_address(request.user, client_ip(request))
