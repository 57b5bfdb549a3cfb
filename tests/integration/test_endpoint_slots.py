"""An endpoint's request slots on the real Redis (``core.slots``): at most
``max_concurrency`` requests in flight across every process, a caller over the bound
waits up to its budget and is then refused with a 503."""

import threading
import time

import pytest

from registry import endpoints
from registry.models import Endpoint, ModelVersion


@pytest.fixture
def endpoint(services, settings):
    assert settings.INFERENCE_REPLY_URL
    # Not saved: the slots need only its id, bound and timeout (a fresh id per run).
    version = ModelVersion(pk=time.time_ns() % 2**31, name="slots")
    return Endpoint(pk=version.pk, model_version=version, protocol="openai", url="http://127.0.0.1:9",
                    max_concurrency=2, timeout_s=5)


def test_an_endpoints_requests_in_flight_are_bounded_across_callers(endpoint):
    holding, most, refused = [0], [0], []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def caller():
        barrier.wait()
        try:
            with endpoints._slot(endpoint, wait=0.1):
                with lock:
                    holding[0] += 1
                    most[0] = max(most[0], holding[0])
                time.sleep(0.5)
                with lock:
                    holding[0] -= 1
        except endpoints.EndpointUnavailable as exc:
            refused.append(exc)

    threads = [threading.Thread(target=caller) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 2 and len(refused) == 4
    assert all(exc.retry_after and "2 requests in flight" in exc.message for exc in refused)
    with endpoints._slot(endpoint, wait=0):  # all given back
        pass


def test_a_caller_waits_for_a_slot_within_its_budget(endpoint):
    released = threading.Event()

    def holder():
        with endpoints._slot(endpoint, wait=0), endpoints._slot(endpoint, wait=0):
            released.wait(0.3)

    thread = threading.Thread(target=holder)
    thread.start()
    time.sleep(0.05)
    started = time.monotonic()
    with endpoints._slot(endpoint, wait=2.0):
        waited = time.monotonic() - started
    thread.join()
    assert 0.1 < waited < 2.0
