"""Where the web tier's CPU goes under gunicorn in service mode, sampled by py-spy.

    .venv/bin/python bench/web_spy.py [--annotators 16] [--duration 30] [--rate 100] [--out PATH]

The load bench's service mode (``benchlib.stack``: PostgreSQL dropped and created,
Redis flushed, one gthread gunicorn worker, one Celery inference worker, DEBUG off,
throttles out of the way), then ``--annotators`` annotators in a closed loop of the two
requests (``GET contexts/next``, ``POST examples``) while ``py-spy record --format raw
--nonblocking --full-filenames`` samples the gunicorn worker process at ``--rate`` Hz,
twice, a closed loop each (``SAMPLINGS``): ``active``, every thread the OS reports running
or ready to run (py-spy leaves idle threads out; on a loaded machine a thread just woken
from a socket read waits for a core in its wait frame, and is counted), then ``gil``,
only the thread holding the GIL (``--gil``: the interpreter's work; C code that released
it, libpq's included, is not counted). The samples are grouped
by the in-process profile's layers (``benchlib.web_spy_report``), with the layers only
service mode has (gunicorn, psycopg, Celery, Redis), and set beside the latest
in-process profile in bench/results/web-profile/. Shares of samples, not times: the
machine is shared.

py-spy needs ptrace on the worker (root, or a kernel that allows it). Writes
bench/results/web-spy.json; ``bench/report.py`` puts it into RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from benchlib import RESULTS, ROOT, stack
from benchlib import web_spy_report as report
from benchlib.procs import BIN, Processes, children_of, free_port, machine_load, run_modes
from benchlib.results import command_line, display_path, library_versions, log, utc_now, write_json

WORK = stack.BENCH_DIR / "web_spy"
# the samplings, one closed loop each: every thread the OS has running or ready to run
# (py-spy's default, idle threads left out), then only the thread holding the GIL
SAMPLINGS = {"active": [], "gil": ["--gil"]}


def latest_in_process() -> dict | None:
    """The newest in-process profile's layer shares (``web-profile/*.json``)."""
    runs = [(path.stem, json.loads(path.read_text(encoding="utf-8")))
            for path in sorted((RESULTS / "web-profile").glob("*.json"))]
    if not runs:
        return None
    name, doc = max(runs, key=lambda item: item[1]["run"]["at"])
    return {"name": name, "label": doc["run"]["label"], "layers_share": doc["profile"]["layers_share"]}


def summarize(raw: str, spy_log: str, args) -> dict:
    """One sampling's layers and hottest frames, with py-spy's own count of its errors and
    how far it fell behind (a loaded machine: the rate it reached is lower)."""
    stacks = report.parse_raw(raw)
    by_layer = report.layers(stacks)
    total = sum(by_layer.values())
    errors = [line for line in spy_log.splitlines() if "Errors:" in line]
    behind = [line for line in spy_log.splitlines() if "behind in sampling" in line]
    return {
        "rate_hz": args.rate, "duration_s": args.duration, "samples": total,
        "errors": int(errors[-1].rsplit("Errors:", 1)[1].split()[0]) if errors else None,
        "behind_s": float(behind[-1].split("py-spy>", 1)[-1].split("s behind")[0]) if behind else 0.0,
        "distinct_stacks": len(stacks),
        "layers_samples": by_layer,
        "layers_share": {layer: round(n / total, 4) for layer, n in by_layer.items()} if total else {},
        "hot": report.hot_leaves(stacks),
    }


def py_spy_version() -> str:
    found = subprocess.run([str(BIN / "py-spy"), "--version"], capture_output=True, text=True, check=False)
    return found.stdout.strip().removeprefix("py-spy ") or "unknown"


