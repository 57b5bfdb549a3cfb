"""HIT arrivals from the attacker's side: made-up worker ids from one IPv6 /64,
each arrival from a new address of it, share one address's limit."""

import threading

import pytest
from django.urls import reverse

from crowd.models import Assignment
from tests.crowd.test_crowd_flow import SUBMIT_TO, make_batch


def test_new_assignments_from_one_slash_64_share_the_address_limit(live_tasks, crowd, client, settings):
    settings.MTURK_ARRIVALS_PER_ADDRESS = 2
    hit = make_batch(live_tasks["sentiment"]).hit_rows.first()

    def arrive(n, address):
        return client.get(reverse("mturk-hit"), {"assignmentId": f"3SIXTYFOURSIXTYFOURSIXTYF{n:05d}",
                                                 "hitId": hit.hit_id, "workerId": f"ASIXTYFOUR{n:05d}",
                                                 "turkSubmitTo": SUBMIT_TO}, REMOTE_ADDR=address)

    codes = [arrive(n, f"2001:db8:64:1::{n + 1:x}").status_code for n in range(4)]
    assert codes == [200, 200, 429, 429]
    assert Assignment.objects.count() == 2
    assert arrive(9, "2001:db8:64:2::1").status_code == 200  # another /64: another client


@pytest.mark.django_db(transaction=True)
def test_arrivals_sent_at_once_from_one_address_get_no_more_than_the_limit(live_tasks, crowd, settings):
    """A script opens ten made-up workers' assignments at the same moment: the count is
    taken in one step, so no more than the limit get through."""
    from django.db import connection
    from django.test import Client

    if connection.vendor != "postgresql":
        pytest.skip("parallel writes need PostgreSQL (set DATABASE_URL); SQLite's test database locks them out")
    settings.MTURK_ARRIVALS_PER_ADDRESS = 3
    hit = make_batch(live_tasks["sentiment"]).hit_rows.first()
    barrier, codes, lock = threading.Barrier(10), [], threading.Lock()

    def arrive(n):
        try:
            barrier.wait()
            params = {"assignmentId": f"3ATONCEATONCEATONCEATONC{n:05d}", "hitId": hit.hit_id,
                      "workerId": f"AATONCE{n:05d}", "turkSubmitTo": SUBMIT_TO}
            code = Client().get(reverse("mturk-hit"), params, REMOTE_ADDR="198.51.100.30").status_code
            with lock:
                codes.append(code)
        finally:
            connection.close()

    threads = [threading.Thread(target=arrive, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(codes) == [200] * 3 + [429] * 7
    assert Assignment.objects.count() == 3
