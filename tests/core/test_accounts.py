"""Sign-in lockout, sign-up limits and the client address behind them."""

import pytest
from django.core.cache import cache
from django.test import RequestFactory

from core.ratelimit import client_ip
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counts():
    cache.clear()
    yield
    cache.clear()


def test_the_api_token_endpoint_locks_an_account_after_repeated_failures(annotator, anonymous, settings):
    settings.LOGIN_FAILURES_PER_ACCOUNT = 3
    codes = [anonymous.post("/api/auth/token/", {"username": "annotator", "password": "wrong"}).status_code
             for _ in range(3)]
    assert codes == [401, 401, 401]
    locked = anonymous.post("/api/auth/token/", {"username": "annotator", "password": PASSWORD})
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0  # even the right password waits
    assert "Too many failed sign-ins" in locked.json()["detail"]
    # Another account from the same address is not locked by this one's failures.
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("someone", password=PASSWORD)
    assert anonymous.post("/api/auth/token/", {"username": "someone", "password": PASSWORD}).status_code == 200


@pytest.mark.parametrize("lookalike", ["ａｎｎｏｔａｔｏｒ", "\U0001d41annotator", "ANNOTATOR", " annotator "])
def test_look_alike_spellings_of_an_account_share_its_lockout(annotator, client, settings, lookalike):
    """Django signs "ａｎｎｏｔａｔｏｒ" (NFKC) in as "annotator": it must not get a fresh count."""
    settings.LOGIN_FAILURES_PER_ACCOUNT = 3
    for _ in range(3):
        client.post("/accounts/login/", {"username": "annotator", "password": "wrong"})
    response = client.post("/accounts/login/", {"username": lookalike, "password": PASSWORD})
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_sign_in_page_locks_too_and_counts_per_address(annotator, client, settings):
    settings.LOGIN_FAILURES_PER_ACCOUNT = 100
    settings.LOGIN_FAILURES_PER_ADDRESS = 4
    for i in range(4):  # four different accounts from one address
        assert client.post("/accounts/login/", {"username": f"guess{i}", "password": "x"}).status_code == 200
    response = client.post("/accounts/login/", {"username": "annotator", "password": PASSWORD})
    assert response.status_code == 429 and "too many failed sign-ins" in response.content.decode()
    assert int(response["Retry-After"]) > 0
    assert "_auth_user_id" not in client.session
    # The API shares the counts: the address is locked there as well.
    assert client.post("/api/auth/token/", {"username": "annotator", "password": PASSWORD}).status_code == 429


def test_a_success_clears_the_accounts_count(annotator, client, settings):
    settings.LOGIN_FAILURES_PER_ACCOUNT = 3
    for _ in range(2):
        client.post("/accounts/login/", {"username": "annotator", "password": "wrong"})
    assert client.post("/accounts/login/", {"username": "annotator", "password": PASSWORD}).status_code == 302
    client.logout()
    for _ in range(2):
        assert client.post("/accounts/login/", {"username": "ANNOTATOR", "password": "wrong"}).status_code == 200
    assert client.post("/accounts/login/", {"username": "annotator", "password": PASSWORD}).status_code == 302


@pytest.mark.parametrize("door", ["/accounts/login/", "/api/auth/token/", "/admin/login/"])
def test_a_stranger_cannot_lock_an_account_out_from_elsewhere(researcher, client, settings, door):
    """Failures from one address lock the account there only: its owner, at another
    address, still signs in, on every door (the site, the API and the admin)."""
    settings.LOGIN_FAILURES_PER_ACCOUNT, settings.LOGIN_FAILURES_PER_ADDRESS = 3, 100
    stranger = {"REMOTE_ADDR": "198.51.100.7"}
    for _ in range(3):
        client.post(door, {"username": "researcher", "password": "wrong"}, **stranger)
    locked = client.post(door, {"username": "researcher", "password": PASSWORD}, **stranger)
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    owner = client.post(door, {"username": "researcher", "password": PASSWORD}, REMOTE_ADDR="203.0.113.20")
    assert owner.status_code in (200, 302) and owner.status_code != 429
    if door != "/api/auth/token/":
        assert owner.status_code == 302  # signed in


def test_the_admin_sign_in_counts_failures_per_address_too(annotator, client, settings):
    settings.LOGIN_FAILURES_PER_ACCOUNT, settings.LOGIN_FAILURES_PER_ADDRESS = 100, 3
    for i in range(3):
        assert client.post("/admin/login/", {"username": f"guess{i}", "password": "x"}).status_code == 200
    refused = client.post("/admin/login/", {"username": "root", "password": PASSWORD})
    assert refused.status_code == 429 and "too many failed sign-ins" in refused.content.decode()


