"""Inference under load: dynamic batching, the explanation lane, against the bare model.

    .venv/bin/python bench/load.py [--modes embedded,service] [--annotators 50]
        [--duration 60] [--rate R] [--explain-share 0.1] [--single 40] [--out PATH]

For each mode it builds a fresh database and starts the servers the way
bench/annotation.py does (both drive ``benchlib.stack``): embedded is ``gunicorn dynabench.wsgi``
(one gthread worker) with the model in the web process; service adds PostgreSQL, Redis and ``celery worker -Q
inference,explain -P threads`` (``make worker-inference``). Then, in the same run:

* bare:    the artifact in a process of its own, ``model(**tokenizer(batch))``
           under inference_mode, at batch 1 and batch 32 (examples/s);
* single:  ``POST /api/tasks/nli/examples/`` one at a time (p50: the reference), and
           the web process's CPU per example when nothing contends;
* statements: SQL statements per example (``GET contexts/next`` + ``POST
           examples``), counted in a Django process on the mode's database and queue;
* closed:  ``--annotators`` annotators write without pause for ``--duration``
           seconds (``GET contexts/next``, then ``POST examples``); throughput,
           errors, and the stored rows against the accepted answers;
* open:    requests arrive at random (Poisson) at ``--rate`` a second (default:
           half the closed loop's throughput, the platform's own capacity) for
           ``--duration`` seconds, each on a free connection: latency p50/p99,
           judged against single;
* explain: the open loop again with ``--explain-share`` of the arrivals asking
           for an explanation of an example written before: the predictions' p50
           against the open loop's, and how many explanations timed out (none
           should: beyond the bound they are refused at once);
* capacity: the open loop at 25%, 50% and 75% of the closed throughput
           (``--capacity-seconds`` each): the highest with p99 under 500 ms and no
           errors, as annotators at one example per 30 s, per core;
* scale:   service mode, the inference tier alone (web server stopped):
           ``--scale-callers`` callers ask through the queue without pause while 1,
           then 2 (``--scale-workers``) worker processes serve it, each with
           ``--scale-torch-threads`` torch threads: does throughput add up?

Targets against the bare model: closed-loop throughput at least 70% of bare
batch 32, no errors, rows = accepted; open loop p50 at most 2x single and p99
under 500 ms; explain-mix p50 within 1.2x of the open loop. Targets against the
platform itself (``platform`` in the JSON): web CPU per example under the closed
loop at most that of the same requests alone; at most 8 SQL statements per
example; the open loop at half the closed capacity within the open-loop targets;
no explanation timing out. Prints a table and writes bench/results/load.json.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import threading
import time

from benchlib import RESULTS, stack
from benchlib.bare import BareModel
from benchlib.client import Client, Pool, open_loop, poisson_arrivals
from benchlib.cpu import CpuMeter, cores, named_cpu_seconds, tree_cpu_seconds
from benchlib.procs import Processes, free_port, machine_load, run_modes
from benchlib.results import fixed_header, fixed_row, log, write_json
from benchlib.stats import summary_ms

TARGETS = {
    "closed_share_of_bare": 0.70,
    "open_p50_ratio": 2.0,
    "open_p99_ms": 500.0,
    "explain_ratio": 1.2,
    # The platform against itself (the web tier's cost):
    "web_cpu_closed_over_single": 1.0,  # web CPU per example, closed loop / one at a time
    "statements_per_example": 8,  # GET contexts/next + POST examples
    "open_share_of_closed": 0.5,  # the open loop's default rate, of the closed-loop capacity
    "seconds_per_example": 30.0,  # an annotator's pace, for capacity
}
CAPACITY_SHARES = (0.25, 0.5, 0.75)  # of the closed-loop capacity: the open-loop rates tried
COLUMNS = [
    ("mode", "<9"),
    ("bare b1", ">8.1f"),
    ("bare b32", ">8.1f"),
    ("closed/s", ">8.1f"),
    ("of b32", ">7.0%"),
    ("err", ">4d"),
    ("single p50", ">10.1f"),
    ("open p50", ">8.1f"),
    ("open p99", ">8.1f"),
    ("x single", ">8.2f"),
    ("mix p50", ">8.1f"),
    ("x open", ">7.2f"),
]


def with_p99(samples: list[float]) -> dict:
    return summary_ms(samples, p99=True)


def single_phase(port: int, token: str, hyps: list[str], n: int, meter: CpuMeter | None = None) -> dict:
    """``n`` examples one at a time, with a pause (no queueing at all): the latency
    reference, and with ``meter`` the CPU each example costs when nothing contends."""
    client = Client(port, {"X-Dynabench-Token": token})
    times, errors = [], 0
    for i in range(5):  # the first few warm the connection and the caches
        stack.write_one(client, hyps, i)
    if meter is not None:
        meter.start()
    for i in range(5, n + 5):
        status, _, elapsed = stack.write_one(client, hyps, i)
        if status != 201:
            errors += 1
        else:
            times.append(elapsed)
        time.sleep(0.05)
    cpu = meter.stop(len(times)) if meter is not None else None
    client.close()
    return {**summary_ms(times), "errors": errors, "cpu": cpu}


def open_phase(
    port: int,
    tokens: list[str],
    hyps: list[str],
    rate: float,
    args,
    explain_share: float,
    seed: int,
) -> dict:
    """Poisson arrivals at ``rate``/s for ``--duration`` seconds; each served on a free
    connection (up to 256 at once), so a slow answer never delays the next arrival (an
    open loop). A share ``explain_share`` of them ask for an explanation of an example
    their session wrote before (a prediction while it has none)."""
    pool = Pool(port, tokens, args.request_timeout)
    created: dict[str, list[int]] = {}  # by session token: only an example's author may explain it
    created_lock = threading.Lock()
    lat: dict[str, list[float]] = {"predict": [], "explain": []}
    statuses: dict[str, int] = {}
    errors: list[str] = []

    timeouts_and_refusals = [0, 0]  # 503s after INFERENCE_TIMEOUT; 503s at once (a full lane)

    def note(kind: str, status: int, data, elapsed: float, ok: int):
        key = f"{kind} {status}"
        with created_lock:
            statuses[key] = statuses.get(key, 0) + 1
            if status == ok:
                lat[kind].append(elapsed)
            elif len(errors) < 8:
                errors.append(f"{key}: {str(data)[:200]}")
            if status == 503:  # a full lane is refused at once with the code "busy"; a timeout is not
                refused = isinstance(data, dict) and data.get("code") == "busy"
                timeouts_and_refusals[1 if refused else 0] += 1

    def arrival(i: int, explain: bool):
        client = pool.client()
        mine = created.setdefault(client.headers["X-Dynabench-Token"], [])
        try:
            with created_lock:  # threads share sessions: check and take at once
                example = mine.pop() if explain and mine else None
            if example is not None:
                status, data, elapsed = client.request(
                    "POST", f"/api/examples/{example}/explanation/", {"n_steps": 10}
                )
                note("explain", status, data, elapsed, 200)
                return
            status, data, elapsed = stack.write_one(client, hyps, i)
            note("predict", status, data, elapsed, 201)
            if status == 201:
                with created_lock:
                    mine.append(data["id"])
        except Exception as exc:  # noqa: BLE001 - counted as an error
            client.close()
            note("predict", 0, f"{type(exc).__name__}: {exc}", 0.0, 201)

    schedule = poisson_arrivals(rate, args.duration, seed, explain_share)
    arrivals, wall = open_loop(schedule, arrival)
    bad = sum(v for k, v in statuses.items() if not k.endswith((" 201", " 200")))
    with created_lock:
        timeouts, refused_at_once = timeouts_and_refusals[0], timeouts_and_refusals[1]
    return {
        "rate": rate,
        "arrivals": arrivals,
        "wall_s": round(wall, 1),
        "errors": bad,
        "timeouts": timeouts,
        "refused_at_once": refused_at_once,
        "statuses": statuses,
        "error_samples": errors,
        "predict": with_p99(lat["predict"]),
        "explain": with_p99(lat["explain"]),
    }


def start_servers(mode: str, args, procs: Processes, env: dict) -> tuple[int, dict, list]:
    """gunicorn, and in service mode the inference workers: (port, their commands, the
    processes)."""
    port = free_port()
    if args.web_torch_threads:  # the process that runs the model: gunicorn embedded, the workers in service mode
        env = {**env, "DYNABENCH_TORCH_THREADS": str(args.web_torch_threads)}
    threads = max(16, args.annotators + 16)
    gunicorn = stack.gunicorn_command(port, args.web_workers, threads)
    web, _ = stack.start_web(
        procs, f"{mode} gunicorn", gunicorn, env, port, f"load-{mode}-gunicorn"
    )
    layout, started = {"web": shlex.join(gunicorn)}, [web]
    if mode == "service":
        worker = stack.celery_command("threads", args.worker_threads, f"load-{time.time_ns()}@%h")
        for n in range(args.workers):
            proc, _ = stack.start_worker(
                procs,
                f"{mode} celery worker {n}",
                [*worker[:-1], f"load{n}-{time.time_ns()}@%h"],
                env,
                f"load-{mode}-celery-{n}",
            )
            started.append(proc)
        layout["worker"] = f"{args.workers} x " + shlex.join(worker)
    return port, layout, started


def cpu_groups(servers: list) -> dict:
    """Where the closed loop's CPU goes: the web server, the inference workers (service
    mode), PostgreSQL and Redis (service mode; not started by this run), and this
    process, the load client."""
    web, workers = servers[0], servers[1:]
    groups = {"web": lambda: tree_cpu_seconds(web.pid)}
    if workers:
        groups["inference workers"] = lambda: sum(tree_cpu_seconds(w.pid) for w in workers)
        groups["postgres and redis"] = lambda: named_cpu_seconds(("postgres", "redis-server"))
    groups["load client"] = time.process_time
    return groups


def scale_phase(args, procs: Processes, env: dict, hyps: list[str]) -> dict:
    """Service mode, the inference tier alone: ``--scale-callers`` callers ask through the
    queue without pause (``djangoside._drive``: no HTTP, no database) while 1, then 2,
    ... inference worker processes serve it, each with ``--scale-torch-threads`` torch
    threads. Run with the web server and the mode's workers stopped."""
    counts = [int(n) for n in args.scale_workers.split(",")]
    found = {}
    for n in counts:
        started = []
        for k in range(n):
            cmd = stack.celery_command(
                "threads", args.worker_threads, f"scale{n}-{k}-{time.time_ns()}@%h"
            )
            worker_env = {**env, "DYNABENCH_TORCH_THREADS": str(args.scale_torch_threads)}
            proc, _ = stack.start_worker(
                procs, f"scale-out worker {k + 1} of {n}", cmd, worker_env, f"load-scale-{n}-{k}"
            )
            started.append(proc)
        log(f"scale-out: {args.scale_callers} callers, {n} worker(s), {args.duration:.0f} s")
        cfg = {
            "task": stack.TASK,
            "threads": args.scale_callers,
            "seconds": args.duration,
            "warmup": 3.0,
            "hypotheses": hyps,
        }
        found[str(n)] = stack.run_django("_drive", env, cfg, timeout=args.duration + 300)
        for proc in started:
            procs.stop(proc)
    base = found[str(counts[0])]["examples_per_s"] or None
    return {
        "callers": args.scale_callers,
        "torch_threads_per_worker": args.scale_torch_threads,
        "by_workers": found,
        "throughput_over_first": {
            n: round(r["examples_per_s"] / base, 2) if base else None for n, r in found.items()
        },
    }


