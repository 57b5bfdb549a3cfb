"""Which queues a live worker consumes: workers beat, the web asks before it sends.

In service mode a prediction is a message on the ``inference`` queue and an
answer on a reply list. If no worker consumes that queue (none started, or the
one started died while it imported its code), the message waits unseen and the
request times out after ``INFERENCE_TIMEOUT`` with nothing to say why. So each
worker, once it consumes, beats every ``BEAT_EVERY`` seconds: it stamps its name
into one sorted set per queue (``dynabench:consumers:<queue>``) with the Redis
server's clock, and takes it out when it shuts down. The web counts the stamps
newer than ``BEAT_TTL`` before it sends; with none it answers at once (503,
code ``no_worker``) and says which queue has no worker.

Both sides read the time from the Redis server (``TIME`` inside a script), so
clocks that differ between machines do not matter. A live answer is kept in the
asking process for ``BEAT_EVERY`` seconds: one round trip per process every few
seconds, not one per request.
"""

from __future__ import annotations

import logging
import threading
import time

from . import replies

log = logging.getLogger(__name__)

BEAT_EVERY = 5.0
# A worker is taken as gone when its last beat is older than this (three missed beats
# and a margin: a busy worker's beat thread may run late by a second or two).
BEAT_TTL = 20
KEY = "dynabench:consumers:{queue}"

# KEYS: one sorted set per queue; ARGV[1]: the worker's name. Drops stamps a day old.
_BEAT = """
local now = tonumber(redis.call('TIME')[1])
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - 86400)
  redis.call('EXPIRE', key, 86400)
end
return now
"""
# KEYS[1]: the queue's set; ARGV[1]: the age in seconds past which a stamp is stale.
_LIVE = """
local now = tonumber(redis.call('TIME')[1])
return redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[1]), '+inf')
"""


def key(queue: str) -> str:
    return KEY.format(queue=queue)


def beat(url: str, queues: list[str], name: str) -> None:
    """Stamp ``name`` as consuming each of ``queues`` now."""
    if queues:
        replies.client(url).eval(_BEAT, len(queues), *[key(q) for q in queues], name)


def forget(url: str, queues: list[str], name: str) -> None:
    """``name`` stops consuming ``queues`` (a warm shutdown)."""
    pipe = replies.client(url).pipeline(transaction=False)
    for queue in queues:
        pipe.zrem(key(queue), name)
    pipe.execute()


def live_count(url: str, queue: str) -> int:
    """How many workers stamped ``queue`` within ``BEAT_TTL`` seconds."""
    return int(replies.client(url).eval(_LIVE, 1, key(queue), BEAT_TTL))


_known_live: dict[tuple[str, str], float] = {}  # (url, queue) -> when a live worker was last seen
_known_lock = threading.Lock()


def has_live_consumer(url: str, queue: str) -> bool:
    """Whether some worker consumes ``queue``; a yes is remembered for ``BEAT_EVERY`` s.
    Redis errors propagate (the caller maps them to "queue unreachable")."""
    now = time.monotonic()
    with _known_lock:
        seen = _known_live.get((url, queue))
    if seen is not None and now - seen < BEAT_EVERY:
        return True
    if live_count(url, queue) > 0:
        with _known_lock:
            _known_live[(url, queue)] = now
        return True
    with _known_lock:
        _known_live.pop((url, queue), None)
    return False


class Heartbeat:
    """A daemon thread that beats for one worker until ``stop()``. A beat that fails
    (Redis restarting) is logged once and retried at the next tick: the worker goes on."""

    def __init__(self, url: str, queues: list[str], name: str, every: float = BEAT_EVERY):
        self.url, self.queues, self.name, self.every = url, sorted(set(queues)), name, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dynabench-heartbeat", daemon=True)
        self._failing = False

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            try:
                beat(self.url, self.queues, self.name)
                if self._failing:
                    log.info("heartbeat to %s restored", self.queues)
                self._failing = False
            except Exception as exc:  # Redis down or restarting: the next tick tries again
                if not self._failing:
                    log.warning("heartbeat for %s failed (%s: %s); retrying every %.0f s",
                                self.queues, type(exc).__name__, exc, self.every)
                self._failing = True
            if self._stop.wait(self.every):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every + 5)
        try:
            forget(self.url, self.queues, self.name)
        except Exception as exc:  # Redis gone: the stamps age out after BEAT_TTL
            log.warning("could not withdraw the heartbeat of %s: %s", self.name, exc)