def test_sign_ups_are_limited_per_address(client, settings):
    settings.SIGNUPS_PER_ADDRESS = 2
    for i in range(2):
        response = client.post("/accounts/signup/", {"username": f"new{i}", "password1": "a-long-enough-pass-123",
                                                     "password2": "a-long-enough-pass-123"})
        assert response.status_code == 302
        client.logout()
    response = client.post("/accounts/signup/", {"username": "new9", "password1": "a-long-enough-pass-123",
                                                 "password2": "a-long-enough-pass-123"})
    assert response.status_code == 429
    from django.contrib.auth import get_user_model

    assert not get_user_model().objects.filter(username="new9").exists()


def test_a_client_cannot_choose_its_address_with_x_forwarded_for(settings):
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.7", HTTP_X_FORWARDED_FOR="1.2.3.4")
    assert client_ip(request) == "10.0.0.7"  # no proxies configured: the header is ignored


def test_behind_a_configured_proxy_its_forwarded_address_counts(settings):
    from rest_framework.settings import api_settings

    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    api_settings.reload()
    try:
        request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9")
        assert client_ip(request) == "203.0.113.9"  # what our one proxy saw, not what the client claimed
    finally:
        settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 0}
        api_settings.reload()


def test_the_anonymous_throttle_ignores_a_forged_x_forwarded_for(demo_tasks, settings):
    """Rotating X-Forwarded-For does not reset the anonymous throttle."""
    from rest_framework.settings import api_settings
    from rest_framework.test import APIClient
    from rest_framework.throttling import AnonRateThrottle

    original = AnonRateThrottle.THROTTLE_RATES
    AnonRateThrottle.THROTTLE_RATES = {**api_settings.DEFAULT_THROTTLE_RATES, "anon": "3/min"}
    try:
        client = APIClient()
        codes = [client.get("/api/tasks/", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}").status_code for i in range(4)]
    finally:
        AnonRateThrottle.THROTTLE_RATES = original
    assert codes == [200, 200, 200, 429]


def test_a_limit_taken_by_twenty_requests_at_once_allows_exactly_its_count():
    """The daily upload limit: checked and counted in one step, so parallel requests from
    one account cannot all pass the check before any of them counts."""
    import threading

    from core.ratelimit import Limiter

    limiter = Limiter("test-parallel", 3, 3600)
    barrier, allowed = threading.Barrier(20), []

    def one():
        barrier.wait()
        if limiter.take("someone") is None:
            allowed.append(1)

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(allowed) == 3
    assert limiter.take("someone") > 0 and limiter.take("someone-else") is None


def test_sign_up_errors_read_as_errors_and_are_tied_to_their_fields(client, db):
    """A refused sign-up says so at the top, and each field's error is marked as one: its
    own red, announced element that the input names (aria-describedby) beside
    aria-invalid; help text keeps the muted help style and never looks like an error."""
    import re

    response = client.post("/accounts/signup/", {"username": "walker1", "password1": "a-long-enough-pass-123",
                                                 "password2": "something-else-456"})
    html = response.content.decode()
    assert 'role="alert" id="signup-errors"' in html and "fix the problem marked below" in html
    [field] = re.findall(r"<input[^>]*id=\"id_password2\"[^>]*>", html)
    assert 'aria-invalid="true"' in field
    assert "id_password2_error" in re.search(r'aria-describedby="([^"]*)"', field).group(1)
    error = re.search(r'<div class="field-error" id="id_password2_error" role="alert">(.*?)</div>', html, re.S)
    assert error and "Error: The two password fields didn’t match." in error.group(1)
    # The fields without an error are not marked, and the help stays help.
    [password1] = re.findall(r"<input[^>]*id=\"id_password1\"[^>]*>", html)
    assert "aria-invalid" not in password1 and "id_password1_error" not in html
    helptext = re.search(r'<div class="meta helptext" id="id_password1_helptext">(.*?)</div>', html, re.S).group(1)
    assert "at least 8 characters" in helptext and "Error" not in helptext
    assert html.index('id="id_password2"') < html.index('id="id_password2_error"')  # the error follows its field


def test_a_refused_sign_in_marks_both_fields_invalid_and_names_the_reason(annotator, client):
    import re

    html = client.get("/accounts/login/").content.decode()
    assert "aria-invalid" not in html
    response = client.post("/accounts/login/", {"username": annotator.username, "password": "not-the-password"})
    html = response.content.decode()
    assert response.status_code == 200 and 'id="login-error"' in html
    for field in ("id_username", "id_password"):
        [tag] = re.findall(rf'<input[^>]*id="{field}"[^>]*>', html)
        assert 'aria-invalid="true"' in tag and 'aria-describedby="login-error"' in tag
