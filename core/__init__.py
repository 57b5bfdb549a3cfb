"""Shared infrastructure for every app, below all of them.

Nothing here knows about tasks, examples or models; the apps build on it. Its
modules, one idea each:

- ``core.errors``: the domain errors services raise (no HTTP in them);
- ``core.http_exceptions``: the HTTP exceptions DRF does not have (409, 410, 413, 503
  with Retry-After, 400 by line);
- ``core.api``: the one place that maps errors (ours, Django's, DRF's, the
  broker's) to HTTP statuses and one error body;
- ``core.pagination``, ``core.parsers``, ``core.fields``, ``core.schema``: the API's
  pages, its bounded JSON and multipart parsers, request fields that keep JSON types,
  and the OpenAPI pieces every endpoint shares;
- ``core.uploads``: uploads bounded while they are read (413 before a disk fills);
- ``core.rows``: the one reader of rows of files (JSON lines, CSV records with
  their lines, ``RowError``); no Django, so the benchmarks use it too;
- ``core.middleware`` and ``core.query_ceiling``: checks before any view reads a
  body, and the ceiling on a request's queries;
- ``core.accounts``, ``core.backends``, ``core.authentication``: sign-up, sign-in
  and API tokens with their limits, the password backend, token authentication;
- ``core.inboxes``: the one spelling of the inbox an e-mail address reaches, and its
  keyed hash (one inbox confirms a bounded number of accounts);
- ``core.ratelimit``: failure counters on the shared cache (sign-in lockout,
  sign-up limits) and the client address they key on;
- ``core.cache``: the Redis cache that signs what it pickles and refuses the rest;
- ``core.replies``: Redis reply lists, how an inference worker answers the one
  web request waiting on it (signed);
- ``core.slots``: at most N calls of one kind in flight across every process;
- ``core.celery_names``: the Celery tasks' and queues' names, written once;
- ``core.consumers``: which queues a live worker consumes;
- ``core.progress``: progress of a long management command;
- ``core.durations``: durations in words people read (3600 -> "1 hour");
- ``core.svg``: what every SVG chart draws alike (scales, gridlines, lines, escaping).
"""
