"""The annotation loop through a real HTTP server: latency next to a bare forward
pass, explanation latency, and a concurrent load of annotators.

    .venv/bin/python bench/annotation.py [--duration 30] [--annotators 16]
        [--requests N] [--modes embedded,service] [--quick]

For each mode the script builds a fresh database, starts the servers, measures,
and stops everything it started (also on Ctrl-C or an error):

* embedded: ``gunicorn dynabench.wsgi`` (gthread workers, never --preload: see the
  fork pitfall in DESIGN.md) on a SQLite file under var/bench/annotation/, no
  broker: predictions run inside the web process, on its inference thread.
* service:  the same server on PostgreSQL (database ``dynabench_bench``, dropped and
  created here) with the Celery broker and result backend on Redis (db 10 and 11,
  flushed here), plus a real ``celery -A dynabench worker -Q inference,explain,default``
  (``-P threads -c 32`` as ``make worker-inference``; ``--celery-pool``/``--celery-concurrency``
  to compare). Answers come back on a Redis list (INFERENCE_REPLY_URL, here the
  result backend's URL).

Setup runs Django in a subprocess with the mode's environment (this process never
imports Django): migrate, ``bootstrap_demo --no-models``, one small NLI model trained
on the shipped seed rows with ``leaderboard.services.train_and_register`` (the
artifact is kept under var/bench/annotation/models and registered again on later
runs) as the open round's target, and one user per simulated annotator.

Measured, per mode:

1. ``POST /api/tasks/nli/examples/`` one at a time, next to a bare forward pass of
   the same artifact on the same pairs (``model(**tokenizer(premise, hypothesis))``
   under torch.inference_mode, timed inside a separate process that loaded the
   artifact through ``ml``). They alternate in blocks of ``--block`` requests (10),
   so drifting machine load hits both, with a ``--settle`` pause (50 ms) between
   blocks: after a pass, torch's OpenMP worker threads spin for some milliseconds,
   and on 2 cores that slows whatever runs next in another process, so measuring
   the two back to back charged one side for the other's spinning. Each bare pass
   keeps the cadence the served model had: the bare process first idles (untimed)
   as long as the model sat idle before that request's pass (one request cycle
   minus the previous model call, see latency_phase), because a pass after an idle
   gap costs more than one right after another (measured here: +0.7 ms after 4 ms
   idle, +1.3 ms after 10 ms, +5 ms after 50 ms). Passes back to back, with no gap,
   are reported beside it, with the ratio against them. The bare pass runs
   in three processes (``--bare-variants``): torch's defaults, OMP_NUM_THREADS=1 and
   OMP_WAIT_POLICY=PASSIVE; the fastest is the reference for the targets. On this
   2-core machine, shared with other work, torch's default two OpenMP threads spin
   waiting for each other and are often ten times slower than one thread: taking
   the fastest keeps the ratio honest.
2. ``POST /api/examples/{id}/explanation/`` (n_steps=10) on fresh examples (never
   explained: the service caches explanations), next to ``ml.explain`` in the bare
   process for reference.
3. A load of N annotators (threads, each its own user and session token, sent as
   ``X-Dynabench-Token``) looping ``GET contexts/next`` -> ``POST examples`` for
   ``--duration`` seconds; any answer but 201 (200 for contexts/next) counts as an
   error. Then the examples in the database are counted: they must equal the
   accepted (201) answers, in total and per annotator.

Targets: p50 of POST examples at most 1.5x the bare p50 embedded, 2x in service
mode; zero errors under load; database count == accepted answers.

The API throttles are raised for the bench servers through the environment
(THROTTLE_EXAMPLES, THROTTLE_EXPLANATIONS, THROTTLE_USER, THROTTLE_ANON,
THROTTLE_VALIDATIONS = 1000000/min); the servers run with DEBUG=false and
LOG_LEVEL=WARNING. ``--sqlite-conn-max-age`` and ``--model-env`` (e.g.
OMP_NUM_THREADS=1 for the process that runs the model) measure deployment settings
beside the defaults. Prints a table and writes bench/results/annotation.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import secrets
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from benchio import write_json

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "var" / "bench" / "annotation"
PYTHON = sys.executable
BIN = Path(sys.executable).parent
TASK = "nli"
MODEL_NAME = "bench-annotation"
TRAIN_STEPS = 20
THROTTLE = "1000000/min"
LABELS = ["entailment", "neutral", "contradiction"]
TARGETS = {"embedded": 1.5, "service": 2.0}


def log(message: str) -> None:
    print(f"[annotation {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- Django side (runs in a subprocess with the mode's environment) ----------------


def django_main(action: str) -> int:
    """``bench/annotation.py _setup|_count``: the only code here that imports Django."""
    import io

    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")
    import django

    django.setup()
    cfg = json.loads(os.environ["BENCH_CONFIG"])
    if action == "_setup":
        from django.core.management import call_command

        call_command("migrate", interactive=False, verbosity=0)
        call_command("bootstrap_demo", no_models=True, stdout=io.StringIO())
        result = _django_setup(cfg)
    else:
        result = _django_count(cfg)
    print("BENCH_JSON " + json.dumps(result), flush=True)
    return 0


def _django_setup(cfg: dict) -> dict:
    from django.contrib.auth import get_user_model
    from django.core.exceptions import ValidationError
    from rest_framework.authtoken.models import Token

    import ml
    from leaderboard import services as lb
    from tasks.models import Task
    from tasks.registry import register_model

    task = Task.objects.get(slug=cfg["task"])
    rnd = task.open_round()
    manifest = Path(cfg["models_dir"]) / f"{task.slug}-{MODEL_NAME}-{cfg['steps']}steps.json"
    model, trained = None, False
    if manifest.exists():
        kept = json.loads(manifest.read_text())
        try:
            model = register_model(
                task, ml.verify_artifact(kept["path"], kept["sha256"]), name=MODEL_NAME
            )
        except (ml.ArtifactError, ValidationError, KeyError, OSError):
            model = None
    train_s = 0.0
    if model is None:
        rows = lb.read_seed_rows(task.slug)
        started = time.perf_counter()
        model = lb.train_and_register(
            task,
            rows,
            name=MODEL_NAME,
            max_steps=cfg["steps"],
            epochs=1,
            batch_size=16,
            seed=0,
            training_data=lb.data_summary(
                rows, source="shipped seed set", purpose="bench/annotation.py"
            ),
        )
        train_s = time.perf_counter() - started
        trained = True
        manifest.write_text(json.dumps({"path": str(model.artifact_dir), "sha256": model.sha256}))
    rnd.target_models.set([model])

    User = get_user_model()
    users = []
    for name in cfg["usernames"]:
        user = User.objects.create_user(username=name, password=None)
        users.append({"username": name, "api_token": Token.objects.create(user=user).key})
    return {
        "task": task.slug,
        "round": rnd.number,
        "round_id": rnd.pk,
        "contexts": task.contexts.filter(is_active=True).count(),
        "model": {
            "id": model.pk,
            "path": str(model.artifact_dir),
            "sha256": model.sha256,
            "trained_now": trained,
            "train_seconds": round(train_s, 1),
            "max_steps": cfg["steps"],
            "metrics": {k: v for k, v in model.metrics.items() if k != "test"},
        },
        "users": users,
    }


def _django_count(cfg: dict) -> dict:
    from django.db.models import Count

    from annotation.models import AnnotationSession, Example
    from annotation.services.stats import round_stats
    from tasks.models import Task

    task = Task.objects.get(slug=cfg["task"])
    rnd = task.open_round()
    users = cfg["usernames"]
    by_user = {
        row["annotator__username"]: row["n"]
        for row in Example.objects.filter(task=task, annotator__username__in=users)
        .values("annotator__username")
        .annotate(n=Count("pk"))
    }
    sessions_written: dict[str, int] = {}
    for session in AnnotationSession.objects.filter(
        task=task, user__username__in=users
    ).select_related("user"):
        name = session.user.username
        sessions_written[name] = sessions_written.get(name, 0) + session.examples_written
    return {
        "examples_by_user": by_user,
        "examples_total": sum(by_user.values()),
        "session_examples_written": sessions_written,
        "round_examples_collected": round_stats(rnd)["collected"],
        "task_examples_all": Example.objects.filter(task=task).count(),
    }


# --- processes ----------------------------------------------------------------------


class Processes:
    """Everything this run starts, stopped by process group on exit."""

    def __init__(self):
        self.running: list[tuple[str, subprocess.Popen, object]] = []

    def start(
        self, name: str, cmd: list[str], env: dict, log_path: Path, pipe: bool = False
    ) -> subprocess.Popen:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_file = open(log_path, "w")  # noqa: SIM115 - closed in stop()
        if pipe:  # JSON lines on stdin/stdout, stderr to the log
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                bufsize=1,
                start_new_session=True,
            )
        else:
            proc = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.running.append((name, proc, log_file))
        log(f"started {name} (pid {proc.pid}): {shlex.join(cmd)}")
        return proc

    def stop_all(self) -> None:
        for name, proc, log_file in reversed(self.running):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    log(f"{name} did not stop in 20 s; killing its process group")
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    proc.wait(timeout=10)
            log_file.close()
        self.running.clear()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def run_django(action: str, env: dict, cfg: dict, timeout: float) -> dict:
    env = {**env, "BENCH_CONFIG": json.dumps(cfg)}
    proc = subprocess.run(
        [PYTHON, str(Path(__file__).resolve()), action],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH_JSON ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"{action} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len("BENCH_JSON ") :])


def busy_processes(limit: int = 6) -> list[str]:
    out = subprocess.run(
        ["ps", "-eo", "pid,pcpu,etime,args", "--sort=-pcpu"], capture_output=True, text=True
    )
    rows = []
    for line in out.stdout.splitlines()[1:]:
        parts = line.split(None, 3)
        if len(parts) == 4 and float(parts[1]) >= 5.0 and int(parts[0]) != os.getpid():
            rows.append(f"{parts[0]} {parts[1]}% {parts[3][:100]}")
    return rows[:limit]


def machine_load() -> dict:
    one, five, fifteen = os.getloadavg()
    return {
        "loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)],
        "busy_processes": busy_processes(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


# --- HTTP ---------------------------------------------------------------------------


class Client:
    """One keep-alive connection; every request is timed end to end (send -> body read)."""

    def __init__(self, port: int, headers: dict, timeout: float = 60.0):
        self.port, self.headers, self.timeout = port, headers, timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body=None) -> tuple[int, dict | None, float]:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Accept": "application/json", **self.headers}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        started = time.perf_counter()
        try:
            self.conn.request(method, path, body=payload, headers=headers)
            response = self.conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        elapsed = time.perf_counter() - started
        if response.getheader("Connection", "").lower() == "close":
            self.close()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            data = {"raw": raw[:300].decode(errors="replace")}
        return response.status, data, elapsed

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def open_session(port: int, api_token: str) -> str:
    """A session token from ``POST /api/tasks/<slug>/sessions/`` (authorised by the API token)."""
    client = Client(port, {"Authorization": f"Token {api_token}"})
    status, data, _ = client.request("POST", f"/api/tasks/{TASK}/sessions/")
    client.close()
    if status != 201:
        raise RuntimeError(f"session create answered {status}: {data}")
    return data["token"]


def wait_http(port: int, proc: subprocess.Popen, log_path: Path, timeout: float = 90.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(
                f"the server exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}"
            )
        try:
            client = Client(port, {}, timeout=5)
            status, _, _ = client.request("GET", "/healthz")
            client.close()
            if status == 200:
                return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(
        f"the server did not answer /healthz in {timeout:.0f} s:\n{log_path.read_text()[-3000:]}"
    )


def wait_worker(
    proc: subprocess.Popen, log_path: Path, children: int, timeout: float = 120.0
) -> float:
    """Until the worker logs 'ready' and each prefork child has warmed its model cache
    (``worker_process_init``; other pools load the model on first use: the warm-up
    requests do that)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(
                f"the Celery worker exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}"
            )
        text = log_path.read_text(errors="replace")
        if " ready." in text and (
            text.count("a target model loaded") >= children
            or "warming up target models failed" in text
        ):
            return time.monotonic() - started
        time.sleep(0.25)
    raise RuntimeError(
        f"the Celery worker was not ready in {timeout:.0f} s:\n{log_path.read_text()[-3000:]}"
    )


