"""Someone who can write into Redis (a leaked password, a shared server) but lacks the
signing key: what they plant in the cache is never unpickled, and a model reply they
push for a waiting request is refused. Against a real Redis; skipped without one."""

import json
import pickle
import socket
import threading
import uuid
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from core import replies
from core.cache import RefusedValue, SignedRedisCache, SignedSerializer

PLANTED = []


def _planted():
    PLANTED.append("ran")
    return "owned"


class Exploit:
    """A pickle that runs ``_planted`` when loaded: what an attacker writes."""

    def __reduce__(self):
        return (_planted, ())


def _redis_url() -> str:
    cache = settings.CACHES["default"]
    if "redis" in cache["BACKEND"].lower():
        return cache["LOCATION"]
    return settings.INFERENCE_REPLY_URL or "redis://127.0.0.1:6379/0"


@pytest.fixture
def redis_url():
    url = _redis_url()
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=2):
            pass
    except OSError:
        pytest.skip(f"no Redis at {url}")
    return url


@pytest.fixture
def signed_cache(redis_url):
    prefix = f"test-trust-{uuid.uuid4().hex}"
    cache = SignedRedisCache(redis_url, {"KEY_PREFIX": prefix})
    yield cache
    raw = replies.client(redis_url)
    for key in raw.scan_iter(match=f"{prefix}:*"):
        raw.delete(key)


@pytest.fixture(autouse=True)
def _fresh_flag():
    PLANTED.clear()


def test_a_pickle_written_straight_into_redis_is_not_run(signed_cache, redis_url):
    raw = replies.client(redis_url)
    key = signed_cache.make_key("leaderboard:board")
    raw.set(key, pickle.dumps(Exploit()))
    assert signed_cache.get("leaderboard:board", "miss") == "miss"
    assert signed_cache.get_many(["leaderboard:board"]) == {}
    assert PLANTED == []
    assert raw.get(key) is None  # the planted value is gone, not read again


def test_a_forged_tag_is_refused_and_our_own_values_round_trip(signed_cache, redis_url):
    raw = replies.client(redis_url)
    signed_cache.set("mine", {"performance": 0.5, "n": 3})
    signed_cache.set("count", 7)
    assert signed_cache.get("mine") == {"performance": 0.5, "n": 3}
    assert signed_cache.incr("count") == 8  # integers stay plain for incr
    # An attacker copies the format with a tag made under another key.
    forged = SignedSerializer()
    forged._key = b"not the key"
    raw.set(signed_cache.make_key("mine"), forged.dumps(Exploit()))
    assert signed_cache.get("mine") is None
    assert PLANTED == []


def test_the_serializer_never_unpickles_without_its_tag():
    serializer = SignedSerializer()
    with pytest.raises(RefusedValue):
        serializer.loads(pickle.dumps(Exploit()))
    tagged = serializer.dumps(Exploit.__name__)
    with pytest.raises(RefusedValue):
        serializer.loads(tagged[:-1] + b"X")  # body changed under the tag
    assert PLANTED == []
    assert serializer.loads(b"42") == 42 and serializer.loads(b"-3") == -3


def test_a_forged_model_reply_is_refused_and_the_real_one_still_arrives(redis_url):
    raw = replies.client(redis_url)
    key = replies.new_key("predict")
    # The attacker pushes first: a "fooled" answer, unsigned and with a made-up tag.
    raw.rpush(key, json.dumps({"ok": True, "result": [{"label": "forged"}]}))
    raw.rpush(key, b"0" * 64 + b"." + json.dumps({"ok": True, "result": "forged"}).encode())
    pusher = threading.Timer(0.3, replies.push, args=(redis_url, key, {"ok": True, "result": "real"}))
    pusher.start()
    try:
        assert replies.wait(redis_url, key, timeout=5) == {"ok": True, "result": "real"}
    finally:
        pusher.join()
        raw.delete(key)


def test_a_genuine_reply_copied_to_another_list_is_refused(redis_url):
    raw = replies.client(redis_url)
    theirs, mine = replies.new_key("predict"), replies.new_key("predict")
    replies.push(redis_url, theirs, {"ok": True, "result": "for someone else"})
    raw.rpush(mine, raw.lpop(theirs))
    try:
        assert replies.wait(redis_url, mine, timeout=0.5) is None
    finally:
        raw.delete(theirs, mine)
