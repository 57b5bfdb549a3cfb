"""Made-up worker ids on a public HIT id, from a script: each new id used to get an
assignment whose page could write examples (each a model pass) without end. Now an
assignment writes a bounded number, and a HIT holds a bounded number of assignments
MTurk has not confirmed (``crowd.assignments``)."""

import pytest
from django.test import Client

from annotation.models import Example
from crowd import assignments
from crowd.models import Assignment
from tests.crowd.test_crowd_flow import api, arrive, make_batch, token_of

pytestmark = pytest.mark.django_db


def made_up(n: int) -> str:
    return f"A{n:012d}FAKE"


def write(client, slug, label="negative"):
    context = client.get(f"/api/tasks/{slug}/contexts/next/").json()
    return client.post(f"/api/tasks/{slug}/examples/", {
        "context": context["id"], "inputs": {"statement": "A script writes this"}, "target": {"label": label}},
        format="json")


def test_one_assignment_cannot_write_examples_without_end(live_tasks, crowd, settings):
    task = live_tasks["sentiment"]
    batch = make_batch(task, examples_per_assignment=2)
    hit = batch.hit_rows.first()
    page = arrive(Client(REMOTE_ADDR="198.51.100.20"), hit.hit_id, "ASSIGNFLOOD0001", made_up(1))
    assert page.status_code == 200
    writer = api(token_of(page))
    cap = assignments.examples_cap(batch)
    assert cap == 4  # twice the HIT's own number
    for _ in range(cap):
        assert write(writer, task.slug).status_code == 201
    refused = write(writer, task.slug)
    assert refused.status_code == 409 and "at most 4 examples" in refused.json()["detail"]
    # Retracting does not make room: every example written cost a model pass.
    first = Example.objects.filter(session__mturk_assignment_id="ASSIGNFLOOD0001").first()
    assert writer.post(f"/api/examples/{first.pk}/retract/").status_code == 200
    assert write(writer, task.slug).status_code == 409
    assert Example.objects.filter(session__mturk_assignment_id="ASSIGNFLOOD0001").count() == cap


def test_the_task_config_sets_the_cap_but_never_below_the_hits_own_number(live_tasks, crowd):
    task = live_tasks["sentiment"]
    task.config = {**task.config, "crowd_limits": {"examples_per_assignment": 1, "unconfirmed_per_hit": 3}}
    task.save()
    batch = make_batch(task, examples_per_assignment=2)
    assert assignments.examples_cap(batch) == 2 and assignments.unconfirmed_cap(batch) == 3


def test_made_up_worker_ids_on_one_hit_are_bounded(live_tasks, crowd, settings):
    settings.MTURK_ARRIVALS_PER_ADDRESS = 1000  # ids from many addresses (an IPv6 /64 holds plenty)
    task = live_tasks["sentiment"]
    batch = make_batch(task, assignments_per_hit=2)
    hit, other_hit = batch.hit_rows.order_by("number")[:2]
    cap = assignments.unconfirmed_cap(batch)
    assert cap == 6
    for n in range(cap):
        page = arrive(Client(REMOTE_ADDR=f"2001:db8::{n + 1}"), hit.hit_id, f"ASSIGNFLOOD{n:04d}", made_up(n))
        assert page.status_code == 200
    refused = arrive(Client(REMOTE_ADDR="2001:db8::99"), hit.hit_id, "ASSIGNFLOODXXXX", made_up(99))
    assert refused.status_code == 409 and "not confirmed" in refused.content.decode()
    assert Assignment.objects.filter(hit=hit).count() == cap
    # A worker already holding an assignment there still gets back to it ...
    again = arrive(Client(REMOTE_ADDR="2001:db8::1"), hit.hit_id, "ASSIGNFLOOD0000", made_up(0))
    assert again.status_code == 200
    # ... and the batch's other HITs are untouched.
    assert arrive(Client(REMOTE_ADDR="2001:db8::98"), other_hit.hit_id, "ASSIGNOTHER0001",
                  made_up(98)).status_code == 200
