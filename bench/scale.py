"""Every page and job at a study's size: does it cost the same at 1M examples as at 10k?

    .venv/bin/python bench/scale.py --sizes 10000,100000,1000000 [--databases sqlite,postgres]
        [--repeats 7] [--periodic-repeats 3] [--work 20] [--dir var/bench] [--out PATH]

For each database and size, in a process of its own (``benchlib.scale_part``, with
``DATABASE_URL`` set), a database shaped like a study (``benchlib.scale_data``): one
NLI task, N examples written on the platform (about 30% fooling the model; verified,
rejected, pending, flagged, user-flagged, retracted), about three decisions each,
2,000 accounts, 10% of the examples from MTurk assignments (batches, HITs, assignments,
the settled bonus ledger), every column set as the project's saves set it and the
round counters filled by the project's own recount. A database is built once and kept
(SQLite: a file under ``--dir``; PostgreSQL: ``dyn_bench_<N>`` at ``$BENCH_POSTGRES_URL``,
default postgres://postgres@127.0.0.1:5432/), keyed by the size and a fingerprint of the
migrations and of the build (a stale one is built again); each run adds a few rows to it
(the periodic jobs' new work). Then, in that process:

* select_1:  the bare round trip (``SELECT 1``): the baseline;
* requests:  every request path through Django's test ``Client`` in this process
             (anonymous, the task's researcher, a validator, the superuser): home, task
             page, rounds and round-stats API, the next validation item, leaderboard
             page and API, the examples API (first page, a status filter, a deep cursor
             half way down), contexts API, the admin's Examples list (first page, a
             filter, a search by uid) and Validations list (first page, the last page
             its bounded paginator offers), as the superuser and as the researcher:
             median of ``--repeats`` after a warm-up, SQL statements, the process's RSS;
* periodic:  the crowd quality check of the newest batch, ``pay_bonuses``,
             ``tasks_due_for_refit``: a run right after a run (no new work), and a run
             after ``--work`` new MTurk assignments, examples and 3 votes each (saved
             through the project's saves); ``reconcile_counts`` (a full recount, linear
             by design: reported, not judged).

Across sizes, per path: the growth exponent (least-squares slope of log median time
against log N), the ratio of the largest size's median to the smallest's, and whether the
statement count changed. Targets: every request path and every periodic run with no
new work has a slope at most 0.1, a ratio at most 1.5 and the same statement count at
every size; the runs after new work should cost what the work costs (same targets,
judged apart). Prints a table and writes bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from benchlib import BENCH, RESULTS, ROOT
from benchlib.results import command_line, fixed_table, library_versions, log, utc_now, write_json

TARGETS = {"slope": 0.1, "ratio": 1.5}
POSTGRES_URL = os.environ.get("BENCH_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/")
NOTES = [
    "Requests go through Django's test Client in the measuring process (no server, no network): times are "
    "Django's and the database's; RSS is that process's resident memory after the path's runs.",
    "Ratios compare a path's median at the largest size with its median at the smallest; slope is the "
    "least-squares slope of log(median) against log(N) across all sizes.",
    "reconcile_counts is a full recount by design (the daily repair): linear in N, reported, not judged.",
    "The periodic jobs' new work is saved through Example.save and Validation.save: new approved assignments, "
    "each with one verified example that did not fool the model (its bonus settles at $0, so none is sent; "
    "no writer falls under a quality threshold, so no block is given; the fake MTurk, crowd.testing.fake_mturk, "
    "answers any call). A run first removes earlier runs' work from a kept database (delete_examples).",
    "A request path whose first run took over --slow-seconds is timed by that one (cold) run (n 1, "
    "cold_only true): its cost is far off target either way.",
    "REQUEST_QUERY_TIMEOUT is 0 (off) for the run: a path over the production ceiling (30 s) is timed, "
    "where a server would answer 503.",
    "ratio_cpu and slope_cpu: the same from the measuring process's CPU time (time.process_time), which "
    "leaves out waiting for a core on this shared 2-core machine; on PostgreSQL it also leaves out the "
    "server's own work. Not judged: read them where the wall-clock figures look like noise.",
    "PostgreSQL databases are ANALYZEd before measuring (as autovacuum keeps a live database); SQLite's are "
    "not (Django never runs ANALYZE there): each as it runs in production.",
    "Gold items are off for the run (the task's validation.gold_rate is 0): a draw is random, one in ten by "
    "default, and reads a few pages of the gold index whatever the size; so each run of the next validation "
    "item runs the same statements.",
    "DRF throttles are raised for the run (THROTTLE_*=1000000/min): the measured requests are not rate-limited.",
]


def fingerprint() -> str:
    """The migrations and the build's code: a database built under others is built again."""
    digest = hashlib.sha256()
    paths = sorted(ROOT.glob("*/migrations/*.py")) + [BENCH / "benchlib" / "scale_data.py"]
    for path in paths:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def postgres(statement: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL.rstrip("/") + "/postgres", autocommit=True) as conn:
        conn.execute(statement)


