"""Crowd fixtures: the platform and a boto3 client pointed at the fake MTurk (``fake_mturk`` is in
tests/conftest.py)."""

import boto3
import pytest

# A made-up AWS secret: tests check that it never reaches a page.
SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEYx"


@pytest.fixture
def crowd(fake_mturk, settings, monkeypatch):
    """The platform pointed at the fake MTurk (the sandbox), with an https public address."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEYID0001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    settings.MTURK_ENDPOINT_URL = fake_mturk.endpoint_url
    settings.MTURK_SANDBOX = True
    settings.MTURK_MAX_ATTEMPTS = 3
    settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
    yield fake_mturk
    assert fake_mturk.violations == [], "a request broke botocore's MTurk model"


@pytest.fixture
def mturk_client(fake_mturk):
    """boto3's MTurk client with its default settings (standard retries), talking to the fake."""
    client = boto3.client("mturk", region_name="us-east-1", endpoint_url=fake_mturk.endpoint_url,
                          aws_access_key_id="fake", aws_secret_access_key="fake")
    yield client
    client.close()


@pytest.fixture(autouse=True)
def _fresh_rate_limits():
    """Every test starts with no arrivals counted (the limits count in the cache)."""
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


PROLIFIC_TOKEN = "prolific-test-token-0123456789"


@pytest.fixture
def prolific_crowd(settings, monkeypatch):
    """The platform pointed at the fake Prolific (crowd/testing/fake_prolific.py), with an https
    public address; the client's pauses between retries are not waited for."""
    from crowd import prolific
    from crowd.testing.fake_prolific import FakeProlific

    monkeypatch.setattr(prolific, "sleep", lambda seconds: None)
    with FakeProlific(token=PROLIFIC_TOKEN) as fake:
        settings.PROLIFIC_API_URL = fake.url
        settings.PROLIFIC_TOKEN = PROLIFIC_TOKEN
        settings.PUBLIC_BASE_URL = "https://dynabench.example.org"
        yield fake


@pytest.fixture(params=["mturk", "prolific"])
def side(request):
    """One worker's side of each platform (tests/crowd/platforms.py): a test taking it runs
    once against the fake MTurk and once against the fake Prolific."""
    from tests.crowd.platforms import MTurkSide, ProlificSide

    if request.param == "mturk":
        return MTurkSide(request.getfixturevalue("crowd"))
    fake = request.getfixturevalue("prolific_crowd")
    # Each task's participant groups (crowd.prolific_groups) live in this workspace; without
    # one, task blocks and the onboarding hold at our page only (tests/crowd/test_prolific_flow.py).
    request.getfixturevalue("settings").PROLIFIC_WORKSPACE_ID = "5f0c0000000000000000aaaa"
    return ProlificSide(fake)
