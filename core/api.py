"""The API's errors: one body for all of them, and the one mapping from errors to
HTTP statuses (pagination, parsing and the schema are in their own modules).

Every error answers with one body, documented in the schema as ``Error``::

    {"detail": "inputs.hypothesis: Must not be empty.", "code": "invalid",
     "errors": {"inputs.hypothesis": ["Must not be empty."]}}

``errors`` (field -> messages, dotted paths into the request) is there for 400s
only. For the rows of an uploaded file it is a list instead, one entry per
problem: ``[{"line": 3, "message": "premise: Must not be empty."}]``.
``exception_handler`` is the one place where domain errors (``core.errors``),
Django's, DRF's and the job queue's become statuses:

=====  =====================================================================
400    bad input (``InvalidInput``, DRF validation, unreadable JSON)
401    credentials missing where needed, or sent and invalid
403    known caller, not allowed (``Forbidden``); code ``onboarding_required`` when the task's
       onboarding is not passed (``OnboardingRequired``)
404    no such thing, or not visible to the caller (``NotFound``)
409    clashes with the current state (``Conflict``): a closed round, a decided example,
       a taken slug, an ``Idempotency-Key`` used for another request
413    request body over ``API_MAX_BODY_BYTES`` (or a view's ``max_upload_bytes``), an upload
       over its bounds (``TooLarge``)
415    a body in a media type the endpoint does not read
429    throttled, or too many failed sign-ins (``Retry-After`` says when to retry)
503    model, worker, broker or database unavailable (``Unavailable``), or a query past
       ``REQUEST_QUERY_TIMEOUT`` stopped (``QueryTimeout``, code ``query_timeout``),
       with ``Retry-After``
=====  =====================================================================
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import OperationalError as DatabaseUnavailable
from django.http import Http404, JsonResponse
from django.views.defaults import page_not_found
from django.views.defaults import server_error as django_server_error
from rest_framework import exceptions
from rest_framework.views import exception_handler as drf_exception_handler

from . import errors, query_ceiling
from .http_exceptions import (
    ConflictError,
    GoneError,
    InvalidLines,
    PayloadTooLarge,
    ServiceUnavailable,
)

log = logging.getLogger(__name__)


# --- errors -------------------------------------------------------------------------


def as_api_exception(exc: BaseException) -> BaseException:
    """The DRF exception for ``exc`` (domain, Django or infrastructure errors); others as they are."""
    if isinstance(exc, errors.InvalidInput):
        if exc.by_line:
            return InvalidLines(exc.message, exc.errors)
        return exceptions.ValidationError(exc.errors)
    if isinstance(exc, errors.TooLarge):
        return PayloadTooLarge(exc.message)
    if isinstance(exc, errors.NotFound):
        return exceptions.NotFound(exc.message)
    if isinstance(exc, errors.Forbidden):
        # A plain Forbidden keeps DRF's code (permission_denied); a subclass names its own.
        return exceptions.PermissionDenied(exc.message, code=None if type(exc) is errors.Forbidden else exc.code)
    if isinstance(exc, errors.Conflict):
        return ConflictError(exc.message, code=exc.code)
    if isinstance(exc, errors.Gone):
        return GoneError(exc.message)
    if isinstance(exc, errors.Unavailable):
        return ServiceUnavailable(exc.message, retry_after=exc.retry_after, code=exc.code)
    if isinstance(exc, errors.TooMany):
        return exceptions.Throttled(exc.retry_after, detail=exc.message)
    if isinstance(exc, Http404):
        return exceptions.NotFound(str(exc) or None)
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, DjangoValidationError):
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        return exceptions.ValidationError(detail)
    if isinstance(exc, RequestDataTooBig):
        return PayloadTooLarge(f"The request body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.")
    if isinstance(exc, SuspiciousOperation):
        return exceptions.ParseError(str(exc) or "The request could not be read.")
    if isinstance(exc, errors.queue_errors()):
        log.warning("job queue unavailable: %s: %s", type(exc).__name__, exc)
        return ServiceUnavailable("The job queue is unreachable right now; nothing was stored. Try again shortly.")
    if isinstance(exc, DatabaseUnavailable):
        stopped = query_ceiling.stopped_error(exc)
        if stopped is not None:  # logged with the request's path by the middleware
            return as_api_exception(stopped)
        log.exception("database unavailable")
        return ServiceUnavailable("The database is busy or unreachable; nothing was stored. Try again shortly.")
    return exc


def http_status(exc: errors.DomainError) -> int:
    """The HTTP status the API answers ``exc`` with, for pages that show a domain error
    themselves (the MTurk HIT pages): one mapping for both."""
    return getattr(as_api_exception(exc), "status_code", 500)


def flatten_errors(detail, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as ``{"dotted.path": [messages]}``."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            out.update(flatten_errors(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(detail, list) and any(isinstance(item, dict | list) for item in detail):
        out = {}
        for index, item in enumerate(detail):
            out.update(flatten_errors(item, f"{prefix}.{index}" if prefix else str(index)))
        return out
    messages = [str(m) for m in detail] if isinstance(detail, list) else [str(detail)]
    return {prefix or "non_field_errors": messages}


def error_body(exc: exceptions.APIException) -> dict:
    codes = exc.get_codes()
    if isinstance(exc, InvalidLines):
        return {"detail": exc.message, "code": "invalid", "errors": exc.lines}
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten_errors(exc.detail)
        detail = " ".join(
            " ".join(messages) if field == "non_field_errors" else f"{field}: {' '.join(messages)}"
            for field, messages in fields.items()
        )
        return {"detail": detail or "Invalid input.", "code": "invalid", "errors": fields}
    return {"detail": str(exc.detail), "code": codes if isinstance(codes, str) else exc.default_code}


def exception_handler(exc, context):
    """DRF's handler, after mapping ``exc`` (see the module docstring); one body for all errors."""
    exc = as_api_exception(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    response.data = error_body(exc)
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        response["Retry-After"] = str(int(retry_after))
    return response


def not_found(request, exception=None):
    """404 for a URL that matches no route: the API's error body under /api/, the page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"No API endpoint at {request.path}.", "code": "not_found"}, status=404)
    return page_not_found(request, exception)


def server_error(request):
    """The last resort: a JSON error body under /api/, the page elsewhere (the error is logged)."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Something went wrong on our side; it has been logged.",
                             "code": "server_error"}, status=500)
    return django_server_error(request)
