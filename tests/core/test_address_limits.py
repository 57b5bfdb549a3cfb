"""Per-address limits from the attacker's side: one person with an IPv6 /64 steps
through its addresses (2**64 of them) to get a fresh count on every request. Every
limit counts an IPv6 address by its /64, as the same-person check does."""

import pytest
from django.core.cache import cache
from django.test import RequestFactory

from core.ratelimit import address_key, client_address
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

ONE_SLASH_64 = [f"2001:db8:77:1::{n:x}" for n in range(1, 40)]  # one home line's addresses


@pytest.fixture(autouse=True)
def _fresh_counts():
    cache.clear()
    yield
    cache.clear()


def test_an_ipv6_address_counts_by_its_slash_64():
    assert address_key("2001:db8:77:1::1") == address_key("2001:db8:77:1:ffff:ffff:ffff:ffff") == "2001:db8:77:1::/64"
    assert address_key("2001:db8:77:2::1") != address_key("2001:db8:77:1::1")  # another /64 is another client
    assert address_key("::ffff:198.51.100.7") == address_key("198.51.100.7") == "198.51.100.7"
    assert address_key("198.51.100.7") != address_key("198.51.100.8")
    request = RequestFactory().get("/", REMOTE_ADDR="2001:db8:77:1::abcd")
    assert client_address(request) == "2001:db8:77:1::/64"


def test_sign_in_failures_from_one_slash_64_share_the_address_count(annotator, client, settings):
    settings.LOGIN_FAILURES_PER_ACCOUNT, settings.LOGIN_FAILURES_PER_ADDRESS = 100, 4
    for i, address in enumerate(ONE_SLASH_64[:4]):
        assert client.post("/accounts/login/", {"username": f"guess{i}", "password": "x"},
                           REMOTE_ADDR=address).status_code == 200
    refused = client.post("/api/auth/token/", {"username": "annotator", "password": "x"}, REMOTE_ADDR=ONE_SLASH_64[9])
    assert refused.status_code == 429
    # Another /64 is another client.
    other = client.post("/api/auth/token/", {"username": "annotator", "password": "x"}, REMOTE_ADDR="2001:db8:78::1")
    assert other.status_code == 401


def test_guessing_one_accounts_password_from_a_new_address_of_the_slash_64_each_time(annotator, client, settings):
    settings.LOGIN_FAILURES_PER_ACCOUNT, settings.LOGIN_FAILURES_PER_ADDRESS = 3, 100
    codes = [client.post("/api/auth/token/", {"username": "annotator", "password": f"guess{n}"},
                         REMOTE_ADDR=address).status_code for n, address in enumerate(ONE_SLASH_64[:5])]
    assert codes == [401, 401, 401, 429, 429]


def test_sign_ups_from_one_slash_64_share_the_limit(client, settings):
    from django.contrib.auth import get_user_model

    settings.SIGNUPS_PER_ADDRESS = 3
    codes = []
    for n, address in enumerate(ONE_SLASH_64[:5]):
        codes.append(client.post("/accounts/signup/", {"username": f"sock{n}", "password1": "a-long-enough-pass-123",
                                                       "password2": "a-long-enough-pass-123"},
                                 REMOTE_ADDR=address).status_code)
        client.logout()
    assert codes == [302, 302, 302, 429, 429]
    assert get_user_model().objects.filter(username__startswith="sock").count() == 3


def test_the_anonymous_api_throttle_counts_a_slash_64_as_one_client(demo_tasks):
    from rest_framework.settings import api_settings
    from rest_framework.test import APIClient
    from rest_framework.throttling import AnonRateThrottle

    original = AnonRateThrottle.THROTTLE_RATES
    AnonRateThrottle.THROTTLE_RATES = {**api_settings.DEFAULT_THROTTLE_RATES, "anon": "3/min"}
    try:
        client = APIClient()
        codes = [client.get("/api/tasks/", REMOTE_ADDR=address).status_code for address in ONE_SLASH_64[:4]]
        elsewhere = client.get("/api/tasks/", REMOTE_ADDR="2001:db8:99::1").status_code
    finally:
        AnonRateThrottle.THROTTLE_RATES = original
    assert codes == [200, 200, 200, 429]
    assert elsewhere == 200


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("door", ["/api/auth/token/", "/accounts/login/", "/admin/login/"])
def test_twenty_wrong_passwords_at_once_get_at_most_the_limit_of_tries(door, settings):
    """The lockout counts a try before the password is checked, in one atomic step: a
    script that sends twenty guesses at once gets the limit's worth of answers, not twenty."""
    import threading

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    get_user_model().objects.create_user("target", password="the-real-password-123")
    settings.LOGIN_FAILURES_PER_ACCOUNT, settings.LOGIN_FAILURES_PER_ADDRESS = 5, 100
    barrier, codes, lock = threading.Barrier(20), [], threading.Lock()

    def guess(n):
        try:
            client = Client()
            barrier.wait()
            code = client.post(door, {"username": "target", "password": f"guess-{n}"},
                               REMOTE_ADDR="198.51.100.20").status_code
            with lock:
                codes.append(code)
        finally:
            connection.close()  # each thread's own database connection

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    checked = [code for code in codes if code != 429]
    assert len(codes) == 20 and len(checked) <= 5, sorted(codes)


def test_right_passwords_do_not_use_up_the_address_count(annotator, client, settings):
    """Tries are counted before the check; a right one is given back, so an office behind
    one address signs in as often as it likes."""
    settings.LOGIN_FAILURES_PER_ADDRESS = 3
    for _ in range(6):
        assert client.post("/accounts/login/", {"username": "annotator", "password": PASSWORD}).status_code == 302
        client.logout()
    assert client.post("/api/auth/token/", {"username": "annotator"}).status_code == 400  # checked nothing
    for _ in range(3):
        assert client.post("/api/auth/token/", {"username": "annotator", "password": "x"}).status_code == 401
    assert client.post("/api/auth/token/", {"username": "annotator", "password": PASSWORD}).status_code == 429
