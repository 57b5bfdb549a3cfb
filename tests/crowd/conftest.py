"""Crowd fixtures: a boto3 client pointed at the fake MTurk (``fake_mturk`` is in tests/conftest.py)."""

import boto3
import pytest


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
