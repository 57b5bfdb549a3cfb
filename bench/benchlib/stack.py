"""The served annotation stack that ``annotation.py`` and ``load.py`` drive.

A mode is embedded (gunicorn on a SQLite file under var/bench/annotation/, no
broker: predictions run in the web process) or service (PostgreSQL, database
dropped and created here; the Celery broker and result backend on Redis, flushed
here; Celery workers). The database is set up in a Django subprocess
(``djangoside``): migrate, ``bootstrap_demo --no-models``, the open NLI round's
target model (trained once on the shipped seed rows, kept under
var/bench/annotation/models) and one user per simulated annotator. The servers run
with DEBUG off, LOG_LEVEL=WARNING and the API throttles out of the way.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time
from pathlib import Path

from . import ROOT
from .client import Client
from .cpu import CpuMeter
from .procs import (
    BIN,
    Processes,
    flush_redis,
    module_command,
    module_env,
    reset_postgres,
    run_json,
    wait_http,
    wait_worker,
)
from .results import display_path, log
from .stats import summary_ms

BENCH_DIR = ROOT / "var" / "bench" / "annotation"
LOGS = BENCH_DIR / "logs"
TASK = "nli"
MODEL_NAME = "bench-annotation"
TRAIN_STEPS = 20
THROTTLE = "1000000/min"
LABELS = ["entailment", "neutral", "contradiction"]
MODES = ("embedded", "service")
CONTEXTS_NEXT = f"/api/tasks/{TASK}/contexts/next/"
EXAMPLES = f"/api/tasks/{TASK}/examples/"


def add_service_options(parser) -> None:
    """The options both scripts take for the service mode and the requests."""
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument(
        "--postgres-url", default="postgres://postgres@127.0.0.1:5432/dynabench_bench"
    )
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/10")
    parser.add_argument("--result-backend", default="redis://127.0.0.1:6379/11")


def parse_modes(parser, value: str) -> list[str]:
    modes = [m.strip() for m in value.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; choose from {sorted(MODES)}")
    return modes


def bench_env() -> dict:
    """The environment of the servers a bench starts: this one without its database,
    broker or cache, DEBUG off, throttles out of the way, models under var/bench.
    Also makes the folders."""
    (BENCH_DIR / "models").mkdir(parents=True, exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_URL", "CELERY_", "CACHE_URL"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="dynabench.settings",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        ADDRESS_HASH_KEY=secrets.token_urlsafe(50),
        NUM_PROXIES="0",  # the bench's clients connect directly
        ALLOWED_HOSTS="127.0.0.1,localhost",
        SECURE_SSL_REDIRECT="false",
        SECURE_HSTS_SECONDS="0",
        LOG_LEVEL="WARNING",
        DYNABENCH_MODELS_DIR=str(BENCH_DIR / "models"),
        DJANGO_SUPERUSER_PASSWORD=secrets.token_urlsafe(16),
        THROTTLE_EXAMPLES=THROTTLE,
        THROTTLE_EXPLANATIONS=THROTTLE,
        THROTTLE_USER=THROTTLE,
        THROTTLE_ANON=THROTTLE,
        THROTTLE_VALIDATIONS=THROTTLE,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    return env


def mode_env(mode: str, env: dict, args, sqlite_name: str, sqlite_query: str = "") -> dict:
    """``env`` with the mode's database (a fresh SQLite file, or PostgreSQL dropped and
    created) and broker (none, or Redis flushed)."""
    env = dict(env)
    if mode == "embedded":
        db_path = BENCH_DIR / sqlite_name
        for suffix in ("", "-wal", "-shm"):
            Path(str(db_path) + suffix).unlink(missing_ok=True)
        env["DATABASE_URL"] = f"sqlite:///{db_path}{sqlite_query}"
        for key in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
            env.pop(key, None)
    else:
        reset_postgres(args.postgres_url)
        flush_redis(args.broker_url, args.result_backend)
        env.update(
            DATABASE_URL=args.postgres_url,
            CELERY_BROKER_URL=args.broker_url,
            CELERY_RESULT_BACKEND=args.result_backend,
        )
    return env


def run_django(action: str, env: dict, cfg: dict, timeout: float) -> dict:
    """``djangoside.main(action)`` in a subprocess with ``env``; its answer."""
    env = {**env, "BENCH_CONFIG": json.dumps(cfg)}
    return run_json(module_command("djangoside", action), module_env(env), timeout, action)


def setup(env: dict, usernames: list[str]) -> dict:
    """The database of a mode: migrated, demo tasks, the target model, the users."""
    cfg = {
        "task": TASK,
        "usernames": usernames,
        "steps": TRAIN_STEPS,
        "models_dir": str(BENCH_DIR / "models"),
        "model_name": MODEL_NAME,
        "purpose": display_path(sys.argv[0]),
    }
    return run_django("_setup", env, cfg, timeout=1800)


def statements_per_example(env: dict, username: str, hyps: list[str], examples: int) -> dict:
    """SQL statements per written example, in the served stack's environment (``djangoside._statements``)."""
    cfg = {"task": TASK, "username": username, "hypotheses": hyps, "examples": examples}
    return run_django("_statements", env, cfg, timeout=600)


