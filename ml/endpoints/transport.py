"""POSTing JSON to an endpoint, with retries inside a wait budget.

Every request goes through a session of the endpoint's ``network.NetworkPolicy``
(each connection's address checked after resolution, and that address connected
to; no proxy, no redirect): a refused address or scheme is an ``EndpointRefused``
before anything is sent, and is not retried.

Retried: timeouts, failed or dropped connections, 5xx answers and 429 (after its
``Retry-After`` when it gives one, else an exponential backoff). Not retried: other
4xx answers and redirects (``EndpointRejected``). A retry is only made when it can
still finish inside ``budget`` seconds; otherwise ``EndpointUnavailable`` is raised
at once with the endpoint's own ``Retry-After`` where it sent one. Messages say what
went wrong in our words (the status, a timeout, a connection that failed), never
the endpoint's own error text or body. Uses ``requests`` (pinned in
requirements.txt). Headers are never logged: they may hold the secret.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import requests
from urllib3.exceptions import NewConnectionError

from .errors import EndpointProtocolError, EndpointRejected, EndpointUnavailable
from .network import NetworkPolicy

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


def refusal(status: int) -> str:
    """What a 3xx or 4xx (not 429) answer means, for whoever registered the endpoint."""
    if 300 <= status < 400:
        return f"it answered with a redirect (HTTP {status}), which is never followed: give the final URL"
    if status in (401, 403):
        return f"it refused the key (HTTP {status}): check which key the endpoint uses"
    if status == 404:
        return "it has no such path or model (HTTP 404): check the URL and the model's name"
    if status == 413:
        return "the request was too large for it (HTTP 413)"
    return f"it refused the request (HTTP {status})"


def _read_body(response) -> bytes:
    """The answer's bytes, refused past ``MAX_RESPONSE_BYTES`` (read no further)."""
    chunks, size = [], 0
    for chunk in response.iter_content(chunk_size=65536):
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            raise EndpointProtocolError(f"The endpoint's answer is over {MAX_RESPONSE_BYTES} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


def _never_connected(exc: requests.ConnectionError) -> bool:
    """Whether a connection error happened before the request left (no connection
    was made), as opposed to a connection dropped after it was sent."""
    cause = exc.args[0] if exc.args else None
    return isinstance(getattr(cause, "reason", cause), NewConnectionError)


def post_json(url: str, body: dict, *, network: NetworkPolicy, headers: dict | None = None, timeout: float,
              budget: float, max_attempts: int = MAX_ATTEMPTS, sleep: Callable[[float], None] = time.sleep,
              clock: Callable[[], float] = time.monotonic) -> Response:
    """POST ``body`` as JSON to ``url``; the parsed JSON answer. Each attempt waits at
    most ``timeout`` seconds, and all of them together with their pauses at most
    ``budget`` seconds."""
    network.check_url(url)
    deadline = clock() + budget
    last = "no attempt was made"
    retry_hint = None
    maybe_done = False  # an attempt was sent and its answer never came: the endpoint may have done the work
    with network.session() as session:
        for attempt in range(1, max_attempts + 1):
            remaining = deadline - clock()
            if remaining <= 0.05:
                break
            started = time.perf_counter()
            wait = min(timeout, remaining)
            try:
                response = session.post(url, json=body, headers=headers or {}, timeout=wait, allow_redirects=False,
                                        stream=True)
            except requests.ConnectTimeout:
                last, retry_hint = f"it could not be reached within {wait:.1f} s", None
            except requests.Timeout:
                last, retry_hint, maybe_done = f"no answer within {wait:.1f} s", None, True
            except requests.exceptions.SSLError:
                last, retry_hint = "its TLS certificate or handshake was refused (check its https setup)", None
            except requests.ConnectionError as exc:
                if _never_connected(exc):
                    last, retry_hint = "it could not be reached (the connection failed)", None
                else:
                    last, retry_hint, maybe_done = "the connection was dropped before an answer", None, True
            else:
                with response:
                    status = response.status_code
                    if 200 <= status < 300:
                        try:
                            content = _read_body(response)
                        except requests.RequestException:
                            raise EndpointProtocolError("The endpoint's answer was cut off.") from None
                        latency_ms = (time.perf_counter() - started) * 1000
                        try:
                            parsed = json.loads(content)
                        except ValueError:
                            raise EndpointProtocolError("The endpoint's answer is not JSON.") from None
                        if not isinstance(parsed, dict):
                            raise EndpointProtocolError("The endpoint's answer is not a JSON object.")
                        return Response(parsed, content.decode("utf-8", "replace"), round(latency_ms, 2), attempt)
                    if status == 429 or status >= 500:
                        last = f"HTTP {status}"
                        retry_hint = retry_after_seconds(response.headers.get("Retry-After"))
                    else:
                        raise EndpointRejected(f"The endpoint refused the request: {refusal(status)}.")
            log.info("endpoint attempt %d of %d failed: %s", attempt, max_attempts, last)
            if attempt == max_attempts:
                break
            pause = retry_hint if retry_hint is not None else min(BACKOFF_FIRST * 2 ** (attempt - 1), BACKOFF_MAX)
            if clock() + pause >= deadline - 0.05:
                break  # the next try could not finish in time
            sleep(pause)
    raise EndpointUnavailable(f"The endpoint did not answer usefully within {budget:.0f} s ({last}).",
                              retry_after=retry_hint if retry_hint is not None else 5, billable=maybe_done)
