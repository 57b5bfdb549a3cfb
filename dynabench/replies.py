"""Direct replies from a Celery task to the one web request waiting on it.

The request still goes through the Celery queue (routing, workers, revocation,
monitoring as usual); only the answer comes back another way: the task pushes
it onto a Redis list named by the caller, which waits with one ``BLPOP``.
Waiting through Celery's Redis result backend instead costs a subscribe, a read
of the stored meta, the pub/sub message and an unsubscribe per call, which on
the 2-core benchmark machine was a few milliseconds of a ~13 ms model pass
(bench/annotation.py). A reply list expires after ``REPLY_TTL`` seconds, so an
answer nobody waits for any more (the caller timed out) does not linger.
"""

from __future__ import annotations

import json
import threading
import uuid

REPLY_TTL = 60
_clients: dict[str, object] = {}
_lock = threading.Lock()


def client(url: str):
    """A redis-py client per URL and process (its pool reconnects after a fork)."""
    import redis

    with _lock:
        found = _clients.get(url)
        if found is None:
            found = _clients[url] = redis.Redis.from_url(url)
        return found


def new_key(kind: str) -> str:
    return f"dynabench:reply:{kind}:{uuid.uuid4().hex}"


def push(url: str, key: str, payload: dict) -> None:
    """Deliver ``payload`` (JSON-safe) to whoever waits on ``key``."""
    pipe = client(url).pipeline(transaction=False)
    pipe.rpush(key, json.dumps(payload, ensure_ascii=False, separators=(",", ":")))
    pipe.expire(key, REPLY_TTL)
    pipe.execute()


def wait(url: str, key: str, timeout: float) -> dict | None:
    """The payload pushed to ``key``, or None after ``timeout`` seconds."""
    item = client(url).blpop([key], timeout=max(timeout, 0.001))
    if item is None:
        return None
    return json.loads(item[1])
