"""Inference under load: dynamic batching, the explanation lane, against the bare model.

    .venv/bin/python bench/load.py [--modes embedded,service] [--annotators 50]
        [--duration 60] [--rate R] [--explain-share 0.1] [--single 40] [--out PATH]

For each mode it builds a fresh database and starts the servers the way
bench/annotation.py does (process control, setup and the HTTP client come from
there): embedded is ``gunicorn dynabench.wsgi`` (one gthread worker) with the
model in the web process; service adds PostgreSQL, Redis and ``celery worker -Q
inference,explain -P threads`` (``make worker-inference``). Then, in the same run:

* bare:    the artifact in a process of its own, ``model(**tokenizer(batch))``
           under inference_mode, at batch 1 and batch 32 (examples/s);
* single:  ``POST /api/tasks/nli/examples/`` one at a time (p50: the reference);
* closed:  ``--annotators`` annotators write without pause for ``--duration``
           seconds (``GET contexts/next``, then ``POST examples``); throughput,
           errors, and the stored rows against the accepted answers;
* open:    requests arrive at random (Poisson) at ``--rate`` a second (default:
           half the bare batch-32 throughput) for ``--duration`` seconds, each
           on a free connection: latency p50/p99, judged against single;
* explain: the open loop again with ``--explain-share`` of the arrivals asking
           for an explanation of an example written before: the predictions' p50
           against the open loop's.

Targets (issue 12): closed-loop throughput at least 70% of bare batch 32, no
errors, rows = accepted; open loop p50 at most 2x single and p99 under 500 ms;
explain-mix p50 within 1.2x of the open loop. Prints a table and writes
bench/results/load.json.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from benchio import write_json


def _load_common():
    """bench/annotation.py (processes, setup, the HTTP client), under a name that is
    not the Django app's."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_annotation", Path(__file__).with_name("annotation.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


common = _load_common()

ROOT = common.ROOT
TASK = common.TASK
TARGETS = {"closed_share_of_bare": 0.70, "open_p50_ratio": 2.0, "open_p99_ms": 500.0, "explain_ratio": 1.2}