def run_mode(mode: str, args, procs: Processes, base_env: dict, hyps: list[str]) -> dict:
    log(f"=== {mode} mode ===")
    env = dict(
        base_env,
        INFERENCE_BATCH_WINDOW_MS=str(args.window_ms),
        INFERENCE_MAX_BATCH=str(args.max_batch),
    )
    env = stack.mode_env(mode, env, args, "load.sqlite3")
    usernames = [f"load-{mode}-{k:02d}" for k in range(args.annotators + 1)]
    log("setup: migrate, demo tasks, the model, users (Django subprocess)")
    setup = stack.setup(env, usernames)
    port, layout, servers = start_servers(mode, args, procs, env)
    users = {u["username"]: u for u in setup["users"]}
    tokens = [stack.open_session(port, users[name]["api_token"]) for name in usernames]

    pairs = [(f"A person is outside on day {i}.", hyps[i % len(hyps)]) for i in range(256)]
    log("bare model: batch 1 and batch 32")
    bare_model = BareModel(
        procs,
        setup["model"]["path"],
        setup["model"]["sha256"],
        "default",
        base_env,
        stack.LOGS / f"load-{mode}-bare.log",
    )
    found = bare_model.throughput(pairs, args.bare_seconds)
    bare_model.close()
    bare = {k: round(v, 1) for k, v in found.items()} | {"traced": bare_model.traced}
    log(f"single requests: {args.single}")
    single = single_phase(port, tokens[0], hyps, args.single, CpuMeter(cpu_groups(servers)))
    log("SQL statements per example (Django subprocess, the mode's database and queue)")
    statements = stack.statements_per_example(env, usernames[0], hyps, args.statement_examples)

    phases = set(args.phases.split(","))
    empty = {"predict": with_p99([]), "errors": 0, "timeouts": 0, "refused_at_once": 0}
    closed = {
        "throughput_examples_per_s": None,
        "errors": 0,
        "db_equals_accepted": None,
        "create_example": summary_ms([]),
    }
    if "closed" in phases:
        meter = CpuMeter(cpu_groups(servers))
        closed, db = stack.counted_closed_loop(
            port, env, usernames[1:], tokens[1:], args.duration, hyps, args.request_timeout, meter
        )
        closed["db_new"] = db["examples_new"]
        closed["db_equals_accepted"] = db["equals_accepted"]
    capacity_rate = closed["throughput_examples_per_s"]
    if args.rate:
        rate = args.rate
    elif capacity_rate:  # half the platform's own closed-loop capacity, measured above
        rate = round(capacity_rate * TARGETS["open_share_of_closed"], 1)
    else:
        rate = round(bare["batch32"] / 2, 1)
    opened = mixed = empty
    if "open" in phases:
        log(f"open loop: {rate}/s for {args.duration:.0f} s")
        opened = open_phase(port, tokens[1:], hyps, rate, args, 0.0, seed=1)
    if "explain" in phases:
        log(f"open loop with {args.explain_share:.0%} explanations")
        mixed = open_phase(port, tokens[1:], hyps, rate, args, args.explain_share, seed=2)
    capacity = None
    if "capacity" in phases and capacity_rate:
        capacity = capacity_phase(port, tokens[1:], hyps, capacity_rate, args, opened, rate)
    checks = judge(bare, single, closed, opened, mixed)
    platform = judge_platform(single, closed, opened, mixed, statements, capacity, rate)
    scale = None
    if "scale" in phases and mode == "service":
        for proc in servers:  # nothing else on the queue or on the cores
            procs.stop(proc)
        scale = scale_phase(args, procs, env, hyps)
    return {
        "mode": mode,
        "processes": layout,
        "bare": bare,
        "rate": rate,
        "single": single,
        "closed": closed,
        "open": opened,
        "explain_mix": mixed,
        "scale_out": scale,
        "statements": statements,
        "capacity": capacity,
        "checks": checks,
        "platform": platform,
    }


