"""One (database, size) of ``bench/scale.py``, in a process of its own: ``python -m
benchlib.scale_part`` with ``$BENCH_CONFIG`` (JSON: size, database, repeats, work,
out) and ``DATABASE_URL`` set by the parent. It migrates, builds the study's rows
(``scale_data.build``) unless the database was built already for this size and
migration state, checks the counters against the rows, measures every request path
and every periodic job, and writes its JSON to ``out``.

Requests go through Django's test ``Client`` in this process (no server, no network):
a path's time is Django's and the database's, and the RSS is this process's.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from base64 import b64encode
from contextlib import contextmanager
from pathlib import Path

PAGES = 100  # the admin's rows a page (its default)


def rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return round(int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


def clock() -> tuple[float, float]:
    """(wall clock, this process's CPU time): the CPU time leaves out the waits for a
    core on a shared machine (and, on PostgreSQL, the server's own work)."""
    return time.perf_counter(), time.process_time()


def since(started: tuple[float, float]) -> tuple[float, float]:
    now = clock()
    return now[0] - started[0], now[1] - started[1]


def timed(fn, repeats: int, warmup: int = 1) -> list[tuple[float, float]]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        started = clock()
        fn()
        samples.append(since(started))
    return samples


def summary(samples: list[tuple[float, float]], queries: int | None, **extra) -> dict:
    wall, cpu = [w for w, _ in samples], [c for _, c in samples]
    return {"median_ms": round(statistics.median(wall) * 1000, 3), "n": len(samples),
            "min_ms": round(min(wall) * 1000, 3), "median_cpu_ms": round(statistics.median(cpu) * 1000, 3),
            "queries": queries, "rss_mb": rss_mb(), **extra}


@contextmanager
def capturing():
    """``CaptureQueriesContext`` on an emptied query log: Django keeps only the last 9,000
    statements, and a capture that starts on a full log counts none (a build in this
    process fills it)."""
    from django.db import connection, reset_queries
    from django.test.utils import CaptureQueriesContext

    reset_queries()
    with CaptureQueriesContext(connection) as captured:
        yield captured


def count_queries(fn) -> tuple[int, object]:
    with capturing() as captured:
        result = fn()
    return len(captured.captured_queries), result


def select_one(repeats: int) -> dict:
    """The bare round trip: ``SELECT 1`` on this process's connection."""
    from django.db import connection

    def once():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()

    return summary(timed(once, repeats * 5, warmup=3), 1)


def request_paths(task, rnd, users) -> list[tuple[str, str, str]]:
    """(name, who, url) for every request path measured."""
    from django.urls import reverse

    from annotation.models import Example, Validation

    slug = task.slug
    ids = list(Example.objects.filter(task=task).order_by("pk").values_list("pk", flat=True)[:1])
    last = Example.objects.filter(task=task).order_by("-pk").values_list("pk", flat=True).first()
    middle = (ids[0] + last) // 2 if ids else 1
    cursor = b64encode(f"p={middle}".encode()).decode()  # what a `next` link half way down carries
    example = Example.objects.filter(task=task, pk__gte=middle).order_by("pk").only("uid").first()
    admin_examples = reverse("admin:annotation_example_changelist")
    admin_validations = reverse("admin:annotation_validation_changelist")
    validations = min(Validation.objects.order_by().values("pk")[:1001].count(), 1000)
    last_page = max(1, -(-validations // PAGES))
    paths = [
        ("home", "anonymous", "/"),
        ("home", "researcher", "/"),
        ("task page", "anonymous", f"/tasks/{slug}/"),
        ("task page", "researcher", f"/tasks/{slug}/"),
        ("rounds API", "researcher", f"/api/tasks/{slug}/rounds/"),
        ("round stats API", "researcher", f"/api/tasks/{slug}/rounds/{rnd.number}/stats/"),
        ("next validation", "validator", f"/api/tasks/{slug}/validations/next/"),
        ("leaderboard page", "anonymous", f"/tasks/{slug}/leaderboard/"),
        ("leaderboard API", "anonymous", f"/api/tasks/{slug}/leaderboard/"),
        ("examples API first", "researcher", f"/api/tasks/{slug}/examples/?round={rnd.number}&split=train"),
        ("examples API status", "researcher", f"/api/tasks/{slug}/examples/?status=verified"),
        ("examples API deep", "researcher", f"/api/tasks/{slug}/examples/?round={rnd.number}&cursor={cursor}"),
        ("contexts API", "researcher", f"/api/tasks/{slug}/contexts/"),
    ]
    for who in ("superuser", "researcher"):
        paths += [
            ("admin examples", who, admin_examples),
            ("admin examples filter", who,
             f"{admin_examples}?task__id__exact={task.pk}&validation_status__exact=pending"),
            ("admin examples uid", who, f"{admin_examples}?q={example.uid}"),
            ("admin validations", who, admin_validations),
            ("admin validations last", who, f"{admin_validations}?p={last_page}"),
        ]
    return paths


def measure_requests(task, rnd, clients: dict, repeats: int, slow: float) -> list[dict]:
    """Each path: a warm-up (its status), then ``repeats`` timed runs, statements counted
    in each. A path whose warm-up takes over ``slow`` seconds is not run again: its one
    (cold) run is its sample (``n`` 1)."""
    rows = []
    for name, who, url in request_paths(task, rnd, clients):
        client = clients[who]
        started = clock()
        with capturing() as captured:
            status = client.get(url).status_code
        first = since(started)
        cold = first[0] > slow
        samples, queries = ([first], len(captured.captured_queries)) if cold else ([], None)
        for _ in range(0 if cold else repeats):
            with capturing() as captured:
                started = clock()
                client.get(url)
                samples.append(since(started))
            queries = len(captured.captured_queries)
        rows.append({"path": name, "who": who, "url": url.split("?")[0], "status": status,
                     **summary(samples, queries, cold_only=cold)})
    return rows


# --- periodic jobs ---------------------------------------------------------------------


class Work:
    """New work between two runs of a periodic job, through the project's own saves: in
    the newest MTurk batch, ``k`` new assignments (each with its session), approved and
    confirmed now, each with one new example (not fooling the model: its bonus settles
    at $0, without MTurk) that three votes then verify (no writer falls below a quality
    threshold: the check gives no block); ``3 k`` new counted votes. ``forget`` takes
    an earlier run's work out again (through the services that keep the counters), so
    that every run of a kept database starts from the same rows."""

    def __init__(self, task, rnd, batch, users):
        from crowd.models import Assignment

        self.task, self.rnd, self.batch, self.users = task, rnd, batch, users
        self.made = Assignment.objects.filter(assignment_id__startswith="NEW").count()  # earlier runs' work

    def add(self, k: int) -> None:
        from datetime import timedelta

        from django.db import transaction
        from django.utils import timezone

        from annotation.examples import example_signature
        from annotation.models import AnnotationSession, Example, Validation
        from crowd.models import Assignment, WorkerIdentity

        now = timezone.now()
        hit = self.batch.hit_rows.order_by("-number").first()
        workers = list(WorkerIdentity.objects.select_related("user").order_by("pk"))
        with transaction.atomic():
            for _ in range(k):
                n = self.made
                worker = workers[n % len(workers)]
                session = AnnotationSession.objects.create(user=worker.user, task=self.task,
                                                           mturk_assignment_id=f"NEW{n:09d}",
                                                           mode=AnnotationSession.Mode.CREATE)
                Assignment.objects.create(hit=hit, assignment_id=f"NEW{n:09d}", worker=worker, session=session,
                                          status=Assignment.Status.APPROVED, submit_to="https://workersandbox.mturk.com",
                                          deadline=now + timedelta(hours=1), finished_at=now, submitted_at=now,
                                          auto_approval_at=now + timedelta(days=3), verified_at=now, decided_at=now)
                example = Example(task=self.task, round=self.rnd, annotator=worker.user, session=session,
                                  inputs={"hypothesis": f"new {n}"}, target={"label": "neutral"},
                                  prediction={"label": "neutral"}, fooled=False)
                example.signature = example_signature(example)
                example.save()
                validators = [u for u in self.users[300 + n % 50: 300 + n % 50 + 4] if u.pk != worker.user_id][:3]
                for validator in validators:
                    Validation(example=example, validator=validator, label="correct", counted=True,
                               blind_answer={"label": "neutral"}, blind_agrees=True, decided_at=now).save()
                example.validations_correct = len(validators)
                example.validation_status = Example.ValidationStatus.VERIFIED
                example.save(update_fields=["validations_correct", "validation_status", "updated_at"])
                self.made += 1


def forget_earlier_work() -> int:
    """Take out what earlier runs' ``Work`` added (their examples through
    ``services.examples.delete_examples``, which keeps the counters; then their bonus rows,
    assignments and sessions)."""
    from django.db import transaction

    from annotation.examples import delete_examples
    from annotation.models import AnnotationSession, Example
    from crowd.models import Assignment, BonusPayment

    with transaction.atomic():
        sessions = AnnotationSession.objects.filter(mturk_assignment_id__startswith="NEW")
        delete_examples(Example.objects.filter(session__in=sessions))
        assignments = Assignment.objects.filter(assignment_id__startswith="NEW")
        BonusPayment.objects.filter(assignment__in=assignments).delete()
        gone = assignments.delete()[0]
        sessions.delete()
    return gone


def periodic_jobs(task, rnd, users, repeats: int, work: int) -> list[dict]:
    from annotation import counters, reliability
    from crowd import bonuses, sync
    from crowd.models import Batch

    batch = Batch.objects.filter(task=task, mode=Batch.Mode.CREATE).order_by("-pk").first()
    adder = Work(task, rnd, batch, users)

    def quality():
        report = sync.SyncReport()
        blocks = sync.quality_blocks(Batch.objects.get(pk=batch.pk), report)
        assert not report.errors and not blocks, (blocks, report.errors)
        return blocks

    def pay():
        report = bonuses.pay_bonuses()
        assert not report.errors, report.errors
        return report

    jobs = [("quality check (batch)", quality), ("pay_bonuses", pay),
            ("tasks_due_for_refit", reliability.tasks_due_for_refit)]
    rows = []
    for name, job in jobs:
        job()  # a run right after a run: the next one has nothing new to read
        queries, _ = count_queries(job)
        idle = timed(job, repeats, warmup=0)
        rows.append({"job": name, "case": "no new work", **summary(idle, queries)})
        samples, counts = [], []
        for _ in range(repeats):
            adder.add(work)
            started = clock()
            n, _ = count_queries(job)
            samples.append(since(started))
            counts.append(n)
        usual = statistics.mode(counts)  # a run that also gave a block makes more: listed apart
        rows.append({"job": name, "case": f"after {work} new examples",
                     **summary(samples, usual, work=work, queries_each=counts)})
    drifts = []

    def recount():
        drifts.extend(counters.reconcile(task))

    queries, _ = count_queries(recount)
    samples = timed(recount, max(1, repeats // 2), warmup=0)
    rows.append({"job": "reconcile_counts", "case": "full recount (linear by design)",
                 **summary(samples, queries, drifts=len(drifts))})
    return rows


# --- the part --------------------------------------------------------------------------


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dynabench.settings")
    import django

    django.setup()


def clients(researcher, validator):
    from django.contrib.auth import get_user_model
    from django.test import Client

    superuser = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
    made = {"anonymous": Client()}
    for who, user in (("superuser", superuser), ("researcher", researcher), ("validator", validator)):
        made[who] = Client()
        made[who].force_login(user)
    return made


def run(cfg: dict) -> dict:
    from django.core.management import call_command

    from . import scale_data

    started = time.perf_counter()
    call_command("migrate", interactive=False, verbosity=0)
    from django.contrib.auth import get_user_model

    from annotation import counters
    from annotation.models import Example, RoundCounts, Validation
    from crowd.testing.fake_mturk import FakeMTurk
    from tasks.models import Task

    built = None
    if not Task.objects.filter(slug="nli").exists():
        built = scale_data.build(cfg["size"], log=lambda m: print(m, file=sys.stderr, flush=True))
        Path(cfg["marker"]).write_text(json.dumps(built) + "\n", encoding="utf-8")
    migrated = time.perf_counter() - started
    if cfg.get("build_only"):
        return {"database": cfg["database"], "size": cfg["size"], "built": built, "seconds": round(migrated, 1)}
    forgotten = forget_earlier_work()
    analyzed = _analyze()
    task = Task.objects.get(slug="nli")
    # Gold items are served at random (one draw in ten by default) for a constant read of
    # a few pages of the gold index (tests/annotation/test_query_plans.py checks its plan):
    # off here, so that every run of the next validation item runs the same statements.
    Task.objects.filter(pk=task.pk).update(
        config={**task.config, "validation": {**task.config.get("validation", {}), "gold_rate": 0}})
    task.refresh_from_db()
    rnd = task.open_round()
    drifts = counters.reconcile(task)  # after the build: the rows and the counters agree
    examples, validations = Example.objects.filter(task=task).count(), Validation.objects.filter(task=task).count()
    User = get_user_model()
    users = list(User.objects.filter(username__startswith="bench-").exclude(username=scale_data.RESEARCHER)
                 .order_by("username"))
    researcher = User.objects.get(username=scale_data.RESEARCHER)
    validator = User.objects.get(username=scale_data.VALIDATOR)
    from django.conf import settings

    with FakeMTurk() as fake:
        settings.MTURK_ENDPOINT_URL, settings.MTURK_SANDBOX = fake.endpoint_url, True
        baseline = select_one(cfg["repeats"])
        requests = measure_requests(task, rnd, clients(researcher, validator), cfg["repeats"],
                                    cfg.get("slow_seconds", 5.0))
        jobs = periodic_jobs(task, rnd, users, cfg["periodic_repeats"], cfg["work"])
    counts = RoundCounts.objects.get(round=rnd)
    return {
        "database": cfg["database"], "vendor": _vendor(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": [round(v, 2) for v in os.getloadavg()], "size": cfg["size"], "built": built,
        "reused": built is None, "analyzed": analyzed, "earlier_work_removed": forgotten,
        "prepare_seconds": round(migrated, 1),
        "rows": {"examples": examples, "validations": validations},
        "drift_after_build": [str(d) for d in drifts],
        "counters": {"collected": counts.collected, "decisions": counts.decisions, "fooled": counts.fooled},
        "select_1": baseline, "requests": requests, "periodic": jobs,
    }


def _analyze() -> bool:
    """On PostgreSQL, the planner's statistics as autovacuum keeps them on a live database
    (ANALYZE: a bulk-built database has none until autovacuum gets to it, and plans for
    empty tables). SQLite keeps none unless asked, and Django never asks: left alone."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return True


def _vendor() -> str:
    from django.db import connection

    return connection.vendor


def main() -> int:
    cfg = json.loads(os.environ["BENCH_CONFIG"])
    setup_django()
    result = run(cfg)
    out = Path(cfg["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