def count_examples(env: dict, usernames: list[str]) -> dict:
    """The examples stored for ``usernames``, per user and in total, with the counters."""
    return run_django("_count", env, {"task": TASK, "usernames": usernames}, timeout=300)


def gunicorn_command(
    port: int, workers: int, threads: int, graceful_timeout: int | None = None
) -> list[str]:
    """gthread workers, never --preload (see README: "Torch and fork")."""
    graceful = f" --graceful-timeout {graceful_timeout}" if graceful_timeout else ""
    options = (
        f"dynabench.wsgi --bind 127.0.0.1:{port} --workers {workers} --worker-class gthread "
        f"--threads {threads} --keep-alive 30 --timeout 120{graceful} --worker-tmp-dir /dev/shm"
    )
    return [str(BIN / "gunicorn"), *options.split()]


def celery_command(pool: str, concurrency: int, name: str) -> list[str]:
    """A worker on the inference, explain and default queues."""
    options = (
        f"-A dynabench worker -Q inference,explain,default -P {pool} -c {concurrency} "
        f"--without-gossip --without-mingle --without-heartbeat -l info -n {name}"
    )
    return [str(BIN / "celery"), *options.split()]


def start_web(procs: Processes, name: str, cmd: list[str], env: dict, port: int, log_name: str):
    """Start gunicorn (output to ``LOGS/<log_name>.log``) and wait for /healthz: (process,
    seconds until ready)."""
    log_path = LOGS / f"{log_name}.log"
    proc = procs.start(name, cmd, env, log_path)
    return proc, wait_http(port, proc, log_path)


def start_worker(
    procs: Processes, name: str, cmd: list[str], env: dict, log_name: str, children: int = 0
):
    """Start a Celery worker (LOG_LEVEL=INFO, output to ``LOGS/<log_name>.log``: readiness is
    read from it) and wait until it is ready: (process, seconds until ready)."""
    log_path = LOGS / f"{log_name}.log"
    proc = procs.start(name, cmd, {**env, "LOG_LEVEL": "INFO"}, log_path)
    return proc, wait_worker(proc, log_path, children)


# --- the annotators' requests ------------------------------------------------------------


def hypotheses() -> list[str]:
    """Hypotheses from the shipped NLI seed set (written for other premises: fine here)."""
    path = ROOT / "tasks" / "seed" / "examples" / f"{TASK}.jsonl"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line)["inputs"]["hypothesis"])
    return out


def example_body(context: dict, hypothesis: str, i: int) -> dict:
    return {
        "context": context["id"],
        "inputs": {"hypothesis": hypothesis},
        "target": {"label": LABELS[i % 3]},
    }


def open_session(port: int, api_token: str) -> str:
    """A session token from ``POST /api/tasks/<slug>/sessions/`` (authorised by the API token)."""
    client = Client(port, {"Authorization": f"Token {api_token}"})
    status, data, _ = client.request("POST", f"/api/tasks/{TASK}/sessions/")
    client.close()
    if status != 201:
        raise RuntimeError(f"session create answered {status}: {data}")
    return data["token"]


def write_one(client: Client, hyps: list[str], i: int) -> tuple[int, dict | None, float]:
    """``GET contexts/next`` then ``POST examples``: the second answer, or the first
    when it is not a context."""
    status, ctx, _ = client.request("GET", CONTEXTS_NEXT)
    if status != 200:
        return status, ctx, 0.0
    return client.request("POST", EXAMPLES, example_body(ctx, hyps[i % len(hyps)], i))