def capacity_phase(port: int, tokens: list[str], hyps: list[str], closed_rate: float, args, opened: dict,
                   open_rate: float) -> dict:
    """The open loop at shares of the closed-loop capacity (the half already run is
    reused): the highest rate with p99 under the target and no errors, as annotators
    writing one example every ``seconds_per_example``, per core."""
    tried = []
    for share in CAPACITY_SHARES:
        offered = round(closed_rate * share, 1)
        if opened.get("arrivals") and abs(offered - open_rate) < 0.05:
            found = opened
        else:
            log(f"capacity: open loop at {offered}/s ({share:.0%} of closed) for {args.capacity_seconds:.0f} s")
            shorter = argparse.Namespace(**{**vars(args), "duration": args.capacity_seconds})
            found = open_phase(port, tokens, hyps, offered, shorter, 0.0, seed=10 + len(tried))
        tried.append({"share_of_closed": share, "rate": offered, "p50_ms": found["predict"]["p50_ms"],
                      "p99_ms": found["predict"]["p99_ms"], "errors": found["errors"]})
    ok = [t for t in tried if t["errors"] == 0 and (t["p99_ms"] or 1e9) < TARGETS["open_p99_ms"]]
    best = max((t["rate"] for t in ok), default=None)
    annotators = round(best * TARGETS["seconds_per_example"]) if best else 0
    return {"tried": tried, "best_rate": best, "annotators": annotators,
            "annotators_per_core": round(annotators / cores(), 1)}


