"""A database made before the counters (migration 0005) migrates to today's: its
counters, queue places and provisional flags are filled in, and a recount then finds
nothing to repair (on the database the suite runs on: SQLite, or PostgreSQL in CI)."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]

# Written against the historical models at annotation 0005: today's models do not fit that schema.
BEFORE = r'''
import random, django
django.setup()
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
call_command("migrate", "annotation", "0005", verbosity=0)
call_command("migrate", "tasks", "0004", verbosity=0)
apps = MigrationExecutor(connection).loader.project_state([("annotation", "0005_adaptive_validation"),
                                                           ("tasks", "0004_job_kind_check_submission")]).apps
Task, Round, Context = (apps.get_model("tasks", n) for n in ("Task", "Round", "Context"))
Example, Validation = apps.get_model("annotation", "Example"), apps.get_model("annotation", "Validation")
Session, User = apps.get_model("annotation", "AnnotationSession"), apps.get_model("auth", "User")
rng = random.Random(7)
task = Task.objects.create(slug="old", name="Old", config={})
rounds = [Round.objects.create(task=task, number=n, status="open" if n == 1 else "closed") for n in (0, 1)]
context = Context.objects.create(task=task, round=rounds[1], fields={"passage": "p"})
users = [User.objects.create(username=f"u{i}") for i in range(5)]
hit = Session.objects.create(user=users[0], task=task, mturk_assignment_id="A1", provisional=True)
for i in range(40):
    writer = rng.choice(users)
    example = Example.objects.create(
        task=task, round=rng.choice(rounds), context=context, annotator=writer,
        source=rng.choice(["annotation", "annotation", "import"]), inputs={"t": i}, target={"label": "a"},
        fooled=rng.choice([True, False, None]), split=rng.choice(["train", "dev", "test"]),
        validation_status=rng.choice(["pending", "verified", "rejected", "flagged"]),
        retracted=rng.random() < 0.15, flagged=rng.random() < 0.15, session=hit if i % 5 == 0 else None,
        validations_correct=rng.randint(0, 2))
    for validator in rng.sample([u for u in users if u != writer], 2):
        Validation.objects.create(example=example, validator=validator, label=rng.choice(["", "correct", "incorrect"]),
                                  blind_answer={"label": "a"} if rng.random() < 0.5 else None,
                                  blind_agrees=rng.choice([True, False]), counted=rng.random() < 0.8,
                                  mode=rng.choice(["user", "user", "owner"]))
print("made", Example.objects.count(), Validation.objects.count())
'''

AFTER = r'''
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from annotation.models import Example, RoundCounts, Validation
from annotation import counters
drifts = counters.reconcile()
queued = set(Example.objects.filter(queue_priority__isnull=False).values_list("pk", flat=True))
expected = {e.pk for e in Example.objects.all() if e.in_validation_queue()}
assert Example.objects.filter(provisional=True).count() == 8, "provisional not filled"
assert not Validation.objects.filter(task__isnull=True).exists()
print("drifts", len(drifts), "collected", sum(RoundCounts.objects.values_list("collected", flat=True)),
      "queue", queued == expected, len(queued))
'''


@pytest.mark.django_db
def test_a_database_made_before_the_counters_migrates_with_them_filled(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "dynabench.settings", "DEBUG": "true",
           "DYNABENCH_VAR_DIR": str(tmp_path / "var")}
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("postgresql"):
        name = f"dynabench_migration_{uuid.uuid4().hex[:8]}"
        user = database.get("USER") or "postgres"
        url = f"postgres://{user}@{database.get('HOST') or '127.0.0.1'}:{database.get('PORT') or 5432}"
        _psql(url + "/postgres", f"CREATE DATABASE {name}")
        env["DATABASE_URL"] = f"{url}/{name}"
    else:
        name, env["DATABASE_URL"] = None, f"sqlite:///{tmp_path / 'before.sqlite3'}"
    try:
        env.pop("PYTEST_XDIST_WORKER", None)
        made = subprocess.run([sys.executable, "-c", BEFORE], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        assert made.returncode == 0, made.stderr[-3000:]
        assert "made 40" in made.stdout
        after = subprocess.run([sys.executable, "-c", AFTER], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=600)
        assert after.returncode == 0, after.stderr[-3000:]
        drifts, collected, queue_right = after.stdout.split()[1], int(after.stdout.split()[3]), after.stdout.split()[5]
        assert (drifts, queue_right) == ("0", "True"), after.stdout
        assert collected > 0
    finally:
        if name:
            _psql(env["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres", f"DROP DATABASE IF EXISTS {name}")


def _psql(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(statement)
