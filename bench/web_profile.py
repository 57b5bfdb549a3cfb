"""Where the web tier's CPU goes per accepted example, in one process.

    .venv/bin/python bench/web_profile.py [--examples N] [--label TEXT] [--out PATH]

An annotator's two requests, ``GET contexts/next`` then ``POST examples``, in a closed
loop through Django's WSGI handler (every middleware, DRF, the ORM) called directly in
this process: no HTTP server and no client on the same cores. The database is a fresh
SQLite file under var/bench/web_profile/, DEBUG off and throttles out of the way as in
the load bench (``stack.bench_env``), the round's target the load bench's model (trained
once on the shipped seed rows, kept under var/bench/annotation/models). No broker, so
the model answers on this process's model thread (embedded mode): the request thread
does what a web worker does in service mode except hand the rows to Celery.

Measured on CPU clocks, not the wall clock (the machine is shared):

* each ``POST`` with a new ``Idempotency-Key``, as the annotation page sends it
  (``--no-idempotency-keys``: none, as the load bench);
* the web thread's CPU per example (``time.thread_time`` around each request), by
  request, without a profiler; and the whole process's (the model thread too);
* SQL statements per example, and the bytes of the two answers;
* then the same loop under cProfile on the thread's CPU clock, its own time grouped by
  layer (``benchlib.web_profile_report.layers``) and the request's stages by
  cumulative time.

Writes ``bench/results/web-profile/<name>.json``; ``bench/report.py`` puts every file
there side by side in RESULTS.md (run it once before a change and once after).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import subprocess
import sys
import time
import uuid

from benchlib import RESULTS, ROOT, djangoside
from benchlib import web_profile_report as report
from benchlib.procs import machine_load
from benchlib.results import command_line, library_versions, log, utc_now, write_json
from benchlib.stack import BENCH_DIR, MODEL_NAME, TASK, TRAIN_STEPS, bench_env, hypotheses

WORK = ROOT / "var" / "bench" / "web_profile"
LABELS = ["entailment", "neutral", "contradiction"]


def configure() -> None:
    """This process's environment: the load bench's server settings on a fresh SQLite file."""
    WORK.mkdir(parents=True, exist_ok=True)
    db = WORK / "db.sqlite3"
    for suffix in ("", "-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    env = bench_env()
    env.update(DATABASE_URL=f"sqlite:///{db}", DYNABENCH_VAR_DIR=str(WORK), ALLOWED_HOSTS="127.0.0.1")
    for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CACHE_URL"):
        env.pop(name, None)
        os.environ.pop(name, None)
    os.environ.update(env)


class Annotator:
    """The two requests through Django's WSGI handler, each timed on this thread's CPU clock."""

    def __init__(self, app, token: str, idempotency_keys: bool = True):
        self.app, self.token, self.idempotency_keys = app, token, idempotency_keys
        self.hyps = hypotheses()
        self.cpu = {"contexts_next": 0.0, "post_example": 0.0}
        self.bytes = 0

    def call(self, method: str, path: str, body: dict | None = None, key: str = "") -> tuple[int, bytes]:
        payload = b"" if body is None else json.dumps(body).encode()
        environ = {
            "REQUEST_METHOD": method, "PATH_INFO": path, "SCRIPT_NAME": "", "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1", "REMOTE_ADDR": "127.0.0.1", "HTTP_ACCEPT": "application/json",
            "HTTP_X_DYNABENCH_TOKEN": self.token, "wsgi.version": (1, 0), "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(payload), "wsgi.errors": sys.stderr, "wsgi.multithread": True,
            "wsgi.multiprocess": False, "wsgi.run_once": False,
        }
        if body is not None:
            environ.update(CONTENT_TYPE="application/json", CONTENT_LENGTH=str(len(payload)))
        if key:
            environ["HTTP_IDEMPOTENCY_KEY"] = key
        answer = {}

        def start_response(status, headers, exc_info=None):
            answer["status"] = int(status.split()[0])

        result = self.app(environ, start_response)
        try:
            content = b"".join(result)
        finally:
            result.close()  # request_finished: what a server does after the body is sent
        return answer["status"], content

    def example(self, i: int) -> int:
        """One accepted example: (status of the POST); the CPU of each request is added up."""
        started = time.thread_time()
        status, content = self.call("GET", f"/api/tasks/{TASK}/contexts/next/")
        middle = time.thread_time()
        if status != 200:
            raise RuntimeError(f"contexts/next answered {status}: {content[:300]!r}")
        context = json.loads(content)
        middle_after_parse = time.thread_time()
        status, created = self.call("POST", f"/api/tasks/{TASK}/examples/", {
            "context": context["id"], "inputs": {"hypothesis": self.hyps[i % len(self.hyps)]},
            "target": {"label": LABELS[i % 3]}}, key=uuid.uuid4().hex if self.idempotency_keys else "")
        ended = time.thread_time()
        self.cpu["contexts_next"] += middle - started
        self.cpu["post_example"] += ended - middle_after_parse
        self.bytes += len(content) + len(created)
        if status not in (201, 503):
            raise RuntimeError(f"POST examples answered {status}: {created[:300]!r}")
        return status


def measure(annotator: Annotator, start: int, examples: int) -> dict:
    annotator.cpu = dict.fromkeys(annotator.cpu, 0.0)
    annotator.bytes = 0
    process_before = time.process_time()
    for i in range(start, start + examples):
        if annotator.example(i) != 201:
            raise RuntimeError("the model stopped answering during the measurement")
    process = time.process_time() - process_before
    web = sum(annotator.cpu.values())
    return {
        "web_thread_ms_per_example": round(web * 1000 / examples, 2),
        "by_request_ms": {name: round(s * 1000 / examples, 2) for name, s in annotator.cpu.items()},
        "process_ms_per_example": round(process * 1000 / examples, 2),
        "bytes": annotator.bytes,
    }


def count_statements(annotator: Annotator, start: int, examples: int) -> float:
    """SQL statements per example, as the database backend runs them (BEGIN and COMMIT too)."""
    from django.db import connection

    count = [0]

    def counter(execute, sql, params, many, context):
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter):
        for i in range(start, start + examples):
            annotator.example(i)
    return round(count[0] / examples, 2)


def profile(annotator: Annotator, start: int, examples: int, keep: str | None = None) -> dict:
    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    for i in range(start, start + examples):
        annotator.example(i)
    profiler.disable()
    stats = pstats.Stats(profiler)
    if keep:
        stats.dump_stats(keep)
    total = stats.total_tt
    by_layer = report.layers(stats)
    hot = report.hot_functions(stats, str(ROOT))
    return {
        "examples": examples,
        "total_s": round(total, 4),
        "profiled_ms_per_example": round(total * 1000 / examples, 2),
        "layers_share": {layer: round(s / total, 4) for layer, s in by_layer.items()},
        "hot": [{**row, "cumulative_s": round(row["cumulative_s"], 4), "own_s": round(row["own_s"], 4)}
                for row in hot],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=300, help="Examples per measured pass (default 300).")
    parser.add_argument("--warmup", type=int, default=30, help="Examples before measuring (default 30).")
    parser.add_argument("--label", default="this commit", help="What the run measures (shown in RESULTS.md).")
    parser.add_argument("--no-idempotency-keys", action="store_true",
                        help="POST without an Idempotency-Key (the browser sends a new one with each example; "
                             "the load bench sends none).")
    parser.add_argument("--pstats", help="Also keep the profile's raw statistics here (pstats format).")
    parser.add_argument("--out", default=str(RESULTS / "web-profile" / "after.json"))
    args = parser.parse_args(argv)
    configure()
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.handlers.wsgi import WSGIHandler

    from annotation import sessions
    from annotation.tokens import make_token
    from tasks.models import Task

    load = machine_load()
    log("setting up: migrate, demo tasks, the target model (trained once, then kept)")
    (BENCH_DIR / "models").mkdir(parents=True, exist_ok=True)
    setup = djangoside.prepare({
        "task": TASK, "usernames": ["profiled"], "steps": TRAIN_STEPS, "models_dir": str(BENCH_DIR / "models"),
        "model_name": MODEL_NAME, "purpose": "bench/web_profile.py"})
    user = get_user_model().objects.get(username="profiled")
    token = make_token(sessions.start_session(user, Task.objects.get(slug=TASK)))
    annotator = Annotator(WSGIHandler(), token, idempotency_keys=not args.no_idempotency_keys)
    ready_by = time.monotonic() + 300
    i = 0
    while annotator.example(i) != 201:  # the model loads on the model thread first
        if time.monotonic() > ready_by:
            raise RuntimeError("the model did not answer within 300 s")
        time.sleep(0.5)
    for i in range(1, args.warmup):
        annotator.example(i)
    n = args.examples
    log(f"measuring {n} examples on the CPU clocks")
    cpu = measure(annotator, args.warmup, n)
    sql = count_statements(annotator, args.warmup + n, 50)
    log(f"profiling {n} examples")
    prof = profile(annotator, args.warmup + n + 50, n, args.pstats)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    document = {
        "run": {
            "label": args.label, "at": utc_now(), "command": command_line(argv), "commit": commit,
            "examples": n, "idempotency_keys": not args.no_idempotency_keys, "loadavg": load["loadavg"],
            "cores": os.cpu_count(),
            "setup": "WSGI handler called directly, SQLite, DEBUG off, embedded mode (the model on its own thread)",
            "platform": platform.platform(), "versions": library_versions("django", "djangorestframework"),
        },
        "model": {k: setup["model"][k] for k in ("id", "max_steps", "trained_now")},
        "cpu": {k: v for k, v in cpu.items() if k != "bytes"},
        "sql_per_example": sql,
        "response_bytes_per_example": round(cpu["bytes"] / n),
        "profile": prof,
    }
    print(report.block({os.path.splitext(os.path.basename(args.out))[0]: document}))
    log(f"wrote {write_json(args.out, document)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
