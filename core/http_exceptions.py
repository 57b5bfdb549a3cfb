"""HTTP exceptions DRF does not have (409, 410, 413, 503 with Retry-After, 400 by line).

Kept apart from ``core.api`` so the parser module can use them: DRF reads its
parser classes while ``rest_framework.views`` is still loading.
"""

from rest_framework import exceptions, status

RETRY_AFTER_SECONDS = 5


class ConflictError(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The request conflicts with the current state."
    default_code = "conflict"


class GoneError(exceptions.APIException):
    status_code = status.HTTP_410_GONE
    default_detail = "What was asked for has ended."
    default_code = "gone"


class PayloadTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


class ServiceUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "A service the platform needs is unavailable; try again shortly."
    default_code = "unavailable"

    def __init__(self, detail=None, retry_after: int = RETRY_AFTER_SECONDS, code: str | None = None):
        super().__init__(detail, code)
        self.retry_after = retry_after


class InvalidLines(exceptions.ValidationError):
    """400 for the rows of an uploaded file: ``lines`` is a list of ``{"line", "message"}``."""

    def __init__(self, message: str, lines: list[dict]):
        super().__init__(message)
        self.message = message
        self.lines = lines
