"""The annotation loop's business logic, one module per concern:

- ``sessions``: annotation sessions (counters, the session tokens' lifetime);
- ``contexts``: which context an annotator gets next;
- ``examples``: writing an example (predict, fooled, store), explaining,
  retracting, flagging;
- ``validation``: the validation queue, blind answers, decisions;
- ``onboarding``: a task's onboarding quiz, its record per worker, and the rule
  that a worker who has not passed it neither writes nor validates;
- ``trust``: whose votes decide an example (one person, one vote, only votes the
  platform has reason to trust);
- ``gold``: known-answer items, the ground truth a ring of accounts cannot write;
- ``reliability``: validators' reliability on a task and the adaptive decision;
- ``counters``: the numbers the pages show, kept beside the rows and reconciled;
- ``stats``: per-round counts and rates, computed from the examples;
- ``listing``: a task's examples as its researchers list them (filters, keyset pages);
- ``exports``: exports of a task's examples as jobs.

Services raise ``core.errors`` domain errors and know nothing of HTTP; every write
is one transaction, and counters move with ``F()`` updates, never with a
read-modify-write in Python.
"""