def closed_loop(
    port: int,
    tokens: list[str],
    duration: float,
    hyps: list[str],
    timeout: float,
    meter: CpuMeter | None = None,
) -> dict:
    """One thread per session token looping ``GET contexts/next`` -> ``POST examples``
    without pause for ``duration`` seconds; any answer but 200/201 is an error. With
    ``meter``, where the CPU went while they ran (``cpu``)."""
    results = [
        {"create": [], "next": [], "accepted": 0, "statuses": {}, "errors": [], "done": None}
        for _ in tokens
    ]
    barrier = threading.Barrier(len(tokens) + 1)
    deadline_box: list[float] = []

    def annotator(k: int, token: str):
        out = results[k]
        client = Client(port, {"X-Dynabench-Token": token}, timeout=timeout)
        barrier.wait()
        deadline = deadline_box[0]
        i = k * 1000
        while time.perf_counter() < deadline:
            i += 1
            try:
                status, ctx, t_next = client.request("GET", CONTEXTS_NEXT)
                out["next"].append(t_next)
                if status != 200:
                    out["statuses"][f"next {status}"] = out["statuses"].get(f"next {status}", 0) + 1
                    out["errors"].append(f"contexts/next {status}: {str(ctx)[:200]}")
                    continue
                status, data, t_create = client.request(
                    "POST", EXAMPLES, example_body(ctx, hyps[i % len(hyps)], i)
                )
            except Exception as exc:  # a dropped connection or a malformed answer: an error
                out["statuses"]["exception"] = out["statuses"].get("exception", 0) + 1
                out["errors"].append(f"{type(exc).__name__}: {exc}")
                continue
            out["statuses"][str(status)] = out["statuses"].get(str(status), 0) + 1
            if status == 201:
                out["accepted"] += 1
                out["create"].append(t_create)
            else:
                out["errors"].append(f"examples {status}: {str(data)[:200]}")
        out["done"] = time.perf_counter()
        client.close()

    threads = [
        threading.Thread(target=annotator, args=(k, t), daemon=True, name=f"annotator-{k}")
        for k, t in enumerate(tokens)
    ]
    for t in threads:
        t.start()
    started = time.perf_counter()
    deadline_box.append(started + duration)
    load_start = os.getloadavg()[0]
    if meter is not None:
        meter.start()
    barrier.wait()
    for t in threads:
        t.join(timeout=max(0.0, started + duration + timeout + 10 - time.perf_counter()))
    accepted = sum(r["accepted"] for r in results)
    cpu = meter.stop(accepted) if meter is not None else None
    stuck = [t.name for t in threads if t.is_alive()]
    finished = max((r["done"] for r in results if r["done"]), default=time.perf_counter())
    wall = finished - started
    statuses: dict[str, int] = {}
    for r in results:
        for key, value in r["statuses"].items():
            statuses[key] = statuses.get(key, 0) + value
    return {
        "annotators": len(tokens),
        "duration_s": duration,
        "wall_s": round(wall, 2),
        "accepted": accepted,
        "accepted_by_annotator": [r["accepted"] for r in results],
        "errors": sum(v for k, v in statuses.items() if k != "201"),
        "statuses": statuses,
        "error_samples": [e for r in results for e in r["errors"]][:8],
        "throughput_examples_per_s": round(accepted / wall, 2) if wall > 0 else None,
        "create_example": summary_ms([x for r in results for x in r["create"]]),
        "contexts_next": summary_ms([x for r in results for x in r["next"]]),
        "stuck_threads": stuck,
        "loadavg_1min_start": round(load_start, 2),
        "loadavg_1min_end": round(os.getloadavg()[0], 2),
        "cpu": cpu,
    }


def counted_closed_loop(
    port: int,
    env: dict,
    usernames: list[str],
    tokens: list[str],
    duration: float,
    hyps: list[str],
    timeout: float,
    meter: CpuMeter | None = None,
) -> tuple[dict, dict]:
    """The closed loop between two counts of the stored examples of ``usernames``
    (whose sessions ``tokens`` are): (loop, what the database gained against the
    accepted answers, in total and per annotator, with the round's and sessions'
    counters)."""
    before = count_examples(env, usernames)
    log(f"closed loop: {len(tokens)} annotators for {duration:.0f} s")
    loop = closed_loop(port, tokens, duration, hyps, timeout, meter)
    after = count_examples(env, usernames)
    new = after["examples_total"] - before["examples_total"]
    db = {
        "examples_before": before["examples_total"],
        "examples_after": after["examples_total"],
        "examples_new": new,
        "equals_accepted": new == loop["accepted"],
        "per_annotator_equals_accepted": all(
            after["examples_by_user"].get(name, 0) == n
            for name, n in zip(usernames, loop["accepted_by_annotator"], strict=True)
        ),
        "round_counter_new": after["round_examples_collected"] - before["round_examples_collected"],
        "session_counters_new": sum(after["session_examples_written"].values())
        - sum(before["session_examples_written"].values()),
    }
    return loop, db
