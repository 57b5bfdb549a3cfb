"""Request middleware: checks that must hold before any view reads a body, and the
ceiling on a request's queries."""

import logging

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render

from . import query_ceiling
from .api import http_status

log = logging.getLogger(__name__)


def text_charset_only(get_response):
    """Refuse (415) a body whose Content-Type names a charset that is not a text
    encoding. Python's codec registry also knows transforms such as bz2, zlib and
    rot13; Django accepts any name the registry knows, and decoding a form or JSON
    body with one of those raises instead of failing cleanly (or inflates a small
    body past the size limits)."""

    def middleware(request):
        charset = request.content_params.get("charset") if request.content_params else None
        if charset:
            try:
                "x".encode(charset)  # a transform (bz2) or an unknown name raises LookupError
            except LookupError:
                message = f"The charset {charset!r} is not a text encoding; send UTF-8."
                if request.path.startswith("/api/"):
                    return JsonResponse({"detail": message, "code": "unsupported_media_type"}, status=415)
                return HttpResponse(message, status=415, content_type="text/plain; charset=utf-8")
        return get_response(request)

    return middleware


class QueryCeilingMiddleware:
    """Every statement of a request may run ``REQUEST_QUERY_TIMEOUT`` seconds (0: no
    limit); the database stops one that runs longer (``core.query_ceiling``), and the
    request answers 503 with ``Retry-After``: the API's error body (``core.api``), or
    a page. A stopped query is logged with the request's path."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        seconds = settings.REQUEST_QUERY_TIMEOUT
        if not seconds:
            return self.get_response(request)
        with query_ceiling.ceiling(seconds) as state:
            response = self.get_response(request)
        if state.stopped_sql is not None:
            log.warning("a query ran past REQUEST_QUERY_TIMEOUT (%g s) and was stopped: %s %s (%d): %.300s",
                        seconds, request.method, request.path, response.status_code, state.stopped_sql)
        return response

    def process_exception(self, request, exception):
        """A page's (or any non-DRF view's) stopped query: 503, not a server error.
        API views answer through ``core.api.exception_handler`` instead."""
        error = query_ceiling.stopped_error(exception)
        if error is None:
            return None
        status = http_status(error)
        if request.path.startswith("/api/"):
            response = JsonResponse({"detail": error.message, "code": error.code}, status=status)
        else:
            response = render(request, "unavailable.html", {"message": error.message}, status=status)
        response["Retry-After"] = str(error.retry_after)
        return response
