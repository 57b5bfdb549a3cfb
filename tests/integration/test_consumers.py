"""Workers say which queues they consume (core.consumers); the web says at once when none does.

A worker that died while it started (or was never started) used to leave every
prediction waiting ``INFERENCE_TIMEOUT`` for an answer that could not come.
"""

import time
import uuid

import pytest

from core import consumers

pytestmark = pytest.mark.integration


def other_db(url: str, db: int) -> str:
    """The same Redis server, another database: no worker stamps anything there."""
    return url.rsplit("/", 1)[0] + f"/{db}"


def test_a_heartbeat_stamps_its_queues_until_it_stops(services):
    url = other_db(services.INFERENCE_REPLY_URL, 11)
    a, b, c = (f"q-{name}-{uuid.uuid4().hex[:8]}" for name in "abc")  # this run's own (runs may share Redis)
    assert consumers.live_count(url, a) == 0
    beat = consumers.Heartbeat(url, [a, b], "hb-test@host", every=0.2).start()
    try:
        deadline = time.monotonic() + 5
        while not consumers.live_count(url, b) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert consumers.live_count(url, a) == consumers.live_count(url, b) == 1
        assert consumers.live_count(url, c) == 0
    finally:
        beat.stop()
    assert consumers.live_count(url, a) == consumers.live_count(url, b) == 0  # withdrawn at once


def test_a_stamp_older_than_the_ttl_is_not_a_live_worker(services):
    url = other_db(services.INFERENCE_REPLY_URL, 11)
    redis = consumers.replies.client(url)
    queue = f"q-old-{uuid.uuid4().hex[:8]}"
    now = int(redis.time()[0])
    redis.zadd(consumers.key(queue), {"gone@host": now - consumers.BEAT_TTL - 5})
    assert consumers.live_count(url, queue) == 0
    redis.zadd(consumers.key(queue), {"here@host": now})
    assert consumers.live_count(url, queue) == 1


def test_the_session_worker_beats_for_every_queue_it_consumes(celery_worker_process, services):
    for queue in ("default", "inference", "explain", "training"):
        assert consumers.live_count(services.INFERENCE_REPLY_URL, queue) >= 1, queue


@pytest.mark.django_db(transaction=True)
def test_with_no_worker_on_the_queue_the_api_answers_503_no_worker_at_once(
        services, live_tasks, annotator, client_for, settings):
    """The broker is up but nobody consumes: a clear 503 at once, not a 30 s timeout."""
    from annotation.models import Example

    settings.INFERENCE_REPLY_URL = other_db(services.INFERENCE_REPLY_URL, 12)  # no worker ever stamps here
    task = live_tasks["sentiment"]
    started = time.monotonic()
    response = client_for(annotator).post(
        f"/api/tasks/{task.slug}/examples/",
        {"context": task.contexts.first().pk, "inputs": {"statement": "Fine."}, "target": {"label": "positive"}},
        format="json")
    assert response.status_code == 503, response.content
    assert response.json()["code"] == "no_worker"
    assert "'inference' queue" in response.json()["detail"]
    assert int(response["Retry-After"]) > 0
    assert time.monotonic() - started < settings.INFERENCE_TIMEOUT / 2
    assert not Example.objects.filter(task=task).exists()
