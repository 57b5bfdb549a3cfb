"""What goes wrong when a model behind an endpoint is asked.

Callers map these to their own errors (the apps: a 503 with Retry-After): nothing
here knows HTTP statuses beyond the endpoint's own. No message holds what the
endpoint sent back (its error text, its body): only what the caller can act on.
"""

from __future__ import annotations

from ..errors import MLError


class EndpointError(MLError):
    """The endpoint could not give a usable answer. ``retry_after``: seconds after
    which asking again may work (None: not worth retrying soon). ``billable``: the
    endpoint may have done (and charged for) the work all the same: it answered in
    the wrong shape, or the wait ran out after the request was sent."""

    def __init__(self, message: str, retry_after: float | None = None, *, billable: bool = False):
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.billable = billable


class EndpointUnavailable(EndpointError):
    """Timeouts, 429s, 5xx answers, connections that failed or were dropped, still
    failing when the wait budget ran out."""


class EndpointRejected(EndpointError):
    """The endpoint refused the request (4xx other than 429: bad credentials, an
    unknown model, a malformed request; or a redirect, never followed): asking
    again will not help."""


class EndpointProtocolError(EndpointError):
    """The endpoint answered, but not in its protocol's shape (not JSON, missing
    fields, a tensor of the wrong shape)."""

    def __init__(self, message: str, retry_after: float | None = None, *, billable: bool = True):
        super().__init__(message, retry_after, billable=billable)


class EndpointRefused(EndpointError):
    """This side refused to send the request at all (``network``: an address this
    server never connects to, plain http where https is required; a key bound to
    other hosts). Nothing was sent."""