def log(message: str) -> None:
    print(f"[load {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the bare model, in its own process -------------------------------------------------

BARE_SCRIPT = r"""
import json, sys, time
import torch
import ml
from ml.artifacts import load_artifact
path, sha, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
loaded = load_artifact(path, sha)
pairs = json.loads(sys.stdin.read())
tok, model = loaded.tokenizer, loaded.model
def run(batch):
    enc = tok([p for p, _ in batch], [h for _, h in batch], truncation=True, max_length=loaded.spec.max_tokens,
              padding="longest", return_tensors="pt")
    with torch.inference_mode():
        model(**{k: v for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")})
out = {}
for size in (1, 32):
    run(pairs[:size])  # warm
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        begin = (done * size) % len(pairs)
        batch = (pairs[begin:] + pairs)[:size]
        run(batch)
        done += 1
    out[f"batch{size}"] = done * size / (time.perf_counter() - started)
print(json.dumps(out), flush=True)
"""


def bare_throughput(path: str, sha256: str, pairs: list[tuple[str, str]], env: dict, seconds: float) -> dict:
    proc = subprocess.run([common.PYTHON, "-c", BARE_SCRIPT, path, sha256, str(seconds)], input=json.dumps(pairs),
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the bare pass failed:\n{proc.stderr[-3000:]}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return {k: round(v, 1) for k, v in found.items()}


# --- the HTTP phases -----------------------------------------------------------------------


class Pool:
    """Keep-alive connections shared by whichever thread needs one (one request each)."""

    def __init__(self, port: int, tokens: list[str], timeout: float):
        self.port, self.tokens, self.timeout = port, tokens, timeout
        self.local = threading.local()
        self.counter = 0
        self.lock = threading.Lock()

    def client(self) -> common.Client:
        if getattr(self.local, "client", None) is None:
            with self.lock:
                token = self.tokens[self.counter % len(self.tokens)]
                self.counter += 1
            self.local.client = common.Client(self.port, {"X-Dynabench-Token": token}, timeout=self.timeout)
        return self.local.client


def write_one(client: common.Client, hyps: list[str], i: int) -> tuple[int, dict | None, float]:
    status, ctx, _ = client.request("GET", f"/api/tasks/{TASK}/contexts/next/")
    if status != 200:
        return status, ctx, 0.0
    return client.request("POST", f"/api/tasks/{TASK}/examples/", common.example_body(ctx, hyps[i % len(hyps)], i))


def single_phase(port: int, token: str, hyps: list[str], n: int) -> dict:
    client = common.Client(port, {"X-Dynabench-Token": token})
    times, errors = [], 0
    for i in range(n + 5):
        status, _, elapsed = write_one(client, hyps, i)
        if status != 201:
            errors += 1
        elif i >= 5:  # the first few warm the connection and the caches
            times.append(elapsed)
        time.sleep(0.05)  # one at a time, with a pause: no queueing at all
    client.close()
    return {**common.summary_ms(times), "errors": errors}


def open_phase(port: int, tokens: list[str], hyps: list[str], rate: float, duration: float,
               explain_share: float, timeout: float, seed: int = 0) -> dict:
    """Poisson arrivals at ``rate``/s; each served on a free connection (up to 256 at
    once), so a slow answer never delays the next arrival (an open loop)."""
    pool = Pool(port, tokens, timeout)
    rng = random.Random(seed)
    created: dict[str, list[int]] = {}  # by session token: only an example's author may explain it
    created_lock = threading.Lock()
    lat: dict[str, list[float]] = {"predict": [], "explain": []}
    statuses: dict[str, int] = {}
    errors: list[str] = []

    def note(kind: str, status: int, data, elapsed: float, ok: int):
        key = f"{kind} {status}"
        with created_lock:
            statuses[key] = statuses.get(key, 0) + 1
            if status == ok:
                lat[kind].append(elapsed)
            elif len(errors) < 8:
                errors.append(f"{key}: {str(data)[:200]}")

    def arrival(i: int, explain: bool):
        client = pool.client()
        mine = created.setdefault(client.headers["X-Dynabench-Token"], [])
        try:
            if explain and mine:
                with created_lock:
                    example = mine.pop()
                status, data, elapsed = client.request("POST", f"/api/examples/{example}/explanation/",
                                                       {"n_steps": 10})
                note("explain", status, data, elapsed, 200)
                return
            status, data, elapsed = write_one(client, hyps, i)
            note("predict", status, data, elapsed, 201)
            if status == 201:
                with created_lock:
                    mine.append(data["id"])
        except Exception as exc:  # noqa: BLE001 - counted as an error
            client.close()
            note("predict", 0, f"{type(exc).__name__}: {exc}", 0.0, 201)

    started = time.perf_counter()
    at, i = started, 0
    with ThreadPoolExecutor(max_workers=256) as executor:
        while True:
            at += rng.expovariate(rate)
            if at - started > duration:
                break
            delay = at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            explain = rng.random() < explain_share
            executor.submit(arrival, i, explain)
            i += 1
    wall = time.perf_counter() - started
    bad = sum(v for k, v in statuses.items() if not k.endswith((" 201", " 200")))
    return {"rate": rate, "arrivals": i, "wall_s": round(wall, 1), "errors": bad, "statuses": statuses,
            "error_samples": errors, "predict": _with_p99(lat["predict"]), "explain": _with_p99(lat["explain"])}


def _with_p99(samples: list[float]) -> dict:
    found = common.summary_ms(samples)
    found["p99_ms"] = round(common.percentile(samples, 0.99) * 1000, 2) if samples else None
    return found


# --- one mode ------------------------------------------------------------------------------


def run_mode(mode: str, args, procs: common.Processes, base_env: dict, hyps: list[str]) -> dict:
    log(f"=== {mode} mode ===")
    logs = common.BENCH_DIR / "logs"
    env = dict(base_env, INFERENCE_BATCH_WINDOW_MS=str(args.window_ms), INFERENCE_MAX_BATCH=str(args.max_batch))
    if mode == "embedded":
        db = common.BENCH_DIR / "load.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            db.with_name(db.name + suffix).unlink(missing_ok=True)
        env["DATABASE_URL"] = f"sqlite:///{db}"
        for key in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
            env.pop(key, None)
    else:
        common.reset_postgres(args.postgres_url)
        common.flush_redis(args.broker_url, args.result_backend)
        env.update(DATABASE_URL=args.postgres_url, CELERY_BROKER_URL=args.broker_url,
                   CELERY_RESULT_BACKEND=args.result_backend)
    usernames = [f"load-{mode}-{k:02d}" for k in range(args.annotators + 1)]
    cfg = {"task": TASK, "usernames": usernames, "steps": common.TRAIN_STEPS,
           "models_dir": str(common.BENCH_DIR / "models")}
    log("setup: migrate, demo tasks, the model, users (Django subprocess)")
    setup = common.run_django("_setup", env, cfg, timeout=1800)

    port = common.free_port()
    threads = max(16, args.annotators + 16)
    gunicorn = [str(common.BIN / "gunicorn"), "dynabench.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", str(args.web_workers),
                "--worker-class", "gthread", "--threads", str(threads), "--keep-alive", "30", "--timeout", "120",
                "--worker-tmp-dir", "/dev/shm"]
    web_log = logs / f"load-{mode}-gunicorn.log"
    web = procs.start(f"{mode} gunicorn", gunicorn, env, web_log)
    common.wait_http(port, web, web_log)
    layout = {"web": shlex.join(gunicorn)}
    if mode == "service":
        worker = [str(common.BIN / "celery"), "-A", "dynabench", "worker", "-Q", "inference,explain,default",
                  "-P", "threads", "-c", str(args.worker_threads), "--without-gossip", "--without-mingle",
                  "--without-heartbeat", "-l", "info", "-n", f"load-{time.time_ns()}@%h"]
        for n in range(args.workers):
            worker_log = logs / f"load-{mode}-celery-{n}.log"
            proc = procs.start(f"{mode} celery worker {n}", [*worker[:-1], f"load{n}-{time.time_ns()}@%h"],
                               {**env, "LOG_LEVEL": "INFO"}, worker_log)
            common.wait_worker(proc, worker_log, 0)
        layout["worker"] = f"{args.workers} x " + shlex.join(worker)
    users = {u["username"]: u for u in setup["users"]}
    tokens = [common.open_session(port, users[name]["api_token"]) for name in usernames]

    pairs = [(f"A person is outside on day {i}.", hyps[i % len(hyps)]) for i in range(256)]
    log("bare model: batch 1 and batch 32")
    bare = bare_throughput(setup["model"]["path"], setup["model"]["sha256"], pairs, base_env, args.bare_seconds)
    rate = args.rate or round(bare["batch32"] / 2, 1)

    log(f"single requests: {args.single}")
    single = single_phase(port, tokens[0], hyps, args.single)

    phases = set(args.phases.split(","))
    empty = {"predict": common.summary_ms([]) | {"p99_ms": None}, "errors": 0}
    closed = {"throughput_examples_per_s": None, "errors": 0, "db_equals_accepted": None,
              "create_example": common.summary_ms([])}
    if "closed" in phases:
        before = common.run_django("_count", env, {"task": TASK, "usernames": usernames[1:]}, timeout=300)
        log(f"closed loop: {args.annotators} annotators for {args.duration:.0f} s")
        closed = common.load_phase(port, tokens[1:], args.duration, hyps, timeout=args.request_timeout)
        after = common.run_django("_count", env, {"task": TASK, "usernames": usernames[1:]}, timeout=300)
        closed["db_new"] = after["examples_total"] - before["examples_total"]
        closed["db_equals_accepted"] = closed["db_new"] == closed["accepted"]
    opened = mixed = empty
    if "open" in phases:
        log(f"open loop: {rate}/s for {args.duration:.0f} s")
        opened = open_phase(port, tokens[1:], hyps, rate, args.duration, 0.0, args.request_timeout, seed=1)
    if "explain" in phases:
        log(f"open loop with {args.explain_share:.0%} explanations")
        mixed = open_phase(port, tokens[1:], hyps, rate, args.duration, args.explain_share,
                           args.request_timeout, seed=2)

    share = (closed["throughput_examples_per_s"] or 0) / bare["batch32"]
    open_ratio = (opened["predict"]["p50_ms"] or 0) / single["p50_ms"] if single["p50_ms"] else None
    explain_ratio = ((mixed["predict"]["p50_ms"] or 0) / opened["predict"]["p50_ms"]
                     if opened["predict"]["p50_ms"] else None)
    checks = {
        "closed_share_of_bare_batch32": round(share, 2),
        "closed_ok": share >= TARGETS["closed_share_of_bare"] and closed["errors"] == 0
        and closed["db_equals_accepted"],
        "open_p50_over_single": round(open_ratio, 2) if open_ratio else None,
        "open_ok": bool(open_ratio and open_ratio <= TARGETS["open_p50_ratio"]
                        and (opened["predict"]["p99_ms"] or 1e9) < TARGETS["open_p99_ms"] and opened["errors"] == 0),
        "explain_mix_p50_over_open": round(explain_ratio, 2) if explain_ratio else None,
        "explain_ok": bool(explain_ratio and explain_ratio <= TARGETS["explain_ratio"] and mixed["errors"] == 0),
    }
    return {"mode": mode, "processes": layout, "bare": bare, "rate": rate, "single": single, "closed": closed,
            "open": opened, "explain_mix": mixed, "checks": checks}


def print_table(results: list[dict]) -> None:
    print(f"{'mode':9} {'bare b1':>8} {'bare b32':>8} {'closed/s':>8} {'of b32':>7} {'err':>4} "
          f"{'single p50':>10} {'open p50':>8} {'open p99':>8} {'x single':>8} {'mix p50':>8} {'x open':>7}")
    for r in results:
        c = r["checks"]
        print(f"{r['mode']:9} {r['bare']['batch1']:8.1f} {r['bare']['batch32']:8.1f} "
              f"{r['closed']['throughput_examples_per_s'] or 0:8.1f} {c['closed_share_of_bare_batch32']:7.0%} "
              f"{r['closed']['errors'] + r['open']['errors'] + r['explain_mix']['errors']:4d} "
              f"{r['single']['p50_ms'] or 0:10.1f} {r['open']['predict']['p50_ms'] or 0:8.1f} "
              f"{r['open']['predict']['p99_ms'] or 0:8.1f} {c['open_p50_over_single'] or 0:8.2f} "
              f"{r['explain_mix']['predict']['p50_ms'] or 0:8.1f} {c['explain_mix_p50_over_open'] or 0:7.2f}")
        print(f"{'':9} closed p50 {r['closed']['create_example']['p50_ms']} ms; rows = accepted: "
              f"{r['closed']['db_equals_accepted']}; targets: closed {c['closed_ok']}, open {c['open_ok']}, "
              f"explain {c['explain_ok']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="embedded,service")
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per loaded phase")
    parser.add_argument("--rate", type=float, default=0.0, help="open-loop arrivals/s (0: half bare batch 32)")
    parser.add_argument("--explain-share", type=float, default=0.1)
    parser.add_argument("--single", type=int, default=40)
    parser.add_argument("--phases", default="closed,open,explain",
                        help="loaded phases to run (bare and single always run)")
    parser.add_argument("--web-workers", type=int, default=1, help="gunicorn worker processes")
    parser.add_argument("--bare-seconds", type=float, default=10.0)
    parser.add_argument("--window-ms", type=float, default=2.0, help="INFERENCE_BATCH_WINDOW_MS")
    parser.add_argument("--max-batch", type=int, default=32, help="INFERENCE_MAX_BATCH")
    parser.add_argument("--workers", type=int, default=1, help="service mode: inference worker processes")
    parser.add_argument("--worker-threads", type=int, default=64)
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--postgres-url", default="postgres://postgres@127.0.0.1:5432/dynabench_bench")
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/10")
    parser.add_argument("--result-backend", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "load.json"))
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - {"embedded", "service"}:
        parser.error("--modes: embedded and/or service")
    common.BENCH_DIR.mkdir(parents=True, exist_ok=True)
    (common.BENCH_DIR / "models").mkdir(exist_ok=True)
    base_env = common.bench_env()
    hyps = common.hypotheses()
    procs = common.Processes()
    signal.signal(signal.SIGTERM, lambda signum, _frame: (_ for _ in ()).throw(KeyboardInterrupt(signum)))
    results = []
    try:
        for mode in modes:
            try:
                results.append(run_mode(mode, args, procs, base_env, hyps))
            finally:
                procs.stop_all()
    finally:
        procs.stop_all()
    print_table(results)
    document = {"args": vars(args), "targets": TARGETS, "machine": common.machine_load(), "results": results,
                "median_closed_p50_ms": statistics.median([r["closed"]["create_example"]["p50_ms"] or 0
                                                           for r in results]) if results else None}
    print("wrote", write_json(args.out, document))
    return 0


if __name__ == "__main__":
    sys.exit(main())