def judge_platform(single: dict, closed: dict, opened: dict, mixed: dict, statements: dict,
                   capacity: dict | None, rate: float) -> dict:
    """The four figures against the platform's own targets: web CPU per example under the
    closed loop against the same requests alone; SQL statements per example; the open
    loop at half the closed-loop capacity; explanations bounded (no timeouts) with the
    predictions' p50 within the explain ratio; and capacity."""
    def web_ms(found):
        return ((found or {}).get("cpu") or {}).get("ms_per_example", {}) or {}

    alone, loaded = web_ms(single).get("web"), web_ms(closed).get("web")
    cpu_ratio = round(loaded / alone, 2) if alone and loaded else None
    open_p50 = opened["predict"]["p50_ms"]
    open_ratio = round(open_p50 / single["p50_ms"], 2) if open_p50 and single["p50_ms"] else None
    mix_ratio = round(mixed["predict"]["p50_ms"] / open_p50, 2) if open_p50 and mixed["predict"]["p50_ms"] else None
    predict_errors = sum(v for k, v in mixed.get("statuses", {}).items()
                         if k.startswith("predict") and not k.endswith(" 201"))
    per_example = statements["per_example"]["median"]
    return {
        "web_cpu_ms": {"single": alone, "closed": loaded, "closed_over_single": cpu_ratio,
                       "ok": bool(cpu_ratio and cpu_ratio <= TARGETS["web_cpu_closed_over_single"])},
        "statements_per_example": {"median": per_example, "max": statements["per_example"]["max"],
                                   "ok": per_example <= TARGETS["statements_per_example"]},
        "open_at_half_closed": {"rate": rate, "p50_over_single": open_ratio, "p99_ms": opened["predict"]["p99_ms"],
                                "errors": opened["errors"],
                                "ok": bool(open_ratio and open_ratio <= TARGETS["open_p50_ratio"]
                                           and (opened["predict"]["p99_ms"] or 1e9) < TARGETS["open_p99_ms"]
                                           and opened["errors"] == 0)},
        "explain_bounded": {"timeouts": mixed.get("timeouts", 0), "refused_at_once": mixed.get("refused_at_once", 0),
                            "predict_errors": predict_errors, "predict_p50_over_open": mix_ratio,
                            "ok": bool(mixed.get("arrivals") and mixed.get("timeouts", 0) == 0 and predict_errors == 0
                                       and mix_ratio and mix_ratio <= TARGETS["explain_ratio"])},
        "capacity": capacity,
    }