# --- numbers ------------------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def summary_ms(samples: list[float]) -> dict:
    if not samples:
        return {"n": 0, "p50_ms": None, "p95_ms": None, "mean_ms": None, "max_ms": None}
    return {
        "n": len(samples),
        "p50_ms": round(statistics.median(samples) * 1000, 2),
        "p95_ms": round(percentile(samples, 0.95) * 1000, 2),
        "mean_ms": round(statistics.fmean(samples) * 1000, 2),
        "max_ms": round(max(samples) * 1000, 2),
    }


def hypotheses() -> list[str]:
    """Hypotheses from the shipped NLI seed set (written for other premises: fine here)."""
    path = ROOT / "tasks" / "seed" / "examples" / f"{TASK}.jsonl"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line)["inputs"]["hypothesis"])
    return out


# --- the bench ------------------------------------------------------------------------


def bare_main(path: str, sha256: str) -> int:
    """``bench/annotation.py _bare PATH SHA256``: the bare pass, in its own process.

    Reads JSON lines (``forward`` / ``explain`` requests) on stdin and answers each
    with the seconds it took, measured here. One process per OpenMP setting (from
    the environment): switching ``torch.set_num_threads`` back and forth in one
    process costs more than a pass.
    """
    sys.path.insert(0, str(ROOT))
    import torch

    import ml

    cache = ml.ModelCache(max_size=1)
    ref = ml.ModelRef(path, sha256)
    loaded = cache.get(ref)
    model, tokenizer, spec = loaded.model, loaded.tokenizer, loaded.spec
    print(json.dumps({"ready": True, "torch_threads": torch.get_num_threads()}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "quit":
            break
        if request.get("idle"):  # the HTTP loop's cadence: see latency_phase
            time.sleep(request["idle"])
        started = time.perf_counter()
        if request["op"] == "forward":
            enc = tokenizer(
                request["premise"],
                request["hypothesis"],
                return_tensors="pt",
                truncation=True,
                max_length=spec.max_tokens,
            )
            with torch.inference_mode():
                model(**enc).logits.softmax(-1)
        else:
            ml.explain(
                ref,
                {"premise": request["premise"], "hypothesis": request["hypothesis"]},
                target=request["target"],
                n_steps=10,
                cache=cache,
            )
        print(json.dumps({"s": time.perf_counter() - started}), flush=True)
    return 0


BARE_VARIANTS = {
    "default": ("torch defaults", {}),
    "1thread": ("OMP_NUM_THREADS=1", {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}),
    "passive": ("OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}),
}


class BareModel:
    """The registered artifact, verified and loaded by ``ml`` in a separate process
    (so this process never imports torch); timings are taken inside that process."""

    def __init__(
        self, procs: Processes, path: str, sha256: str, variant: str, env: dict, log_path: Path
    ):
        self.name, extra = BARE_VARIANTS[variant]
        cmd = [PYTHON, str(Path(__file__).resolve()), "_bare", path, sha256]
        self.env = extra
        self.proc = procs.start(
            f"bare pass ({self.name})", cmd, {**env, **extra}, log_path, pipe=True
        )
        ready = self._read(timeout=300)
        self.torch_threads = ready["torch_threads"]

    def _read(self, timeout: float = 120) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the bare-pass process exited ({self.proc.poll()})")
        return json.loads(line)

    def _ask(self, **request) -> float:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()["s"]

    def forward(self, premise: str, hypothesis: str, idle: float = 0.0) -> float:
        """One timed pass; with ``idle``, the process first sleeps that long (untimed)."""
        return self._ask(op="forward", premise=premise, hypothesis=hypothesis, idle=idle)

    def explain(self, premise: str, hypothesis: str, target: str) -> float:
        return self._ask(op="explain", premise=premise, hypothesis=hypothesis, target=target)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass


def example_body(context: dict, hypothesis: str, i: int) -> dict:
    return {
        "context": context["id"],
        "inputs": {"hypothesis": hypothesis},
        "target": {"label": LABELS[i % 3]},
    }


def latency_phase(
    port: int,
    session_token: str,
    bares: dict[str, BareModel],
    hyps: list[str],
    n: int,
    n_explain: int,
    n_warm: int,
    block: int = 10,
    settle: float = 0.05,
) -> dict:
    """One annotator, one request at a time, in blocks alternating with the bare
    passes on the same pairs (see the module docstring)."""
    client = Client(port, {"X-Dynabench-Token": session_token})
    create_t, next_t, server_ms, statuses = [], [], [], {}
    bare_t: dict[str, list[float]] = {name: [] for name in bares}
    back_to_back_t: list[float] = []
    created = []  # (id, premise, hypothesis, predicted label)
    failures = []

    previous_post = [None]  # (start, seconds the server's model call took)

    def http_one(i: int, measure: bool):
        status, ctx, t_next = client.request("GET", f"/api/tasks/{TASK}/contexts/next/")
        if status != 200:
            raise RuntimeError(f"contexts/next answered {status}: {ctx}")
        premise, hypothesis = ctx["fields"]["premise"], hyps[i % len(hyps)]
        before_post = time.perf_counter()
        # How long the model sat idle before this request's pass: from the previous
        # pass's end to this one's start, i.e. one request cycle minus the previous
        # model call (its web work before and after the pass included, as the model
        # is idle then too). The server's model call includes the queue round trip
        # in service mode, so this errs short: toward a faster bare reference.
        idle = 0.0
        if previous_post[0] is not None:
            idle = max(0.0, before_post - previous_post[0][0] - previous_post[0][1])
        status, data, t_create = client.request(
            "POST", f"/api/tasks/{TASK}/examples/", example_body(ctx, hypothesis, i)
        )
        previous_post[0] = (before_post, (data or {}).get("latency_ms", 0) / 1000 if status == 201 else 0.0)
        if measure:
            statuses[status] = statuses.get(status, 0) + 1
            next_t.append(t_next)
            if status == 201:
                create_t.append(t_create)
                server_ms.append(data["latency_ms"] / 1000)
                created.append((data["id"], premise, hypothesis, data["prediction"]))
            else:
                failures.append({"status": status, "body": data})
        return premise, hypothesis, min(idle, 1.0)

    for i in range(n_warm):  # model load, caches, connection
        premise, hypothesis, _ = http_one(i, measure=False)
        for bare in bares.values():
            bare.forward(premise, hypothesis)
    for bare in bares.values():
        bare.explain("A warm-up premise.", "A warm-up hypothesis.", "neutral")
    reference_bare = next(iter(bares.values()))
    done = 0
    while done < n:
        previous_post[0] = None  # the first request of a block follows the settle pause
        block_rows = [http_one(n_warm + done + k, measure=True) for k in range(min(block, n - done))]
        done += len(block_rows)
        for name, bare in bares.items():
            time.sleep(settle)
            bare_t[name].extend(bare.forward(p, h, idle=idle) for p, h, idle in block_rows)
        time.sleep(settle)
        back_to_back_t.extend(reference_bare.forward(p, h) for p, h, _ in block_rows)
        time.sleep(settle)

    explain_t, explain_status = [], {}
    bare_explain_t: dict[str, list[float]] = {name: [] for name in bares}
    if created:  # one untimed explanation warms Captum in the server
        client.request("POST", f"/api/examples/{created[0][0]}/explanation/", {})
    for example_id, premise, hypothesis, predicted in created[
        1 : 1 + n_explain
    ]:  # fresh: never explained
        for name, bare in bares.items():
            bare_explain_t[name].append(bare.explain(premise, hypothesis, predicted))
        status, data, elapsed = client.request(
            "POST", f"/api/examples/{example_id}/explanation/", {}
        )
        explain_status[status] = explain_status.get(status, 0) + 1
        if status == 200 and data.get("n_steps") == 10:
            explain_t.append(elapsed)
        else:
            failures.append({"status": status, "body": data, "endpoint": "explanation"})
    client.close()
    variants = {name: summary_ms(samples) for name, samples in bare_t.items()}
    reference = min(variants, key=lambda name: variants[name]["p50_ms"] or float("inf"))
    return {
        "create_example": summary_ms(create_t),
        "bare_forward": {**variants[reference], "variant": reference},
        "bare_forward_variants": variants,
        "bare_forward_back_to_back": {**summary_ms(back_to_back_t),
                                      "variant": next(iter(bares.values())).name},
        "server_predict_latency": summary_ms(server_ms),
        "contexts_next": summary_ms(next_t),
        "explanation": summary_ms(explain_t),
        "bare_explain_n10": summary_ms(bare_explain_t[reference]),
        "bare_explain_n10_variants": {name: summary_ms(v) for name, v in bare_explain_t.items()},
        "statuses": {str(k): v for k, v in statuses.items()},
        "explanation_statuses": {str(k): v for k, v in explain_status.items()},
        "failures": failures[:5],
        "warm_up_requests": n_warm,
    }


def load_phase(
    port: int, tokens: list[str], duration: float, hyps: list[str], timeout: float
) -> dict:
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
                status, ctx, t_next = client.request("GET", f"/api/tasks/{TASK}/contexts/next/")
                out["next"].append(t_next)
                if status != 200:
                    out["statuses"][f"next {status}"] = out["statuses"].get(f"next {status}", 0) + 1
                    out["errors"].append(f"contexts/next {status}: {str(ctx)[:200]}")
                    continue
                status, data, t_create = client.request(
                    "POST",
                    f"/api/tasks/{TASK}/examples/",
                    example_body(ctx, hyps[i % len(hyps)], i),
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
    barrier.wait()
    for t in threads:
        t.join(timeout=max(0.0, started + duration + timeout + 10 - time.perf_counter()))
    stuck = [t.name for t in threads if t.is_alive()]
    finished = max((r["done"] for r in results if r["done"]), default=time.perf_counter())
    wall = finished - started
    create = [x for r in results for x in r["create"]]
    nexts = [x for r in results for x in r["next"]]
    statuses: dict[str, int] = {}
    for r in results:
        for key, value in r["statuses"].items():
            statuses[key] = statuses.get(key, 0) + value
    accepted = sum(r["accepted"] for r in results)
    errors = sum(v for k, v in statuses.items() if k != "201")
    return {
        "annotators": len(tokens),
        "duration_s": duration,
        "wall_s": round(wall, 2),
        "accepted": accepted,
        "accepted_by_annotator": [r["accepted"] for r in results],
        "errors": errors,
        "statuses": statuses,
        "error_samples": [e for r in results for e in r["errors"]][:8],
        "throughput_examples_per_s": round(accepted / wall, 2) if wall > 0 else None,
        "create_example": summary_ms(create),
        "contexts_next": summary_ms(nexts),
        "stuck_threads": stuck,
        "loadavg_1min_start": round(load_start, 2),
        "loadavg_1min_end": round(os.getloadavg()[0], 2),
    }


def reset_postgres(url: str) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres", scheme="postgresql"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def flush_redis(*urls: str) -> None:
    import redis

    for url in urls:
        client = redis.Redis.from_url(url)
        client.flushdb()
        client.close()


def run_mode(mode: str, args, procs: Processes, base_env: dict, hyps: list[str]) -> dict:
    log(f"=== {mode} mode ===")
    logs = BENCH_DIR / "logs"
    env = dict(base_env)
    if mode == "embedded":
        db_path = BENCH_DIR / "embedded.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(str(db_path) + suffix).unlink(missing_ok=True)
        env["DATABASE_URL"] = f"sqlite:///{db_path}"
        if args.sqlite_conn_max_age is not None:
            env["DATABASE_URL"] += f"?conn_max_age={args.sqlite_conn_max_age}"
        for key in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
            env.pop(key, None)
        workers, threads = args.embedded_workers, args.embedded_threads
    else:
        reset_postgres(args.postgres_url)
        flush_redis(args.broker_url, args.result_backend)
        env["DATABASE_URL"] = args.postgres_url
        env["CELERY_BROKER_URL"] = args.broker_url
        env["CELERY_RESULT_BACKEND"] = args.result_backend
        workers, threads = args.service_workers, args.service_threads

    usernames = [f"bench-{mode}-latency"] + [
        f"bench-{mode}-{k:02d}" for k in range(1, args.annotators + 1)
    ]
    cfg = {
        "task": TASK,
        "usernames": usernames,
        "steps": TRAIN_STEPS,
        "models_dir": str(BENCH_DIR / "models"),
    }
    log("setup: migrate, bootstrap_demo --no-models, model, users (Django subprocess)")
    t0 = time.perf_counter()
    setup = run_django("_setup", env, cfg, timeout=1800)
    setup_s = time.perf_counter() - t0
    log(
        f"setup done in {setup_s:.1f} s (model {setup['model']['id']}, trained now: {setup['model']['trained_now']})"
    )

    port = free_port()
    gunicorn = [
        str(BIN / "gunicorn"),
        "dynabench.wsgi",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        str(workers),
        "--worker-class",
        "gthread",
        "--threads",
        str(threads),
        "--keep-alive",
        "30",
        "--timeout",
        "120",
        "--graceful-timeout",
        "10",
        "--worker-tmp-dir",
        "/dev/shm",
    ]
    layout = {
        "web": {"command": shlex.join(gunicorn), "workers": workers, "threads": threads},
        "database_url": env["DATABASE_URL"],
        "model_process_env": args.model_env,
    }
    web_log = logs / f"{mode}-gunicorn.log"
    web_env = {**env, **args.model_env} if mode == "embedded" else env
    web = procs.start(f"{mode} gunicorn", gunicorn, web_env, web_log)
    ready_web = wait_http(port, web, web_log)
    if mode == "service":
        worker_cmd = [
            str(BIN / "celery"),
            "-A",
            "dynabench",
            "worker",
            "-Q",
            "inference,explain,default",
            "-P",
            args.celery_pool,
            "-c",
            str(args.celery_concurrency),
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
            "-n",
            f"bench-{os.getpid()}@%h",
        ]
        worker_log = logs / f"{mode}-celery.log"
        worker = procs.start(
            f"{mode} celery worker",
            worker_cmd,
            {**env, **args.model_env, "LOG_LEVEL": "INFO"},
            worker_log,
        )
        children = args.celery_concurrency if args.celery_pool == "prefork" else 0
        ready_worker = wait_worker(worker, worker_log, children)
        layout["worker"] = {
            "command": shlex.join(worker_cmd),
            "pool": args.celery_pool,
            "concurrency": args.celery_concurrency,
            "ready_s": round(ready_worker, 1),
            "pids": [worker.pid, *children_of(worker.pid)],
        }
    layout["web"]["pids"] = [web.pid, *children_of(web.pid)]
    layout["web"]["ready_s"] = round(ready_web, 1)
    layout["bench_client"] = {
        "pid": os.getpid(),
        "load": f"{args.annotators} threads, one keep-alive connection each",
        "bare_pass": "separate processes (one per OpenMP setting), timed inside, "
        "interleaved with the HTTP calls",
    }

    bares = {}
    for variant in args.bare_variants:
        bare = BareModel(
            procs,
            setup["model"]["path"],
            setup["model"]["sha256"],
            variant,
            base_env,
            logs / f"{mode}-bare-{variant}.log",
        )
        bares[bare.name] = bare
    layout["bare_pass"] = {
        name: {"pid": b.proc.pid, "env": b.env, "torch_threads": b.torch_threads}
        for name, b in bares.items()
    }
    users = {u["username"]: u for u in setup["users"]}
    load_before = machine_load()
    log(
        f"latency: {args.requests} create-example requests, {args.explanations} explanations "
        f"(load average {load_before['loadavg'][0]})"
    )
    latency = latency_phase(
        port,
        open_session(port, users[usernames[0]]["api_token"]),
        bares,
        hyps,
        args.requests,
        args.explanations,
        n_warm=args.warmup,
        block=args.block,
        settle=args.settle,
    )
    for bare in bares.values():
        bare.close()
    base = latency["bare_forward"]["p50_ms"]
    p50 = latency["create_example"]["p50_ms"]
    ratio = round(p50 / base, 2) if p50 and base else None
    target = TARGETS[mode]
    latency["ratio_p50_to_bare"] = ratio
    latency["ratio_p95_to_bare_p95"] = (
        round(latency["create_example"]["p95_ms"] / latency["bare_forward"]["p95_ms"], 2)
        if latency["create_example"]["p95_ms"]
        else None
    )
    b2b = latency.get("bare_forward_back_to_back", {}).get("p50_ms")
    latency["ratio_p50_to_bare_back_to_back"] = round(p50 / b2b, 2) if p50 and b2b else None
    latency["target_ratio"] = target
    latency["target_pass"] = bool(ratio is not None and ratio <= target and not latency["failures"])
    log(f"create-example p50 {p50} ms vs bare {base} ms: x{ratio} (target x{target})")

    load = None
    if args.duration > 0 and args.annotators > 0:
        load_users = usernames[1:]
        tokens = [open_session(port, users[name]["api_token"]) for name in load_users]
        before = run_django("_count", env, {"task": TASK, "usernames": load_users}, timeout=300)
        log(f"load: {args.annotators} annotators for {args.duration:.0f} s")
        load = load_phase(port, tokens, args.duration, hyps, timeout=args.request_timeout)
        after = run_django("_count", env, {"task": TASK, "usernames": load_users}, timeout=300)
        db_new = after["examples_total"] - before["examples_total"]
        per_user_ok = all(
            after["examples_by_user"].get(name, 0) == n
            for name, n in zip(load_users, load["accepted_by_annotator"], strict=True)
        )
        load["db"] = {
            "examples_before": before["examples_total"],
            "examples_after": after["examples_total"],
            "examples_new": db_new,
            "equals_accepted": db_new == load["accepted"],
            "per_annotator_equals_accepted": per_user_ok,
            "round_counter_new": after["round_examples_collected"]
            - before["round_examples_collected"],
            "session_counters_new": sum(after["session_examples_written"].values())
            - sum(before["session_examples_written"].values()),
        }
        load["targets"] = {
            "zero_errors": load["errors"] == 0 and not load["stuck_threads"],
            "db_count_equals_accepted": db_new == load["accepted"] and per_user_ok,
        }
        log(
            f"load: {load['accepted']} accepted, {load['errors']} errors, "
            f"{load['throughput_examples_per_s']} ex/s, p50 {load['create_example']['p50_ms']} ms, "
            f"db +{db_new}"
        )
    return {
        "mode": mode,
        "database": "sqlite (WAL)" if mode == "embedded" else "postgresql",
        "inference": "in the web process (embedded, Celery eager)"
        if mode == "embedded"
        else f"celery worker via Redis broker {args.broker_url}, results {args.result_backend}",
        "setup": {
            **{k: v for k, v in setup.items() if k != "users"},
            "seconds": round(setup_s, 1),
            "users": len(setup["users"]),
        },
        "processes": layout,
        "machine_load_before_latency": load_before,
        "latency": latency,
        "load": load,
    }


def print_table(result: dict) -> None:
    print()
    print(
        f"Annotation loop over HTTP, task {TASK}; machine load at start {result['machine_load_start']['loadavg']}"
    )
    head = f"{'mode':<9}{'measure':<40}{'n':>6}{'p50 ms':>10}{'p95 ms':>10}{'x bare':>8}  target"
    print(head)
    print("-" * len(head))
    for mode in result["modes"]:
        lat = mode["latency"]
        base = lat["bare_forward"]["p50_ms"]
        rows = [
            (
                f"bare forward, {name}",
                s,
                "reference" if name == lat["bare_forward"]["variant"] else "",
            )
            for name, s in lat["bare_forward_variants"].items()
        ]
        if lat.get("bare_forward_back_to_back"):
            b2b = lat["bare_forward_back_to_back"]
            rows.append((f"bare forward, {b2b['variant']}, back to back", b2b, "(no idle gaps)"))
        rows += [
            (
                "POST examples (HTTP)",
                lat["create_example"],
                f"<= x{lat['target_ratio']}: {'PASS' if lat['target_pass'] else 'FAIL'}",
            ),
            ("  of which model call (server)", lat["server_predict_latency"], ""),
            ("GET contexts/next (HTTP)", lat["contexts_next"], ""),
            ("ml.explain n10 (bare process)", lat["bare_explain_n10"], ""),
            ("POST explanation n10 (HTTP)", lat["explanation"], ""),
        ]
        load = mode.get("load")
        if load:
            rows.append(
                (f"POST examples, {load['annotators']} annotators", load["create_example"], "")
            )
        for name, s, note in rows:
            ratio = f"{s['p50_ms'] / base:.2f}" if s["p50_ms"] and base else "-"
            p50 = f"{s['p50_ms']:.1f}" if s["p50_ms"] is not None else "-"
            p95 = f"{s['p95_ms']:.1f}" if s["p95_ms"] is not None else "-"
            print(f"{mode['mode']:<9}{name:<40}{s['n']:>6}{p50:>10}{p95:>10}{ratio:>8}  {note}")
        if load:
            db = load["db"]
            print(
                f"{mode['mode']:<9}load: {load['accepted']} accepted in {load['wall_s']} s = "
                f"{load['throughput_examples_per_s']} examples/s; errors {load['errors']} "
                f"({'PASS' if load['targets']['zero_errors'] else 'FAIL'}); DB +{db['examples_new']} "
                f"== accepted {load['accepted']}: {'PASS' if load['targets']['db_count_equals_accepted'] else 'FAIL'}"
            )
        print()


def bench_env() -> dict:
    """The environment of the servers a bench starts: this one without its database,
    broker or cache, DEBUG off, throttles out of the way, models under var/bench."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_URL", "CELERY_", "CACHE_URL"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="dynabench.settings",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--duration", type=float, default=None, help="load seconds (default 30, quick 10)"
    )
    parser.add_argument("--annotators", type=int, default=16)
    parser.add_argument(
        "--requests",
        type=int,
        default=None,
        help="sequential create-example requests per mode (default 200, quick 30)",
    )
    parser.add_argument(
        "--explanations",
        type=int,
        default=None,
        help="explanation requests per mode (default 30, quick 6)",
    )
    parser.add_argument("--warmup", type=int, default=10, help="untimed requests first")
    parser.add_argument("--block", type=int, default=10,
                        help="requests per block; blocks alternate with the bare passes")
    parser.add_argument("--settle", type=float, default=0.05,
                        help="seconds of pause between blocks (OpenMP threads stop spinning)")
    parser.add_argument("--modes", default="embedded,service")
    parser.add_argument(
        "--quick", action="store_true", help="fewer requests, shorter load (smoke run)"
    )
    parser.add_argument("--embedded-workers", type=int, default=1)
    parser.add_argument("--embedded-threads", type=int, default=16)
    parser.add_argument("--service-workers", type=int, default=2)
    parser.add_argument("--service-threads", type=int, default=8)
    parser.add_argument("--celery-pool", default="threads", choices=["prefork", "threads", "solo"],
                        help="the inference worker's pool (solo, as `make worker-inference`)")
    parser.add_argument("--celery-concurrency", type=int, default=32)
    parser.add_argument(
        "--bare-variants",
        default="default,1thread,passive",
        help="OpenMP settings for the bare pass, from "
        + ", ".join(f"{k} ({v[0]})" for k, v in BARE_VARIANTS.items())
        + "; the fastest is the reference for the targets",
    )
    parser.add_argument(
        "--sqlite-conn-max-age",
        type=int,
        default=None,
        help="embedded mode: add ?conn_max_age=N to the SQLite DATABASE_URL (default: as shipped, "
        "a connection per request)",
    )
    parser.add_argument(
        "--model-env",
        default="",
        help="KEY=VALUE,... for the process that runs the model (gunicorn embedded, the Celery "
        "worker in service mode), e.g. OMP_NUM_THREADS=1",
    )
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument(
        "--postgres-url", default="postgres://postgres@127.0.0.1:5432/dynabench_bench"
    )
    parser.add_argument("--broker-url", default="redis://127.0.0.1:6379/10")
    parser.add_argument("--result-backend", default="redis://127.0.0.1:6379/11")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "annotation.json"))
    args = parser.parse_args()
    args.duration = args.duration if args.duration is not None else (10.0 if args.quick else 30.0)
    args.requests = args.requests if args.requests is not None else (30 if args.quick else 200)
    args.explanations = (
        args.explanations if args.explanations is not None else (6 if args.quick else 30)
    )
    args.bare_variants = [x.strip() for x in args.bare_variants.split(",") if x.strip()]
    if not args.bare_variants or set(args.bare_variants) - set(BARE_VARIANTS):
        parser.error(f"--bare-variants: choose from {sorted(BARE_VARIANTS)}")
    args.model_env = dict(item.split("=", 1) for item in args.model_env.split(",") if "=" in item)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(TARGETS)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}; choose from {sorted(TARGETS)}")

    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    (BENCH_DIR / "models").mkdir(exist_ok=True)
    base_env = bench_env()
    hyps = hypotheses()
    start_load = machine_load()
    log(f"machine load at start {start_load['loadavg']}; busy: {start_load['busy_processes']}")

    procs = Processes()

    def on_term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    results = []
    try:
        for mode in modes:
            try:
                results.append(run_mode(mode, args, procs, base_env, hyps))
            finally:
                procs.stop_all()
    except KeyboardInterrupt:
        log("interrupted: servers stopped, nothing written")
        return 130
    finally:
        procs.stop_all()

    from importlib.metadata import version

    result = {
        "benchmark": "annotation",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": shlex.join([os.path.relpath(sys.executable, ROOT), *sys.argv]),
        "quick": args.quick,
        "task": TASK,
        "options": {k: v for k, v in vars(args).items() if k != "out"},
        "server_environment": {
            "DEBUG": "false",
            "LOG_LEVEL": "WARNING",
            "CACHE_URL": "unset: per-process memory (embedded), the Redis reply server (service)",
            "throttles": f"THROTTLE_EXAMPLES/EXPLANATIONS/USER/ANON/VALIDATIONS={THROTTLE} (raised for the bench)",
        },
        "environment": {
            "python": platform.python_version(),
            "torch": version("torch"),
            "celery": version("celery"),
            "django": version("django"),
            "gunicorn": version("gunicorn"),
            "cpu_count": os.cpu_count(),
            "machine": platform.machine(),
            "note": "a 2-core machine shared with other work: compare ratios, read the load averages",
        },
        "machine_load_start": start_load,
        "machine_load_end": machine_load(),
        "targets": {
            mode["mode"]: {
                "p50_ratio": mode["latency"]["ratio_p50_to_bare"],
                "p50_ratio_to_back_to_back_passes": mode["latency"]["ratio_p50_to_bare_back_to_back"],
                "p50_ratio_max": mode["latency"]["target_ratio"],
                "p50_pass": mode["latency"]["target_pass"],
                **(
                    {
                        "load_zero_errors": mode["load"]["targets"]["zero_errors"],
                        "load_db_count_equals_accepted": mode["load"]["targets"][
                            "db_count_equals_accepted"
                        ],
                    }
                    if mode["load"]
                    else {}
                ),
            }
            for mode in results
        },
        "modes": results,
    }
    print_table(result)
    print(f"wrote {write_json(Path(args.out), result)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "_bare":
        raise SystemExit(bare_main(sys.argv[2], sys.argv[3]))
    if len(sys.argv) > 1 and sys.argv[1] in ("_setup", "_count"):
        raise SystemExit(django_main(sys.argv[1]))
    raise SystemExit(main())
