"""Doubles of external systems, for the tests and the demo; never used in production.

``fake_mturk`` is a double of Amazon Mechanical Turk's requester API: it serves
MTurk's wire protocol on 127.0.0.1 so an unmodified boto3 client reaches it
through ``MTURK_ENDPOINT_URL``. The test suite, ``manage.py crowd_demo`` and the
benchmarks start it; the platform's own code paths never import it. ``fake_prolific``
is the same for Prolific's researcher API (``PROLIFIC_API_URL``), and ``prolific_demo``
runs it for ``crowd_demo --platform prolific``; ``local_service`` is the HTTP server
both fakes run on.
"""
