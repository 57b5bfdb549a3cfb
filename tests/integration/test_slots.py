"""core.slots against the real Redis: a bound on calls in flight that holds across
processes, and service mode's explanation lane answering 503 at once beyond it."""

import threading
import time

import pytest

from core import slots


@pytest.fixture
def url(services):
    from core import replies

    url = services.INFERENCE_REPLY_URL
    replies.client(url).delete(*(replies.client(url).keys(slots.KEY_PREFIX + "test-*") or ["none"]))
    return url


def test_racing_callers_never_hold_more_than_the_bound(url):
    name = f"test-race-{time.time_ns()}"
    barrier = threading.Barrier(20)
    holding, most, refused = [0], [0], []
    lock = threading.Lock()

    def caller():
        barrier.wait()
        try:
            with slots.slot(url, name, bound=3, ttl=30):
                with lock:
                    holding[0] += 1
                    most[0] = max(most[0], holding[0])
                time.sleep(0.3)
                with lock:
                    holding[0] -= 1
        except slots.Full as full:
            refused.append(full.held)

    threads = [threading.Thread(target=caller) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 3 and len(refused) >= 17 - 3  # at most 3 at once; some may pass after others leave
    assert all(n >= 3 for n in refused)
    assert slots.held(url, name, ttl=30) == 0  # every holder let go


def test_a_slot_is_given_back_on_error_and_a_dead_holder_stops_counting(url):
    name = f"test-stale-{time.time_ns()}"
    with pytest.raises(RuntimeError), slots.slot(url, name, bound=1, ttl=30):
        raise RuntimeError("the call failed")
    assert slots.held(url, name, ttl=30) == 0
    # A process that died holding its slot: its entry is older than the ttl.
    from core import replies

    replies.client(url).zadd(slots.KEY_PREFIX + name, {"dead": time.time() - 60})
    with slots.slot(url, name, bound=1, ttl=30):
        assert slots.held(url, name, ttl=30) == 1
        with pytest.raises(slots.Full), slots.slot(url, name, bound=1, ttl=30):
            pass


@pytest.mark.django_db(transaction=True)
def test_an_explanation_beyond_the_bound_is_refused_at_once_in_service_mode(celery_worker_process, live_tasks,
                                                                          settings):
    from annotation import inference
    from tasks.targets import open_round_with_models

    settings.EXPLANATION_QUEUE_MAX = 1
    [model] = open_round_with_models(live_tasks["qa"])[1]
    inputs = {"passage": "Water boils at 100 degrees at sea level. " * 20,
              "question": "At what temperature does water boil?"}
    inference.predict_with([model], [inputs])  # loaded in the worker
    done = {}
    explaining = threading.Thread(target=lambda: done.update(first=inference.explain_with(model, inputs, None, 50)))
    explaining.start()
    deadline = time.monotonic() + 10
    while slots.held(settings.INFERENCE_REPLY_URL, "explain", ttl=60) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    with pytest.raises(inference.Busy, match="already waiting") as refused:
        inference.explain_with(model, inputs, None, 4)
    assert time.monotonic() - started < 1.0 and refused.value.retry_after == 5 and refused.value.code == "busy"
    explaining.join(timeout=120)
    assert done["first"]["n_steps"] == 50  # the one in flight was answered
    assert inference.explain_with(model, inputs, None, 4)["n_steps"] == 4  # and the slot is free again
