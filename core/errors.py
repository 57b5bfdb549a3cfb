"""Domain errors: what a service says went wrong, in words, without HTTP.

Services raise these; ``core.api.exception_handler`` is the one place that turns
them into HTTP statuses (400, 403, 404, 409, 410, 413, 429, 503), and the pages show
their messages with the same statuses (``core.api.http_status``). A service never raises a DRF or
Django HTTP exception itself.
"""

from __future__ import annotations

from kombu.exceptions import OperationalError as BrokerUnavailable
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeout


class DomainError(Exception):
    """Base class. ``message`` is shown to the user as it is."""

    code = "error"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class InvalidInput(DomainError):
    """Bad input. ``errors`` maps each offending field (dotted path) to its messages;
    for the rows of an uploaded file it is instead a list of ``{"line", "message"}``
    (``line`` 1-based), one per problem, and ``message`` sums them up."""

    code = "invalid"

    def __init__(self, errors: dict[str, list[str] | str] | list[dict], message: str = "Invalid input."):
        super().__init__(message)
        self.errors: dict[str, list[str]] | list[dict]
        if isinstance(errors, dict):
            self.errors = {field: [m] if isinstance(m, str) else list(m) for field, m in errors.items()}
        else:
            self.errors = [{"line": int(e["line"]), "message": str(e["message"])} for e in errors]

    @classmethod
    def field(cls, name: str, message: str) -> InvalidInput:
        return cls({name: [message]})

    @property
    def by_line(self) -> bool:
        """Whether ``errors`` lists problems by line of a file rather than by field."""
        return isinstance(self.errors, list)

    def __str__(self) -> str:
        if isinstance(self.errors, list):
            return "; ".join([self.message, *(f"line {e['line']}: {e['message']}" for e in self.errors)])
        return "; ".join(f"{field}: {' '.join(messages)}" for field, messages in self.errors.items())


class NotFound(DomainError):
    code = "not_found"


class Forbidden(DomainError):
    """The caller is known but may not do this."""

    code = "forbidden"


class OnboardingRequired(Forbidden):
    """The caller has not passed the task's onboarding (or failed it for good), so may
    not write or validate on it: a 403 whose code says so, for scripts to tell apart."""

    code = "onboarding_required"


class TooLarge(DomainError):
    """The input is over a configured bound (an uploaded file's bytes or rows)."""

    code = "too_large"


class Conflict(DomainError):
    """The request clashes with the current state (closed round, decided example, ...)."""

    code = "conflict"


class Gone(DomainError):
    """What was asked for existed and has ended (a finished batch of HITs, a task closed
    to the public)."""

    code = "gone"


class Unavailable(DomainError):
    """A dependency (model, worker, broker) cannot answer now; worth retrying later."""

    code = "unavailable"

    def __init__(self, message: str, retry_after: int = 5):
        super().__init__(message)
        self.retry_after = retry_after


class RetryLater(Unavailable):
    """Unavailable for now and worth another attempt: a job that meets it is queued
    again after ``retry_after`` seconds (``jobs.engine.run_job``), not failed. Raised
    by a dependency a job needs (the artifact store), so the job engine need not know it."""


class QueryTimeout(Unavailable):
    """A query of a web request ran past ``REQUEST_QUERY_TIMEOUT`` and the database
    stopped it (``core.query_ceiling``); narrower requests, or a later try, may pass."""

    code = "query_timeout"


class TooMany(DomainError):
    """A per-user or per-address limit is reached; ``retry_after`` seconds until it frees."""

    code = "throttled"

    def __init__(self, message: str, retry_after: int = 60):
        super().__init__(message)
        self.retry_after = retry_after


def queue_errors() -> tuple[type[BaseException], ...]:
    """The exceptions that mean the job queue is down: the broker's connection error
    and Redis's (broker, reply lists and shared cache are Redis here)."""
    return BrokerUnavailable, RedisConnectionError, RedisTimeout
