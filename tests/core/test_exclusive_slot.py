"""One account, one explanation at a time (``core.slots.exclusive``): a script that
fires explanations in parallel from one account gets one slot, not the whole lane."""

import time
import uuid

import pytest
from django.conf import settings

from core import replies, slots
from tests.annotation.test_create_flow import next_context
from tests.core.test_redis_trust import redis_url  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


def test_a_second_explanation_of_one_account_is_refused_at_once(live_tasks, client_for, annotator, researcher):
    client = client_for(annotator)
    context = next_context(client, "sentiment")
    created = client.post("/api/tasks/sentiment/examples/", {
        "context": context["id"], "inputs": {"statement": "Not bad at all"}, "target": {"label": "positive"}},
        format="json").json()
    url = f"/api/examples/{created['id']}/explanation/"
    ttl = settings.INFERENCE_TIMEOUT
    with slots.exclusive(settings.INFERENCE_REPLY_URL, f"explain-account:{annotator.pk}", ttl):
        # The account's first explanation is still waiting: a second one is refused ...
        refused = client.post(url, {"n_steps": 5}, format="json")
        assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
        assert "already have an explanation" in refused.json()["detail"]
        # ... while another account is not held up by it.
        assert client_for(researcher).post(url, {"n_steps": 5}, format="json").status_code == 200
    assert client.post(url, {"n_steps": 10}, format="json").status_code == 200  # free again


def test_the_redis_slot_has_one_holder_and_only_the_holder_frees_it(redis_url):  # noqa: F811
    name = f"test-exclusive-{uuid.uuid4().hex}"
    with slots.exclusive(redis_url, name, ttl=30):
        with pytest.raises(slots.Held), slots.exclusive(redis_url, name, ttl=30):
            pass
    with slots.exclusive(redis_url, name, ttl=30):  # freed by its holder
        pass
    # A holder that outlived its expiry leaves the next holder's slot alone.
    raw = replies.client(redis_url)
    with slots.exclusive(redis_url, name, ttl=0.2):
        time.sleep(0.3)
        with slots.exclusive(redis_url, name, ttl=30):
            pass  # the first expired: this one got it
        raw.set(slots.KEY_PREFIX + name, "the-next-holder", ex=30)
    assert raw.get(slots.KEY_PREFIX + name) == b"the-next-holder"
    raw.delete(slots.KEY_PREFIX + name)