def judge(bare: dict, single: dict, closed: dict, opened: dict, mixed: dict) -> dict:
    share = (closed["throughput_examples_per_s"] or 0) / bare["batch32"]
    open_ratio = (opened["predict"]["p50_ms"] or 0) / single["p50_ms"] if single["p50_ms"] else None
    explain_ratio = (
        (mixed["predict"]["p50_ms"] or 0) / opened["predict"]["p50_ms"]
        if opened["predict"]["p50_ms"]
        else None
    )
    return {
        "closed_share_of_bare_batch32": round(share, 2),
        "closed_ok": share >= TARGETS["closed_share_of_bare"]
        and closed["errors"] == 0
        and closed["db_equals_accepted"],
        "open_p50_over_single": round(open_ratio, 2) if open_ratio else None,
        "open_ok": bool(
            open_ratio
            and open_ratio <= TARGETS["open_p50_ratio"]
            and (opened["predict"]["p99_ms"] or 1e9) < TARGETS["open_p99_ms"]
            and opened["errors"] == 0
        ),
        "explain_mix_p50_over_open": round(explain_ratio, 2) if explain_ratio else None,
        "explain_ok": bool(
            explain_ratio and explain_ratio <= TARGETS["explain_ratio"] and mixed["errors"] == 0
        ),
    }