def prepare(database: str, size: int, folder: Path) -> tuple[str, Path]:
    """The database URL for (``database``, ``size``), emptied unless a complete build for
    this fingerprint is there (its marker file); the marker's path."""
    key = f"scale-{database}-{size}-{fingerprint()}"
    marker = folder / f"{key}.built"
    if database == "sqlite":
        path = folder / f"{key}.sqlite3"
        if not marker.exists():
            for stale in folder.glob(f"scale-sqlite-{size}-*"):
                stale.unlink()
        return f"sqlite:///{path}", marker
    name = f"dyn_bench_{size}"
    if not marker.exists():
        for stale in folder.glob(f"scale-postgres-{size}-*"):
            stale.unlink()
        postgres(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        postgres(f'CREATE DATABASE "{name}"')
    return POSTGRES_URL.rstrip("/") + f"/{name}", marker


def run_part(database: str, size: int, args) -> dict:
    folder = args.dir.resolve()
    folder.mkdir(parents=True, exist_ok=True)
    url, marker = prepare(database, size, folder)
    out = folder / "parts" / f"{database}-{size}.json"
    out.unlink(missing_ok=True)
    cfg = {"database": database, "size": size, "repeats": args.repeats, "periodic_repeats": args.periodic_repeats,
           "work": args.work, "out": str(out), "marker": str(marker), "build_only": args.build_only,
           "slow_seconds": args.slow_seconds}
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "fake", "AWS_SECRET_ACCESS_KEY": "fake",
           "AWS_DEFAULT_REGION": "us-east-1", "DATABASE_URL": url, "BENCH_CONFIG": json.dumps(cfg), "DEBUG": "true",
           "DJANGO_SETTINGS_MODULE": "dynabench.settings", "ALLOWED_HOSTS": "testserver",
           "REQUEST_QUERY_TIMEOUT": "0", "PYTHONPATH": str(BENCH)}
    for name in ("ANON", "USER", "EXAMPLES", "EXPLANATIONS", "VALIDATIONS"):
        env[f"THROTTLE_{name}"] = "1000000/min"
    for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CACHE_URL"):
        env.pop(name, None)
    log(f"{database} {size}: {'reusing' if marker.exists() else 'building'} {url.rsplit('/', 1)[-1]}")
    subprocess.run([sys.executable, "-m", "benchlib.scale_part"], cwd=ROOT, env=env, check=True)
    return json.loads(out.read_text(encoding="utf-8"))


# --- across sizes ----------------------------------------------------------------------------


