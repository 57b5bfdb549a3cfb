"""The one module that talks to Amazon Mechanical Turk (through boto3).

Everything else in the project calls these functions; tests replace the
MTurk endpoint, never this module's callers.
"""

from __future__ import annotations

import boto3
from django.conf import settings


def client():
    """A boto3 MTurk client for the configured endpoint (sandbox by default)."""
    return boto3.client(
        "mturk",
        region_name=settings.MTURK_REGION,
        endpoint_url=settings.MTURK_ENDPOINT_URL,
    )
