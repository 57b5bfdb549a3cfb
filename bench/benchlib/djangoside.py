"""The only benchlib code that imports Django.

* ``setup_scratch(folder)``: Django in this process on a scratch SQLite database
  (``evaluation.py``, ``leaderboard.py``);
* ``main(action)``: the served stack's setup, counts and SQL statements per
  example, in a subprocess with a
  mode's environment (``stack.run_django`` runs ``python -m benchlib.djangoside
  _setup|_count``), so that the process that drives the load never imports Django.
  It answers one ``BENCH_JSON`` line.
"""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

from .procs import answer_json


def setup_scratch(folder: Path) -> None:
    """Django on a scratch SQLite database in ``folder`` (embedded mode), migrated."""
    os.environ.update(
        DEBUG="true",
        DATABASE_URL=f"sqlite:///{folder / 'db.sqlite3'}",
        DYNABENCH_VAR_DIR=str(folder),
        DYNABENCH_MODELS_DIR=str(folder / "models"),
        DJANGO_SETTINGS_MODULE="dynabench.settings",
        ALLOWED_HOSTS="testserver",
    )
    for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CACHE_URL"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def main(action: str) -> int:
    """``_setup`` (migrate, demo tasks, the target model, users) or ``_count`` (the
    examples stored), with the configuration in ``$BENCH_CONFIG``."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")
    import django

    django.setup()
    cfg = json.loads(os.environ["BENCH_CONFIG"])
    if action == "_setup":
        result = prepare(cfg)
    elif action == "_drive":
        result = _drive(cfg)
    elif action == "_statements":
        result = _statements(cfg)
    else:
        result = _count(cfg)
    answer_json(result)
    return 0


def prepare(cfg: dict) -> dict:
    """The stack's database in this process (Django set up): migrated, the demo tasks,
    the round's target model and the users ``cfg`` names (``_setup``; ``web_profile.py``)."""
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    call_command("bootstrap_demo", no_models=True, stdout=io.StringIO())
    return _setup(cfg)


def _target_model(task, cfg: dict):
    """The round's target: the artifact a previous run kept (its manifest under the
    models folder), registered again, or one trained now on the shipped seed rows.
    (model, trained now, training seconds)."""
    from django.core.exceptions import ValidationError

    import ml
    from leaderboard import training
    from leaderboard.rows import data_summary, read_seed_rows
    from registry.services import register_model

    name = cfg["model_name"]
    manifest = Path(cfg["models_dir"]) / f"{task.slug}-{name}-{cfg['steps']}steps.json"
    if manifest.exists():
        kept = json.loads(manifest.read_text())
        try:
            artifact = ml.verify_artifact(kept["path"], kept["sha256"])
            return register_model(task, artifact, name=name), False, 0.0
        except (ml.ArtifactError, ValidationError, KeyError, OSError):
            pass
    rows = read_seed_rows(task.slug)
    started = time.perf_counter()
    model = training.train_and_register(
        task,
        rows,
        name=name,
        max_steps=cfg["steps"],
        epochs=1,
        batch_size=16,
        seed=0,
        training_data=data_summary(rows, source="shipped seed set", purpose=cfg["purpose"]),
    )
    train_s = time.perf_counter() - started
    manifest.write_text(json.dumps({"path": str(model.artifact_dir), "sha256": model.sha256}))
    return model, True, train_s


def _setup(cfg: dict) -> dict:
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from tasks.models import Task

    task = Task.objects.get(slug=cfg["task"])
    rnd = task.open_round()
    model, trained, train_s = _target_model(task, cfg)
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


def _drive(cfg: dict) -> dict:
    """The inference tier alone: ``cfg["threads"]`` callers ask the open round's target
    model through ``annotation.inference.predict_with`` (the queue and the reply list
    in service mode, as a web request does, without HTTP or the database) without
    pause for ``cfg["seconds"]``. Throughput and latency as the callers saw them."""
    import threading

    from annotation.inference import predict_with
    from tasks.models import Task
    from tasks.targets import open_round_with_models

    from .stats import summary_ms

    _, models = open_round_with_models(Task.objects.get(slug=cfg["task"]))
    hyps = cfg["hypotheses"]
    ready_by = time.monotonic() + 120
    while True:  # the workers load the model when they start: wait for a first answer
        try:
            predict_with(models, [{"premise": "A person is outside.", "hypothesis": hyps[0]}])
            break
        except Exception:
            if time.monotonic() > ready_by:
                raise
            time.sleep(0.5)
    times: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    measure_from = time.perf_counter() + cfg["warmup"]
    deadline = measure_from + cfg["seconds"]

    def caller(k: int) -> None:
        i = k
        while True:
            started = time.perf_counter()
            if started >= deadline:
                return
            try:
                predict_with(
                    models,
                    [
                        {
                            "premise": f"A person is outside on day {i}.",
                            "hypothesis": hyps[i % len(hyps)],
                        }
                    ],
                )
            except Exception as exc:  # noqa: BLE001 - counted
                with lock:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                i += cfg["threads"]
                continue
            finished = time.perf_counter()
            if started >= measure_from and finished <= deadline:
                with lock:
                    times.append(finished - started)
            i += cfg["threads"]

    callers = [threading.Thread(target=caller, args=(k,)) for k in range(cfg["threads"])]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    return {
        "threads": cfg["threads"],
        "seconds": cfg["seconds"],
        "answered": len(times),
        "examples_per_s": round(len(times) / cfg["seconds"], 1),
        "errors": len(errors),
        "error_samples": errors[:5],
        "latency": summary_ms(times),
    }


