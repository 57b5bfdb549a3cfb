"""Doubles of external systems, for the tests and the demo; never used in production.

``fake_mturk`` is a double of Amazon Mechanical Turk's requester API: it serves
MTurk's wire protocol on 127.0.0.1 so an unmodified boto3 client reaches it
through ``MTURK_ENDPOINT_URL``. The test suite, ``manage.py crowd_demo`` and the
benchmarks start it; the platform's own code paths never import it.
"""
