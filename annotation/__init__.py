"""The annotation app: examples, validation, sessions and the models' runtime, one
module per concern (docs/architecture.md, "One layout for every app").

The loop's business logic (services: they raise ``core.errors`` domain errors and
know nothing of HTTP; every write is one transaction, and counters move with ``F()``
updates, never with a read-modify-write in Python):

- ``sessions``: annotation sessions (counters, the session tokens' lifetime);
- ``contexts``: which context an annotator gets next;
- ``examples``: writing an example (predict, fooled, store), explaining,
  retracting, flagging;
- ``serving``: the validation queue (what a validator is served next) and the claims
  that bind answers to what was served; ``validation``: blind answers, decisions;
- ``trust``: whose votes decide an example (one person, one vote, only votes the
  platform has reason to trust);
- ``accounts``: a site account's e-mail address, confirmed by a link (until then its
  votes never count);
- ``joining``: a crowd arrival's provisional work joining the worker's account once
  the platform confirms the assignment is theirs;
- ``onboarding``: a task's onboarding quiz, taken per worker and task, and the rule
  that only those who passed write or validate (``onboarding_api``: its endpoints;
  ``onboarding_admin``: its records in the admin);
- ``gold``: known-answer items, the ground truth a ring of accounts cannot write, and
  that nothing a validator or the public sees sets apart; ``record``: a validator's
  record on checked items, which moves in steps so that no change points at one item;
- ``reliability``: validators' reliability on a task and the adaptive decision, read
  from and stored to the database; ``reliability_model`` is its pure model (no Django);
- ``counters``: the numbers the pages show, kept beside the rows and reconciled;
- ``stats``: per-round counts and rates, computed from the examples;
- ``listing``: a task's examples as its researchers list them (filters, keyset pages);
- ``exports``: exports of a task's examples as jobs;
- ``datasets``: importing data sets into a task; ``exporting``: the one exporter of
  examples (the command and the export job write through it).

The models at work:

- ``inference``: the client of the models (``predict_with``, ``explain_with``), and
  the mapping of whatever goes wrong to a domain error;
- ``remote``: targets behind endpoints, asked from the request's process
  (``registry.endpoints``), alone or in an ensemble with local models;
- ``runtime``: where the models run (the model thread, loading, warm-up, explanations);
- ``batching``: requests that arrive close together share one forward pass;
- ``startup``: what a web or worker process does when it starts;
- ``tasks``: the Celery tasks, thin wrappers over the runtime.

Requests: ``access`` (what a request may reach), ``tokens`` (signed per-session
tokens for the MTurk iframe), ``idempotency`` (``Idempotency-Key`` for the API's
writes), ``api`` and ``serializers`` (the REST API), ``schema`` (the token's OpenAPI
description), ``views`` (the pages), ``admin``; and Django's ``apps`` and ``models``.
"""
