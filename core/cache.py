"""A Redis cache that never unpickles a value it did not write itself.

Django's Redis cache stores values as pickles, and unpickling runs code: anyone
who can write one key in the cache's Redis (a leaked password, a shared server, a
port left open) could run code in every web process the next time the key is
read. Here each pickle carries an HMAC-SHA256 of its bytes, keyed by
``REDIS_SIGNING_KEY`` (by default derived from ``SECRET_KEY``); a value without a
valid tag is never handed to ``pickle`` and reads as a miss (and is deleted).

Integers are stored as plain numbers, as in Django's own serializer, so ``incr``
stays atomic on the server; reading one only parses digits.

What signing does not stop: someone who can *read* and write the cache can copy a
value we wrote under one key to another key, or put back an older one. Those are
values of ours (no code runs), and the cache holds nothing that decides money
(throttle counts and cached pages at worst); Redis still needs its password.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import pickle
from urllib.parse import urlsplit

from django.conf import settings
from django.core.cache.backends.redis import RedisCache
from django.core.checks import Error
from django.utils.crypto import salted_hmac

log = logging.getLogger(__name__)

MAGIC = b"dbs1:"
TAG_BYTES = 64  # hex of SHA-256


class RefusedValue(Exception):
    """A cached value whose tag does not match: written by someone without the key."""


def signing_key(purpose: str) -> bytes:
    """The key for one use of Redis (``cache``, ``reply``): ``REDIS_SIGNING_KEY``
    when set (shared by every web process and worker), else derived from
    ``SECRET_KEY``; never the raw secret itself."""
    base = getattr(settings, "REDIS_SIGNING_KEY", "") or settings.SECRET_KEY
    return salted_hmac(f"dynabench.redis.{purpose}", "", secret=base, algorithm="sha256").digest()


def tag(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).hexdigest().encode()


class SignedSerializer:
    """``dumps``/``loads`` for Django's RedisCacheClient (its ``serializer`` option)."""

    def __init__(self, protocol=None):
        self.protocol = pickle.HIGHEST_PROTOCOL if protocol is None else protocol
        self._key = None

    @property
    def key(self) -> bytes:
        if self._key is None:
            self._key = signing_key("cache")
        return self._key

    def dumps(self, obj):
        if type(obj) is int:  # plain, for incr(); not bool
            return obj
        data = pickle.dumps(obj, self.protocol)
        return MAGIC + tag(self.key, data) + b":" + data

    def loads(self, data):
        if isinstance(data, str):
            data = data.encode()
        if data.strip().lstrip(b"-").isdigit():
            return int(data)
        prefix = len(MAGIC)
        head, given, body = data[:prefix], data[prefix:prefix + TAG_BYTES], data[prefix + TAG_BYTES + 1:]
        if head != MAGIC or data[prefix + TAG_BYTES:prefix + TAG_BYTES + 1] != b":" \
                or not hmac.compare_digest(given, tag(self.key, body)):
            raise RefusedValue("cached value without a valid signature")
        return pickle.loads(body)  # noqa: S301 - signed by us above


class SignedRedisCache(RedisCache):
    """Django's RedisCache with :class:`SignedSerializer`; a refused value reads as
    a miss and is deleted, so one planted key cannot break every request."""

    def __init__(self, server, params):
        params = dict(params)
        options = dict(params.get("OPTIONS") or {})
        options.setdefault("serializer", SignedSerializer)
        params["OPTIONS"] = options
        super().__init__(server, params)

    def get(self, key, default=None, version=None):
        try:
            return super().get(key, default, version)
        except RefusedValue:
            log.warning("cache: refused an unsigned or forged value under %r; deleted it", key)
            self.delete(key, version=version)
            return default

    def get_many(self, keys, version=None):
        try:
            return super().get_many(keys, version)
        except RefusedValue:
            found = {}
            for key in keys:
                value = self.get(key, _MISSING, version)
                if value is not _MISSING:
                    found[key] = value
            return found


_MISSING = object()


def redis_without_password(app_configs=None, **kwargs):
    """Deploy check (``manage.py check --deploy``): every Redis the project talks to
    (broker, results, replies, cache) needs a password or an ACL user in its URL. A
    Redis anyone on the network can write to is a queue of made-up tasks and a cache
    of made-up throttle counts, signing or not."""
    cache = settings.CACHES.get("default", {})
    named = {
        "CELERY_BROKER_URL": getattr(settings, "CELERY_BROKER_URL", ""),
        "CELERY_RESULT_BACKEND": getattr(settings, "CELERY_RESULT_BACKEND", ""),
        "INFERENCE_REPLY_URL": getattr(settings, "INFERENCE_REPLY_URL", ""),
        "CACHE_URL": cache.get("LOCATION", "") if "redis" in cache.get("BACKEND", "").lower() else "",
    }
    errors = []
    for name, value in named.items():
        locations = value if isinstance(value, list | tuple) else str(value or "").replace(",", ";").split(";")
        for url in locations:
            url = url.strip()
            if url.startswith(("redis://", "rediss://", "unix://")) and not urlsplit(url).password:
                errors.append(Error(
                    f"{name} names a Redis without a password ({urlsplit(url).hostname or url}).",
                    hint="Give Redis a password (requirepass) or an ACL user, and put it in the URL: "
                         "redis://:PASSWORD@host:6379/0 (docs/operations.md).",
                    id="dynabench.E101"))
    return errors
