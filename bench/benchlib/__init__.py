"""What the benchmarks share: ``bench/<name>.py`` is one short script per benchmark,
this package the library they are written with.

- ``procs``: the processes a run starts (servers, workers, helper processes), stopped
  by process group; ports, readiness waits, the machine's load, PostgreSQL and Redis
  resets, and ``run_modes``, the shape of a main that runs one mode after another;
- ``client``: the HTTP client (one keep-alive connection, every request timed) and
  the load drivers (per-thread connections, Poisson arrivals, the open loop);
- ``stats``: percentiles, millisecond summaries, cosine, timing a call;
- ``results``: progress lines on stderr, JSON written atomically with its paths made
  portable (from the repository's root; no folder of this machine), tables (fixed
  width, Markdown), the command line and library versions a result records;
- ``data``: the data folder (``manage.py fetch_data``), seeded sampling, the SST-2 reader;
- ``stack``: the served annotation stack that ``annotation.py`` and ``load.py``
  drive (modes, setup, gunicorn and Celery, sessions, the closed loop of annotators);
- ``djangoside``: the only code here that imports Django (a scratch database in
  this process, or the stack's setup and counts in a subprocess);
- ``bare``: the bare model in a process of its own, timed inside it;
- ``baselines_tasks``, ``baselines_report``: ``baselines.py``'s per-task runners and
  its tables;
- ``web_profile_report``: ``web_profile.py``'s profile grouped by layer, and its block;
- ``validation_report``, ``frontier_report``: ``validation.py``'s and
  ``validation_frontier.py``'s tables and blocks, and the frontier's comparisons (pure
  functions of their JSON);
- ``report_sections``: the Markdown blocks of ``bench/RESULTS.md``, one per committed result
  (``bench/report.py`` writes them).

The package never imports a script (``bench/<name>.py``): what a script and the report
share lives here (import-linter checks).

The scripts run as ``python bench/<name>.py``, so ``bench/`` is on ``sys.path`` and
this package imports as ``benchlib``. Importing it puts the repository root first on
``sys.path``: the project's apps ``annotation`` and ``leaderboard`` come before the
scripts of the same names in ``bench/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"

if sys.path[:1] != [str(ROOT)]:
    sys.path.insert(0, str(ROOT))
