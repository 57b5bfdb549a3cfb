"""The annotation loop's business logic, one module per concern:

- ``sessions``: annotation sessions (counters, the session tokens' lifetime);
- ``contexts``: which context an annotator gets next;
- ``examples``: writing an example (predict, fooled, store), explaining,
  retracting, flagging;
- ``validation``: the validation queue, blind answers, decisions;
- ``stats``: per-round counts and rates, computed from the examples;
- ``listing``: a task's examples as its researchers list them (filters, keyset pages).

Services raise ``core.errors`` domain errors and know nothing of HTTP; every write
is one transaction, and counters move with ``F()`` updates, never with a
read-modify-write in Python.
"""
