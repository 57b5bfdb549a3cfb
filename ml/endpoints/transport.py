"""POSTing JSON to an endpoint, with retries inside a wait budget.

Retried: timeouts, dropped or refused connections, 5xx answers and 429 (after its
``Retry-After`` when it gives one, else an exponential backoff). Not retried: other
4xx answers (``EndpointRejected``). A retry is only made when it can still finish
inside ``budget`` seconds; otherwise ``EndpointUnavailable`` is raised at once with
the endpoint's own ``Retry-After`` where it sent one. Uses ``requests`` (pinned in
requirements.txt). Headers are never logged: they may hold the secret.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import requests

from .errors import EndpointProtocolError, EndpointRejected, EndpointUnavailable

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.2  # seconds before the first retry; doubled each time
BACKOFF_MAX = 4.0
MAX_ATTEMPTS = 5
MAX_RESPONSE_BYTES = 4 * 1024 * 1024


@dataclass
class Response:
    body: dict
    text: str
    latency_ms: float  # of the attempt that answered
    attempts: int


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header's delay in seconds (the delta-seconds form), or None."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _error_text(response) -> str:
    """The endpoint's own error message where its body has one (``{"error": {"message"}}``
    or ``{"error": "..."}``), else the status; cut short."""
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        error = error.get("message")
    return f"HTTP {response.status_code}: {str(error)[:200]}" if error else f"HTTP {response.status_code}"


def post_json(url: str, body: dict, *, headers: dict | None = None, timeout: float, budget: float,
              max_attempts: int = MAX_ATTEMPTS, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic, session=None) -> Response:
    """POST ``body`` as JSON to ``url``; the parsed JSON answer. Each attempt waits at
    most ``timeout`` seconds, and all of them together with their pauses at most
    ``budget`` seconds."""
    deadline = clock() + budget
    poster = session or requests
    secret = (headers or {}).get("Authorization", "").removeprefix("Bearer ").strip()
    last = "no attempt was made"
    retry_hint = None
    for attempt in range(1, max_attempts + 1):
        remaining = deadline - clock()
        if remaining <= 0.05:
            break
        started = time.perf_counter()
        try:
            response = poster.post(url, json=body, headers=headers or {}, timeout=min(timeout, remaining),
                                   allow_redirects=False)
        except requests.Timeout:
            last, retry_hint = f"no answer within {min(timeout, remaining):.1f} s", None
        except requests.ConnectionError:
            last, retry_hint = "the connection failed or was dropped", None
        else:
            latency_ms = (time.perf_counter() - started) * 1000
            status = response.status_code
            if 200 <= status < 300:
                if len(response.content) > MAX_RESPONSE_BYTES:
                    raise EndpointProtocolError(f"The endpoint's answer is over {MAX_RESPONSE_BYTES} bytes.")
                try:
                    parsed = json.loads(response.content)
                except ValueError:
                    raise EndpointProtocolError("The endpoint's answer is not JSON.") from None
                if not isinstance(parsed, dict):
                    raise EndpointProtocolError("The endpoint's answer is not a JSON object.")
                return Response(parsed, response.text, round(latency_ms, 2), attempt)
            if status == 429 or status >= 500:
                last, retry_hint = _error_text(response), retry_after_seconds(response.headers.get("Retry-After"))
            else:
                reason = _error_text(response)
                raise EndpointRejected(f"The endpoint refused the request "
                                       f"({reason.replace(secret, '[secret]') if secret else reason}).")
        if secret:
            last = last.replace(secret, "[secret]")  # an endpoint may echo the key in its error
        log.info("endpoint attempt %d of %d failed: %s", attempt, max_attempts, last)
        if attempt == max_attempts:
            break
        pause = retry_hint if retry_hint is not None else min(BACKOFF_FIRST * 2 ** (attempt - 1), BACKOFF_MAX)
        if clock() + pause >= deadline - 0.05:
            break  # the next try could not finish in time
        sleep(pause)
    raise EndpointUnavailable(f"The endpoint did not answer usefully within {budget:.0f} s ({last}).",
                              retry_after=retry_hint if retry_hint is not None else 5)