def print_table(results: list[dict]) -> None:
    print(fixed_header(COLUMNS))
    for r in results:
        c, closed, opened, mixed = r["checks"], r["closed"], r["open"], r["explain_mix"]
        print(
            fixed_row(
                COLUMNS,
                [
                    r["mode"],
                    r["bare"]["batch1"],
                    r["bare"]["batch32"],
                    closed["throughput_examples_per_s"] or 0,
                    c["closed_share_of_bare_batch32"],
                    closed["errors"] + opened["errors"] + mixed["errors"],
                    r["single"]["p50_ms"] or 0,
                    opened["predict"]["p50_ms"] or 0,
                    opened["predict"]["p99_ms"] or 0,
                    c["open_p50_over_single"] or 0,
                    mixed["predict"]["p50_ms"] or 0,
                    c["explain_mix_p50_over_open"] or 0,
                ],
            )
        )
        print(
            f"{'':9} closed p50 {closed['create_example']['p50_ms']} ms; rows = accepted: "
            f"{closed['db_equals_accepted']}; targets: closed {c['closed_ok']}, open {c['open_ok']}, "
            f"explain {c['explain_ok']}"
        )
        cpu = closed.get("cpu") or {}
        if cpu.get("ms_per_example"):
            per = cpu["ms_per_example"]
            parts = ", ".join(f"{name} {ms}" for name, ms in per.items() if name != "total")
            print(
                f"{'':9} closed-loop CPU ms per example: {parts}; total {per['total']} "
                f"(cores busy {cpu['busy_share']:.0%})"
            )
        p = r.get("platform")
        if p:
            cpu, sql = p["web_cpu_ms"], p["statements_per_example"]
            op, ex = p["open_at_half_closed"], p["explain_bounded"]
            print(f"{'':9} platform: web CPU ms/example closed {cpu['closed']} vs alone {cpu['single']} "
                  f"(x{cpu['closed_over_single']}, {'ok' if cpu['ok'] else 'MISSED'}); SQL/example {sql['median']} "
                  f"({'ok' if sql['ok'] else 'MISSED'}); open at {op['rate']}/s p50 x{op['p50_over_single']} single, "
                  f"p99 {op['p99_ms']} ms ({'ok' if op['ok'] else 'MISSED'}); explain timeouts {ex['timeouts']}, "
                  f"503 at once {ex['refused_at_once']} ({'ok' if ex['ok'] else 'MISSED'})")
            if p["capacity"]:
                c = p["capacity"]
                print(f"{'':9} capacity: {c['annotators']} annotators at one example per "
                      f"{TARGETS['seconds_per_example']:.0f} s ({c['annotators_per_core']} per core), "
                      f"best rate {c['best_rate']}/s of {[t['rate'] for t in c['tried']]}")
        if r.get("scale_out"):
            scale = r["scale_out"]
            parts = [
                f"{n} worker(s) {found['examples_per_s']}/s (p50 {found['latency']['p50_ms']} ms, "
                f"{found['errors']} errors)"
                for n, found in scale["by_workers"].items()
            ]
            print(
                f"{'':9} scale-out, the inference tier alone: "
                + "; ".join(parts)
                + f"; x first: {scale['throughput_over_first']}"
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default="embedded,service")
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per loaded phase")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="open-loop arrivals/s (0: half bare batch 32)"
    )
    parser.add_argument("--explain-share", type=float, default=0.1)
    parser.add_argument("--single", type=int, default=40)
    parser.add_argument("--statement-examples", type=int, default=30,
                        help="examples written to count SQL statements per example")
    parser.add_argument("--capacity-seconds", type=float, default=30.0,
                        help="seconds per capacity rate (the open loop at shares of the closed capacity)")
    parser.add_argument(
        "--phases",
        default="closed,open,explain,capacity,scale",
        help="loaded phases to run (bare, single and statements always run; scale: service mode only)",
    )
    parser.add_argument("--web-workers", type=int, default=1, help="gunicorn worker processes")
    parser.add_argument("--web-torch-threads", type=int, default=0,
                        help="DYNABENCH_TORCH_THREADS of the model's process (gunicorn embedded, the "
                             "inference workers in service mode); 0: the platform's default")
    parser.add_argument("--bare-seconds", type=float, default=10.0)
    parser.add_argument("--window-ms", type=float, default=0.0, help="INFERENCE_BATCH_WINDOW_MS")
    parser.add_argument("--max-batch", type=int, default=32, help="INFERENCE_MAX_BATCH")
    parser.add_argument(
        "--workers", type=int, default=1, help="service mode: inference worker processes"
    )
    parser.add_argument("--worker-threads", type=int, default=64)
    parser.add_argument(
        "--scale-workers", default="1,2", help="scale phase: inference worker processes to compare"
    )
    parser.add_argument("--scale-callers", type=int, default=64, help="scale phase: callers")
    parser.add_argument(
        "--scale-torch-threads", type=int, default=1, help="scale phase: torch threads per worker"
    )
    stack.add_service_options(parser)
    parser.add_argument("--out", default=str(RESULTS / "load.json"))
    args = parser.parse_args()
    modes = stack.parse_modes(parser, args.modes)
    base_env = stack.bench_env()
    hyps = stack.hypotheses()
    results = run_modes(modes, lambda mode, procs: run_mode(mode, args, procs, base_env, hyps))
    if results is None:
        return 130
    print_table(results)
    document = {
        "args": vars(args),
        "targets": TARGETS,
        "machine": machine_load(),
        "results": results,
        "median_closed_p50_ms": statistics.median(
            [r["closed"]["create_example"]["p50_ms"] or 0 for r in results]
        )
        if results
        else None,
    }
    print("wrote", write_json(args.out, document))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