def _statements(cfg: dict) -> dict:
    """SQL statements per example as a served request runs them: ``cfg["examples"]``
    times ``GET contexts/next`` then ``POST examples`` through Django's test client in
    this process, on the mode's database and queue (service mode: the running
    workers answer), with a session token as the load's annotators use. Counted as
    Django logs them; ``per_example`` leaves out BEGIN and COMMIT (two per write
    transaction, which ``with_transaction_control`` keeps). The first pairs warm up
    (the model loads) and are not counted."""
    import statistics

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from annotation import sessions
    from annotation.tokens import make_token
    from tasks.models import Task

    task = Task.objects.get(slug=cfg["task"])
    user = get_user_model().objects.get(username=cfg["username"])
    token = make_token(sessions.start_session(user, task))
    client = Client(HTTP_HOST="127.0.0.1", HTTP_X_DYNABENCH_TOKEN=token)  # an allowed host, loopback like the load
    hyps = cfg["hypotheses"]
    per_request: dict[str, list[int]] = {name: [] for name in (
        "contexts_next", "post_example", "contexts_next_data", "post_example_data")}
    kinds: dict[str, dict[str, int]] = {}
    fooled = 0

    def write(i: int):
        with CaptureQueriesContext(connection) as served:
            context = client.get(f"/api/tasks/{task.slug}/contexts/next/")
        with CaptureQueriesContext(connection) as written:
            created = client.post(f"/api/tasks/{task.slug}/examples/", {
                "context": context.json()["id"], "inputs": {"hypothesis": hyps[i % len(hyps)]},
                "target": {"label": ("entailment", "neutral", "contradiction")[i % 3]}},
                content_type="application/json")
        return served, context, written, created

    ready_by = time.monotonic() + 120  # embedded mode: this process loads the model first
    while write(0)[3].status_code == 503 and time.monotonic() < ready_by:
        time.sleep(0.5)
    for i in range(1, cfg["examples"] + 1):
        served, context, written, created = write(i)
        if context.status_code != 200 or created.status_code != 201:
            raise RuntimeError(f"statements: answered {context.status_code} / {created.status_code}: "
                               f"{created.content[:200]!r}")
        fooled += int(created.json()["fooled"])
        for name, queries in (("contexts_next", served), ("post_example", written)):
            per_request[name].append(len(queries.captured_queries))
            per_request[f"{name}_data"].append(sum(
                q["sql"].split()[0].upper() not in ("BEGIN", "COMMIT") for q in queries.captured_queries))
            for query in queries.captured_queries:
                kind = query["sql"].split()[0].upper()
                kinds.setdefault(name, {})[kind] = kinds.setdefault(name, {}).get(kind, 0) + 1
    totals = [a + b for a, b in zip(per_request["contexts_next"], per_request["post_example"], strict=True)]
    data = [a + b for a, b in zip(per_request["contexts_next_data"], per_request["post_example_data"], strict=True)]
    n = len(totals)
    return {
        "examples": n,
        "fooled": fooled,
        "per_example": {"median": statistics.median(data), "max": max(data), "min": min(data)},
        "with_transaction_control": {"median": statistics.median(totals), "max": max(totals)},
        "by_request_median": {name: statistics.median(v) for name, v in per_request.items()},
        "by_kind_mean": {name: {k: round(v / n, 2) for k, v in sorted(found.items())}
                         for name, found in kinds.items()},
    }


def _count(cfg: dict) -> dict:
    from django.db.models import Count

    from annotation.models import AnnotationSession, Example
    from annotation.stats import round_stats
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


if __name__ == "__main__":  # python -m benchlib.djangoside _setup|_count (stack.run_django)
    raise SystemExit(main(sys.argv[1]))
