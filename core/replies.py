"""Direct replies from a Celery task to the one web request waiting on it.

The request still goes through the Celery queue (routing, workers, revocation,
monitoring as usual); only the answer comes back another way: the task pushes
it onto a Redis list named by the caller, which waits with one ``BLPOP``.
Waiting through Celery's Redis result backend instead costs a subscribe, a read
of the stored meta, the pub/sub message and an unsubscribe per call, a share of
a small model's pass worth saving (bench/annotation.py compares the two). A reply
list expires after ``REPLY_TTL`` seconds, so an
answer nobody waits for any more (the caller timed out) does not linger.

Each reply is signed: an HMAC of the list's name and the JSON, keyed by
``REDIS_SIGNING_KEY`` (core.cache.signing_key). A reply someone else pushed
(anyone who can write to Redis could otherwise hand the web process a made-up
model answer, and with it a "fooled" example and a bonus) is dropped with a
warning, and the caller keeps waiting for the real one until its timeout.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import threading
import time
import uuid

import redis

from core.cache import signing_key, tag

log = logging.getLogger(__name__)

REPLY_TTL = 60
# Seconds a blocking read may take beyond the wait it asked the server for: the
# server answers BLPOP by its own timeout, so the socket only has to outlast that.
SOCKET_MARGIN = 5
_clients: dict[tuple[str, float | None], object] = {}
_lock = threading.Lock()


def client(url: str, socket_timeout: float | None = None):
    """A redis-py client per URL, socket timeout and process (its pool reconnects
    after a fork). Without ``socket_timeout``, redis-py's default applies (5 s in
    redis-py 8): right for quick commands, too short for a long blocking read."""
    key = (url, socket_timeout)
    with _lock:
        found = _clients.get(key)
        if found is None:
            options = {} if socket_timeout is None else {"socket_timeout": socket_timeout}
            found = _clients[key] = redis.Redis.from_url(url, **options)
        return found


def new_key(kind: str) -> str:
    return f"dynabench:reply:{kind}:{uuid.uuid4().hex}"


def push(url: str, key: str, payload: dict) -> None:
    """Deliver ``payload`` (JSON-safe) to whoever waits on ``key``."""
    pipe = client(url).pipeline(transaction=False)
    pipe.rpush(key, seal(key, json.dumps(payload, ensure_ascii=False, separators=(",", ":"))))
    pipe.expire(key, REPLY_TTL)
    pipe.execute()


def wait(url: str, key: str, timeout: float) -> dict | None:
    """The payload pushed to ``key``, or None after ``timeout`` seconds.

    The socket's own timeout must outlast the blocking read: with redis-py's 5 s
    default, a BLPOP asked to wait 30 s died after 5 s with a TimeoutError, so any
    answer slower than 5 s (a cold worker, a backlog) became an HTTP 500. Clients
    are kept per whole second of timeout, so a process holds a handful at most."""
    deadline = time.monotonic() + max(timeout, 0.001)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        item = client(url, socket_timeout=math.ceil(left) + SOCKET_MARGIN).blpop([key], timeout=left)
        if item is None:
            return None
        payload = opened(key, item[1])
        if payload is not None:
            return payload
        log.warning("reply list %s: dropped a reply without a valid signature", key)


def _tag(key: str, body: bytes) -> bytes:
    return tag(signing_key("reply"), key.encode() + b"\n" + body)


def seal(key: str, body: str) -> bytes:
    """``body`` with its tag in front: ``<hex tag>.<json>``; the tag covers the list's
    name too, so a genuine reply copied to another caller's list is refused."""
    data = body.encode()
    return _tag(key, data) + b"." + data


def opened(key: str, sealed: bytes) -> dict | None:
    """The payload of a reply sealed for ``key``, or None when its tag does not match."""
    given, dot, data = bytes(sealed).partition(b".")
    if not dot or not hmac.compare_digest(given, _tag(key, data)):
        return None
    return json.loads(data)