def slope(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(time) against log(size)."""
    points = [(math.log(n), math.log(t)) for n, t in points if t and t > 0]
    if len(points) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return round(sum((x - mx) * (y - my) for x, y in points) / sxx, 3) if sxx else None


def judge(by_size: dict[int, dict], judged: bool) -> dict:
    sizes = sorted(by_size)
    medians = [(n, by_size[n]["median_ms"]) for n in sizes]
    queries = sorted({by_size[n]["queries"] for n in sizes})
    ratio = round(medians[-1][1] / medians[0][1], 2) if medians[0][1] else None
    cpu = [(n, by_size[n]["median_cpu_ms"]) for n in sizes]
    ratio_cpu = round(cpu[-1][1] / cpu[0][1], 2) if cpu[0][1] else None  # not judged: see NOTES
    growth = slope(medians)
    statuses = sorted({by_size[n].get("status", 200) for n in sizes})
    over = []
    if judged:
        if growth is not None and growth > TARGETS["slope"]:
            over.append("slope")
        if ratio is not None and ratio > TARGETS["ratio"]:
            over.append("ratio")
        if len(queries) > 1:
            over.append("queries")
        if statuses != [200]:
            over.append("status")
    return {"slope": growth, "ratio": ratio, "ratio_cpu": ratio_cpu, "slope_cpu": slope(cpu), "queries": queries,
            "statuses": statuses, "judged": judged, "over_target": over, "met": (not over) if judged else None,
            "sizes": {str(n): by_size[n] for n in sizes}}


def combine(parts: list[dict]) -> dict:
    databases = {}
    for database in dict.fromkeys(p["database"] for p in parts):
        mine = sorted((p for p in parts if p["database"] == database), key=lambda p: p["size"])
        requests, periodic = {}, {}
        for part in mine:
            for row in part["requests"]:
                requests.setdefault((row["path"], row["who"]), {})[part["size"]] = row
            for row in part["periodic"]:
                periodic.setdefault((row["job"], row["case"]), {})[part["size"]] = row
        baseline = {str(p["size"]): p["select_1"]["median_ms"] for p in mine}
        databases[database] = {
            "measured_at": [p.get("measured_at") for p in mine],
            "load_average": [p.get("load_average") for p in mine],
            "vendor": mine[0]["vendor"], "sizes": [p["size"] for p in mine], "select_1_ms": baseline,
            "builds": {str(p["size"]): {"reused": p["reused"], "built": p["built"], "rows": p["rows"],
                                        "drift_after_build": p["drift_after_build"], "counters": p["counters"]}
                       for p in mine},
            "requests": [{"path": path, "who": who, **judge(rows, True)} for (path, who), rows in requests.items()],
            "periodic": [{"job": job, "case": case, **judge(rows, job != "reconcile_counts")}
                         for (job, case), rows in periodic.items()],
        }
        for row in databases[database]["requests"] + databases[database]["periodic"]:
            largest = row["sizes"][str(mine[-1]["size"])]
            row["over_select_1"] = round(largest["median_ms"] / mine[-1]["select_1"]["median_ms"], 1)
    return databases


def table(databases: dict) -> str:
    columns = [("database", "<9"), ("path / job", "<32"), ("who / case", "<28"), ("queries", "<10"),
               ("x SELECT1", ">9"), ("ratio", ">7"), ("slope", ">7"), ("verdict", "<20")]
    rows = []
    for database, result in databases.items():
        for row in result["requests"] + result["periodic"]:
            name, who = row.get("path") or row["job"], row.get("who") or row["case"]
            verdict = ("linear by design" if not row["judged"] else
                       "ok" if row["met"] else "OVER: " + ",".join(row["over_target"]))
            rows.append([database, name[:32], who[:28], "/".join(map(str, row["queries"]))[:10],
                         str(row["over_select_1"]), "n/a" if row["ratio"] is None else f"{row['ratio']:.2f}",
                         "n/a" if row["slope"] is None else f"{row['slope']:+.2f}", verdict])
    return fixed_table(columns, rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="Examples per database, comma-separated.")
    parser.add_argument("--databases", default="sqlite", help="sqlite, postgres or both, comma-separated.")
    parser.add_argument("--repeats", type=int, default=7, help="Timed runs of each request path (after a warm-up).")
    parser.add_argument("--periodic-repeats", type=int, default=3, help="Timed runs of each periodic job and case.")
    parser.add_argument("--work", type=int, default=20, help="New assignments (one example, 3 votes each) per run.")
    parser.add_argument("--slow-seconds", type=float, default=5.0,
                        help="A request path whose first run takes longer is timed by that run alone.")
    parser.add_argument("--dir", type=Path, default=ROOT / "var" / "bench", help="Where built databases are kept.")
    parser.add_argument("--out", type=Path, default=RESULTS / "scale.json")
    parser.add_argument("--parts-only", action="store_true",
                        help="Measure nothing: combine the parts measured before under --dir (each database "
                             "measured by a run of its own) into --out.")
    parser.add_argument("--build-only", action="store_true",
                        help="Build (or find) the databases, measure nothing, write no results.")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    databases = [d.strip() for d in args.databases.split(",")]
    if args.parts_only:
        parts = [json.loads((args.dir / "parts" / f"{database}-{size}.json").read_text(encoding="utf-8"))
                 for database in databases for size in sizes]
    else:
        parts = [run_part(database, size, args) for database in databases for size in sizes]
    if args.build_only:
        for part in parts:
            log(f"{part['database']} {part['size']}: {part['built'] or 'built before'}")
        return 0
    combined = combine(parts)
    print(table(combined))
    document = {
        "benchmark": "scale", "created_at": utc_now(), "command": command_line(argv),
        "versions": library_versions("django", "psycopg"), "targets": TARGETS, "sizes": sizes,
        "notes": NOTES, "args": {"repeats": args.repeats, "slow_seconds": args.slow_seconds,
                                 "periodic_repeats": args.periodic_repeats, "work": args.work},
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "databases": combined,
    }
    log(f"wrote {write_json(args.out, document)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
