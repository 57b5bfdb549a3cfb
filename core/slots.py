"""At most ``bound`` calls of one kind in flight across every process: a Redis sorted set.

Service mode's explanation lane. Embedded mode bounds explanations per process
(``annotation.runtime.ExplanationLane``); with several web processes sending to one
``explain`` queue, the bound must be shared, or the queue grows until its callers
time out. A caller adds itself (scored by the time), drops holders older than
``ttl`` (a process that died holding a slot), and counts, in one MULTI; over the
bound it takes itself out again and is refused at once. Adding before counting is
what keeps it exact when callers race: of two that find one slot free, one passes.

``exclusive`` is the one-holder form, for one account's explanation: a key set only
if absent (``SET NX`` with an expiry, a token as its value) and deleted only by its
holder (a script that compares the token and deletes in one step, so a call that
outlived its expiry never frees the next holder's). Without a Redis URL (embedded
mode, one process) a set of names in this process does the same.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from .replies import client

KEY_PREFIX = "dynabench:slots:"
# Deletes KEYS[1] only while it holds ARGV[1] (the holder's token): one atomic step.
RELEASE_IF_HOLDER = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
_local_held: set[str] = set()
_local_lock = threading.Lock()


class Full(Exception):
    def __init__(self, name: str, held: int):
        super().__init__(f"{held} {name} calls are in flight")
        self.held = held


def held(url: str, name: str, ttl: float) -> int:
    """Slots of ``name`` held now (holders older than ``ttl`` do not count)."""
    return client(url).zcount(KEY_PREFIX + name, time.time() - ttl, "+inf")


@contextmanager
def slot(url: str, name: str, bound: int, ttl: float) -> Iterator[None]:
    """Hold one of ``bound`` slots of ``name`` for the block, or raise ``Full``.

    ``ttl``: the longest a holder may keep its slot (its call's timeout); after
    that it no longer counts, whether or not it let go."""
    key = KEY_PREFIX + name
    member = uuid.uuid4().hex
    redis = client(url)
    now = time.time()
    pipe = redis.pipeline(transaction=True)
    pipe.zremrangebyscore(key, "-inf", now - ttl)
    pipe.zadd(key, {member: now})
    pipe.zcard(key)
    pipe.expire(key, math.ceil(ttl) + 1)
    count = pipe.execute()[2]
    if count > bound:
        redis.zrem(key, member)
        raise Full(name, count - 1)
    try:
        yield
    finally:
        redis.zrem(key, member)


class Held(Exception):
    """``exclusive``: another call holds the name now."""


@contextmanager
def exclusive(url: str, name: str, ttl: float) -> Iterator[None]:
    """Hold ``name`` alone for the block, or raise ``Held``. ``ttl``: the longest a
    holder keeps it (its call's timeout), so a process that died holding it frees it."""
    if not url:
        with _local_lock:
            if name in _local_held:
                raise Held(name)
            _local_held.add(name)
        try:
            yield
        finally:
            with _local_lock:
                _local_held.discard(name)
        return
    key, token = KEY_PREFIX + name, uuid.uuid4().hex
    redis = client(url)
    if not redis.set(key, token, nx=True, px=max(1, math.ceil(ttl * 1000))):
        raise Held(name)
    try:
        yield
    finally:
        redis.eval(RELEASE_IF_HOLDER, 1, key, token)
