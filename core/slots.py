"""At most ``bound`` calls of one kind in flight across every process: a Redis sorted set.

Service mode's explanation lane. Embedded mode bounds explanations per process
(``annotation.runtime.ExplanationLane``); with several web processes sending to one
``explain`` queue, the bound must be shared, or the queue grows until its callers
time out. A caller adds itself (scored by the time), drops holders older than
``ttl`` (a process that died holding a slot), and counts, in one MULTI; over the
bound it takes itself out again and is refused at once. Adding before counting is
what keeps it exact when callers race: of two that find one slot free, one passes.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from .replies import client

KEY_PREFIX = "dynabench:slots:"


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
