"""Shared infrastructure for every app, below all of them.

Nothing here knows about tasks, examples or models; the apps build on it:

- ``core.errors``: the domain errors services raise (no HTTP in them);
- ``core.api``: the one place that maps those errors (and Django's, DRF's, the
  broker's) to HTTP statuses and one error body, plus pagination, the bounded
  JSON parser and the OpenAPI pieces every endpoint shares;
- ``core.replies``: Redis reply lists, how an inference worker answers the one
  web request waiting on it (signed);
- ``core.cache``: the Redis cache that signs what it pickles and refuses the rest;
- ``core.ratelimit``: failure counters on the shared cache (sign-in lockout,
  sign-up limits) and the client address they key on;
- ``core.accounts``: sign-up, sign-in and API token views with those limits;
- ``core.svg``: what every SVG chart draws alike (scales, gridlines, lines, escaping).
"""