def run_service(args, procs: Processes) -> dict:
    env = stack.mode_env("service", stack.bench_env(), args, "unused.sqlite3")
    usernames = [f"spy-{k:02d}" for k in range(args.annotators)]
    log("setup: migrate, demo tasks, the model, users (Django subprocess)")
    setup = stack.setup(env, usernames)
    port = free_port()
    gunicorn = stack.gunicorn_command(port, 1, max(16, args.annotators + 16))
    web, _ = stack.start_web(procs, "service gunicorn", gunicorn, env, port, "web-spy-gunicorn")
    worker = stack.celery_command("threads", 64, f"spy-{time.time_ns()}@%h")
    stack.start_worker(procs, "service celery worker", worker, env, "web-spy-celery")
    users = {u["username"]: u for u in setup["users"]}
    tokens = [stack.open_session(port, users[name]["api_token"]) for name in usernames]
    workers = children_of(web.pid)
    if len(workers) != 1:
        raise RuntimeError(f"expected one gunicorn worker under {web.pid}, found {workers}")
    hyps = stack.hypotheses()
    log(f"warming up: {args.warmup:g} s of the closed loop")
    stack.closed_loop(port, tokens, args.warmup, hyps, args.request_timeout)
    WORK.mkdir(parents=True, exist_ok=True)
    sampled, spy_cmd, closed = {}, [], {}
    for kind, extra in SAMPLINGS.items():
        raw = WORK / f"samples-{kind}.txt"
        raw.unlink(missing_ok=True)
        spy_cmd = [str(BIN / "py-spy"), "record", "--pid", str(workers[0]), "--format", "raw", "--rate",
                   str(args.rate), "--nonblocking", "--full-filenames", "--duration", str(int(args.duration)),
                   *extra, "--output", str(raw)]
        spy_log = stack.LOGS / f"web-spy-py-spy-{kind}.log"
        spy = procs.start(f"py-spy ({kind})", spy_cmd, env, spy_log)
        time.sleep(1.0)  # py-spy attaches before the loop starts
        if spy.poll() is not None:
            raise RuntimeError(f"py-spy exited ({spy.returncode}):\n{spy_log.read_text()[-2000:]}")
        log(f"closed loop: {args.annotators} annotators, {args.duration:g} s, sampled by py-spy ({kind})")
        closed[kind] = stack.closed_loop(port, tokens, args.duration, hyps, args.request_timeout)
        spy.wait(timeout=args.duration + 120)
        text = spy_log.read_text()
        if spy.returncode != 0 or not raw.is_file():
            raise RuntimeError(f"py-spy failed ({spy.returncode}):\n{text[-2000:]}")
        sampled[kind] = summarize(raw.read_text(encoding="utf-8"), text, args)
    return {
        "closed": {kind: {k: found[k] for k in ("annotators", "duration_s", "wall_s", "accepted", "errors",
                                                "statuses", "throughput_examples_per_s", "create_example")}
                   for kind, found in closed.items()},
        "spy": sampled,
        "processes": {"web": " ".join(gunicorn), "worker": " ".join(worker), "py_spy": " ".join(spy_cmd)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, default=16)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds sampled (default 30)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of the loop before (default 10)")
    parser.add_argument("--rate", type=int, default=100, help="py-spy's samples per second (default 100)")
    stack.add_service_options(parser)
    parser.add_argument("--out", default=str(RESULTS / "web-spy.json"))
    args = parser.parse_args(argv)
    load = machine_load()
    results = run_modes(["service"], lambda mode, procs: run_service(args, procs))
    if results is None:
        return 130
    [found] = results
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    document = {
        "run": {
            "at": utc_now(), "command": command_line(argv), "commit": commit, "loadavg": load["loadavg"],
            "cores": os.cpu_count(), "py_spy": py_spy_version(),
            "setup": "service mode: gunicorn (one gthread worker), PostgreSQL, Redis as Celery's broker and "
                     "result backend, one Celery inference worker, DEBUG off, no Idempotency-Key",
            "versions": library_versions("django", "djangorestframework", "gunicorn", "psycopg", "celery"),
        },
        **found,
        "in_process": latest_in_process(),
    }
    print(report.block(document))
    log(f"wrote {write_json(args.out, document)} (raw samples: {display_path(WORK)}/samples-*.txt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
