"""What goes wrong when a model behind an endpoint is asked.

Callers map these to their own errors (the apps: a 503 with Retry-After): nothing
here knows HTTP statuses beyond the endpoint's own.
"""

from __future__ import annotations

from ..errors import MLError


class EndpointError(MLError):
    """The endpoint could not give a usable answer. ``retry_after``: seconds after
    which asking again may work (None: not worth retrying soon)."""

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class EndpointUnavailable(EndpointError):
    """Timeouts, 429s, 5xx answers or dropped connections, still failing when the
    wait budget ran out."""


class EndpointRejected(EndpointError):
    """The endpoint refused the request (4xx other than 429: bad credentials, an
    unknown model, a malformed request): asking again will not help."""


class EndpointProtocolError(EndpointError):
    """The endpoint answered, but not in its protocol's shape (not JSON, missing
    fields, a tensor of the wrong shape)."""
