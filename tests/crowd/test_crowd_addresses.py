"""HIT arrivals from the attacker's side: made-up worker ids from one IPv6 /64,
each arrival from a new address of it, share one address's limit."""

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
