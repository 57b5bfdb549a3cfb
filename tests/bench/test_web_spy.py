"""bench/web_spy.py's pure part: py-spy's raw stacks filed by layer (the innermost frame
that is not a helper's), the service-only layers, and the RESULTS.md block."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "bench") not in sys.path:
    sys.path.append(str(ROOT / "bench"))

from bench.benchlib import web_profile_report as P  # noqa: E402
from bench.benchlib import web_spy_report as S  # noqa: E402

ORM = P.LAYER_RULES[0][0]

SP = "/v/lib/python3.13/site-packages"
LIB = "/usr/lib/python3.13"
HANDLE = f"handle ({SP}/gunicorn/workers/gthread.py:271)"
WSGI = f"WSGIHandler.__call__ ({SP}/django/core/handlers/wsgi.py:124)"
QUERY = f"QuerySet.get ({SP}/django/db/models/query.py:629)"
RAW = "\n".join([
    # the ORM's query clone: deepcopy is a helper, the sample is the ORM's
    f"{HANDLE};{WSGI};{QUERY};deepcopy ({LIB}/copy.py:128);_reconstruct ({LIB}/copy.py:259) 7",
    # psycopg's execute under the ORM: the driver's
    f"{HANDLE};{WSGI};{QUERY};Cursor.execute ({SP}/psycopg/cursor.py:97) 5",
    # the Celery send: kombu under our code
    f"{HANDLE};{WSGI};post (/repo/annotation/api.py:88);send ({SP}/kombu/messaging.py:200) 3",
    # gunicorn parsing the request, before Django
    f"{HANDLE};Request.parse ({SP}/gunicorn/http/message.py:300) 2",
    # DRF's serializer under a django.utils helper: the serializer's
    f"{HANDLE};{WSGI};data ({SP}/rest_framework/serializers.py:570);"
    f"wrapper ({SP}/django/utils/functional.py:40) 4",
    # nothing but helpers and a frame without a file
    "<unknown>;deepcopy (/usr/lib/python3.13/copy.py:128) 1",
    "",
    "not a stack",
])
REDIS = "\n".join([
    # Redis's client by its caller: the reply wait, the throttles' cache, Celery's send
    f"{HANDLE};{WSGI};wait (/repo/core/replies.py:40);Redis.blpop ({SP}/redis/commands/core.py:9);"
    f"SocketBuffer._read_from_socket ({SP}/redis/_parsers/socket.py:60) 6",
    f"{HANDLE};{WSGI};ScopedRateThrottle.allow_request ({SP}/rest_framework/throttling.py:110);"
    f"RedisCache.get ({SP}/django/core/cache/backends/redis.py:190);Redis.get ({SP}/redis/commands/core.py:9) 2",
    f"{HANDLE};{WSGI};Task.apply_async ({SP}/celery/app/task.py:500);"
    f"Channel.conn_or_acquire ({SP}/kombu/transport/redis.py:800);Redis.lpush ({SP}/redis/commands/core.py:9) 1",
    "Redis.ping (/v/site-packages/redis/commands/core.py:9) 1",
    # a gthread pool thread, just woken with the next request
    f"Thread._bootstrap ({LIB}/threading.py:1002);_worker ({LIB}/concurrent/futures/thread.py:90) 3",
])


def test_parse_reads_frames_outermost_first_with_their_counts():
    stacks = S.parse_raw(RAW + "\n" + REDIS)
    assert [count for _, count in stacks] == [7, 5, 3, 2, 4, 1, 6, 2, 1, 1, 3]
    frames, _ = stacks[3]
    assert frames == [(f"{SP}/gunicorn/workers/gthread.py", 271, "handle"),
                      (f"{SP}/gunicorn/http/message.py", 300, "Request.parse")]
    assert stacks[5][0][0] == ("", 0, "<unknown>")


def test_each_sample_takes_its_innermost_non_helper_frames_layer_and_redis_its_callers():
    found = S.layers(S.parse_raw(RAW + "\n" + REDIS))
    assert found == {
        ORM: 7,  # the ORM, through copy's helpers
        "PostgreSQL driver (psycopg)": 5,
        "DRF serializers and fields": 4,
        "Celery send (celery, kombu)": 4,
        "gunicorn (HTTP parsing, sockets, the worker's loop)": 2,
        "Redis: the inference reply wait (core/replies.py)": 6,
        "Redis: the cache (DRF's throttles through Django's cache)": 2,
        "Redis client": 1,
        "gthread's thread pool (a thread taking the next request)": 3,
        P.OTHER: 1,
    }
    assert list(found) == sorted(found, key=lambda layer: -found[layer])
    assert sum(found.values()) == 35


def test_hot_leaves_name_the_frame_each_samples_layer_comes_from():
    rows = S.hot_leaves(S.parse_raw(RAW), limit=3)
    assert rows == [{"frame": "django/db/models/query.py: QuerySet.get", "samples": 7},
                    {"frame": "psycopg/cursor.py: Cursor.execute", "samples": 5},
                    {"frame": "rest_framework/serializers.py: data", "samples": 4}]


def sampling(stacks) -> dict:
    by_layer = S.layers(stacks)
    total = sum(by_layer.values())
    return {"rate_hz": 100, "duration_s": 30, "samples": total, "errors": 0, "behind_s": 0.0,
            "layers_samples": by_layer, "layers_share": {layer: n / total for layer, n in by_layer.items()},
            "hot": S.hot_leaves(stacks)}


def test_the_block_sets_service_shares_beside_the_in_process_ones_in_a_generated_sentence():
    stacks = S.parse_raw(RAW)
    gil = [(frames, count) for frames, count in stacks if "psycopg" not in frames[-1][0]]  # the driver waits
    doc = {
        "run": {"at": "2026-01-01T00:00:00Z", "commit": "abc1234", "loadavg": [1.0, 1.0, 1.0], "cores": 2,
                "py_spy": "0.4.3", "setup": "service mode"},
        "closed": {kind: {"annotators": 4, "accepted": 100, "errors": 0} for kind in ("active", "gil")},
        "spy": {"active": sampling(stacks), "gil": sampling(gil)},
        "in_process": {"name": "4-after", "layers_share": {ORM: 0.5, "DRF serializers and fields": 0.3,
                                                           P.SQLITE: 0.2}},
    }
    text = S.block(doc)
    # the ORM: 7 of 22 samples active, 7 of 17 holding the GIL, half the in-process profile
    assert f"| {ORM} | 31.8% | 41.2% | 50.0% |" in text
    assert f"| {P.SQLITE} | - | - | 20.0% |" in text
    assert "| PostgreSQL driver (psycopg) | 22.7% | - | - |" in text
    assert "| active: threads running or ready to run | 100 Hz, 30 s | 22 | 0 | 0 | 4 | 100 | 0 |" in text
    # the layers only service mode has: psycopg 5, Celery 3, gunicorn 2 of 22 samples; 5 of 17 with the GIL
    assert "Threads running or ready to run: against the in-process profile `4-after`" in text
    assert "take 45.5% of this sampling's samples" in text
    assert "take 29.4% of this sampling's samples" in text
    # and among the samples outside those layers (12 in both samplings), the ORM's 7
    assert f"{ORM} 31.8% (58.3% of the samples outside those layers) against 50.0%" in text
    assert f"{ORM} 41.2% (58.3% of the samples outside those layers) against 50.0%" in text
    assert f"absent here: {P.SQLITE}, 20.0% in process" in text
    assert "| `django/db/models/query.py: QuerySet.get` | 31.8% | 41.2% |" in text
    assert "| `psycopg/cursor.py: Cursor.execute` | 22.7% | - |" in text


def test_the_committed_run_renders_and_each_samplings_shares_add_up():
    import json

    doc = json.loads((ROOT / "bench" / "results" / "web-spy.json").read_text(encoding="utf-8"))
    for kind in ("active", "gil"):
        spy = doc["spy"][kind]
        assert spy["samples"] == sum(spy["layers_samples"].values()) > 0
        assert abs(sum(spy["layers_share"].values()) - 1.0) < 0.01
        assert doc["closed"][kind]["accepted"] > 0
    assert doc["in_process"]["layers_share"], "the in-process profile set beside it"
    assert "service, gil" in S.block(doc)
