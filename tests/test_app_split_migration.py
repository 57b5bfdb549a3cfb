"""Job and ModelVersion left tasks/ for their own apps (jobs/, registry/) keeping their
tables. A database at the last migrations before the split (today's main: migrated
all the way, then the split undone) migrates to today's:
every row reads back through the new models with the same primary key and fields,
the relations that point at them (a round's target models, an example's answering
models, an evaluation's model and job) still hold, and the admin's content types keep
their ids, so the Researchers group keeps its permissions. Migrating back to before
the split gives the same rows to the old models (on the database the suite runs on:
SQLite, or PostgreSQL in CI)."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[1]

# The last migration of each app before the split: a database made at that point.
BEFORE_SPLIT = [("tasks", "0008_job_kind_release_dataset"), ("annotation", "0015_example_round_created"),
                ("leaderboard", "0008_release")]

# The nodes at main before the split, computed in each script (``at_main``).
AT_MAIN = '''graph = executor.loader.graph
split = {app for app, _ in BEFORE_SPLIT} | {"jobs", "registry"}
before = {node for name in BEFORE_SPLIT for node in graph.forwards_plan(name)}
after_split = {node for node in graph.nodes if node[0] in split and node not in before}
at_main = list(BEFORE_SPLIT)
for app in sorted({node[0] for node in graph.nodes} - split):
    clean = [node for node in sorted(n for n in graph.nodes if n[0] == app)
             if not after_split & set(graph.forwards_plan(node))]
    if clean:
        at_main.append(clean[-1])
'''

BEFORE = r'''
import json, django
django.setup()
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
BEFORE_SPLIT = %(before)s
# Every migration, then the split undone in one plan: the schema and the migrations applied
# are main's (the split changes no table), and the content type rows are named as main names them.
call_command("migrate", verbosity=0)
MigrationExecutor(connection).migrate([("jobs", None), ("registry", None)])
executor = MigrationExecutor(connection)
left = sorted(f"{m.app_label}.{m.name}" for m, _ in executor.migration_plan(executor.loader.graph.leaf_nodes()))
# The historical models at main: the split's apps before it, every other app at its last
# migration that needs nothing of the split (a later one may depend on it).
%(at_main)sapps = executor.loader.project_state(at_main).apps
Task, Round = apps.get_model("tasks", "Task"), apps.get_model("tasks", "Round")
Job, ModelVersion = apps.get_model("tasks", "Job"), apps.get_model("tasks", "ModelVersion")
Example, Evaluation = apps.get_model("annotation", "Example"), apps.get_model("leaderboard", "Evaluation")
User, Group = apps.get_model("auth", "User"), apps.get_model("auth", "Group")
Permission, ContentType = apps.get_model("auth", "Permission"), apps.get_model("contenttypes", "ContentType")
user = User.objects.create(username="researcher", is_staff=True)
group = Group.objects.create(name="Researchers")
group.permissions.add(*Permission.objects.filter(content_type__app_label="tasks",
                                                 content_type__model__in=["job", "modelversion"]))
user.groups.add(group)
task = Task.objects.create(slug="old", name="Old", task_type="classification", config={})
rnd = Round.objects.create(task=task, number=1, status="closed")
first = Job.objects.create(kind="train_model", status="failed", task=task, params={"name": "m2"},
                           celery_task_name="leaderboard.train_model", queue="training", attempts=2,
                           log="[10:00:00] failed\n", error="boom", created_by=user)
again = Job.objects.create(kind="train_model", status="succeeded", progress=100, task=task, params={"name": "m2"},
                           result={"model": 2}, rerun_of=first, created_by=user)
base = ModelVersion.objects.create(task=task, name="m1", artifact_path="old/m1", sha256="a" * 64,
                                   backbone="tiny", metrics={"accuracy": 0.5}, created_by=user)
child = ModelVersion.objects.create(task=task, name="m2", artifact_path="s3://bucket/artifacts/" + "b" * 64,
                                    sha256="b" * 64, parent=base, is_public=False, submitted=True,
                                    training_data={"train": 10})
child.trained_on_rounds.add(rnd)
rnd.target_models.add(child)
example = Example.objects.create(task=task, round=rnd, annotator=user, inputs={"statement": "s"},
                                 target={"label": "a"})
example.model_versions.add(base, child)
evaluation = Evaluation.objects.create(model_version=child, round=rnd, job=again, metrics={"accuracy": 0.75})
types = {m: ContentType.objects.get(app_label="tasks", model=m).pk for m in ("job", "modelversion")}
print(json.dumps({
    "jobs": list(Job.objects.order_by("pk").values()), "models": list(ModelVersion.objects.order_by("pk").values()),
    "round": rnd.pk, "child": child.pk, "example": example.pk, "evaluation": evaluation.pk, "types": types,
    "left": left,
}, default=str))
'''

AFTER = r'''
import json, sys, django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from annotation.models import Example
from jobs.models import Job
from leaderboard.models import Evaluation
from registry.models import ModelVersion
from tasks.models import Round
before = json.loads(sys.stdin.read())
rnd = Round.objects.get(pk=before["round"])
user = User.objects.get(username="researcher")
print(json.dumps({
    "jobs": list(Job.objects.order_by("pk").values()), "models": list(ModelVersion.objects.order_by("pk").values()),
    "targets": list(rnd.target_models.values_list("pk", flat=True)),
    "trained_on": list(ModelVersion.objects.get(pk=before["child"]).trained_on_rounds.values_list("pk", flat=True)),
    "answering": sorted(Example.objects.get(pk=before["example"]).model_versions.values_list("pk", flat=True)),
    "evaluation": list(Evaluation.objects.filter(pk=before["evaluation"]).values_list("model_version", "job")),
    "types": {m: ContentType.objects.get(app_label=app, model=m).pk for app, m in (("jobs", "job"),
                                                                                   ("registry", "modelversion"))},
    "stale": ContentType.objects.filter(app_label="tasks", model__in=["job", "modelversion"]).count(),
    "perms": sorted(p for p in user.get_all_permissions() if p.endswith(("_job", "_modelversion"))),
}, default=str))
'''

BACK = r'''
import json, django
django.setup()
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
BEFORE_SPLIT = %(before)s
MigrationExecutor(connection).migrate([("jobs", None), ("registry", None)])
executor = MigrationExecutor(connection)
%(at_main)sapps = executor.loader.project_state(at_main).apps
Job, ModelVersion = apps.get_model("tasks", "Job"), apps.get_model("tasks", "ModelVersion")
ContentType = apps.get_model("contenttypes", "ContentType")
print(json.dumps({
    "jobs": list(Job.objects.order_by("pk").values()), "models": list(ModelVersion.objects.order_by("pk").values()),
    "types": {m: ContentType.objects.get(app_label="tasks", model=m).pk for m in ("job", "modelversion")},
}, default=str))
'''


def _run(script: str, env: dict, stdin: str = "") -> dict:
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, input=stdin, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_database_made_before_the_app_split_keeps_its_jobs_and_models(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "dynabench.settings", "DEBUG": "true",
           "DYNABENCH_VAR_DIR": str(tmp_path / "var")}
    env.pop("PYTEST_XDIST_WORKER", None)
    database = settings.DATABASES["default"]
    name = None
    if database["ENGINE"].endswith("postgresql"):
        name = f"dynabench_split_{uuid.uuid4().hex[:8]}"
        user = database.get("USER") or "postgres"
        url = f"postgres://{user}@{database.get('HOST') or '127.0.0.1'}:{database.get('PORT') or 5432}"
        _psql(url + "/postgres", f"CREATE DATABASE {name}")
        env["DATABASE_URL"] = f"{url}/{name}"
    else:
        env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'before.sqlite3'}"
    try:
        before = _run(BEFORE % {"before": BEFORE_SPLIT, "at_main": AT_MAIN}, env)
        assert len(before["jobs"]) == 2 and len(before["models"]) == 2
        # The split's migrations were left to apply, and only migrations made after it
        # besides: the database is as the main of before the split made it.
        split = ["annotation.0016_model_versions_in_registry", "jobs.0001_initial",
                 "leaderboard.0009_jobs_and_registry_apps", "registry.0001_initial",
                 "tasks.0009_jobs_and_registry_apps"]
        assert set(split) <= set(before["left"])
        for later in sorted(set(before["left"]) - set(split)):
            app, migration = later.split(".")
            ours = [name for name in split if name.startswith(app + ".")]
            # an app the split did not touch has migrations left only where they came after
            # it and need it (crowd's onboarding batches: annotation's later migrations)
            assert all(int(migration[:4]) > int(name.split(".")[1][:4]) for name in ours), later

        after = _run(AFTER, env, stdin=json.dumps(before))
        # The same rows, field for field (primary keys, foreign keys as ids, JSON, times).
        assert after["jobs"] == before["jobs"]
        assert after["models"] == before["models"]
        child = before["child"]
        assert after["targets"] == [child] and after["trained_on"] == [before["round"]]
        assert after["answering"] == sorted(m["id"] for m in before["models"])
        again = before["jobs"][1]["id"]
        assert after["evaluation"] == [[child, again]]
        # The content types moved with the models, ids kept: no stale tasks.* rows, and the
        # group's permissions now read as the new apps'.
        assert after["types"] == {"job": before["types"]["job"], "modelversion": before["types"]["modelversion"]}
        assert after["stale"] == 0
        assert after["perms"] == sorted(f"{app}.{action}_{model}" for app, model in (("jobs", "job"),
                                                                                    ("registry", "modelversion"))
                                        for action in ("add", "change", "delete", "view"))

        back = _run(BACK % {"before": BEFORE_SPLIT, "at_main": AT_MAIN}, env)
        assert back["jobs"] == before["jobs"] and back["models"] == before["models"]
        assert back["types"] == before["types"]
    finally:
        if name:
            _psql(env["DATABASE_URL"].rsplit("/", 1)[0] + "/postgres", f"DROP DATABASE IF EXISTS {name}")


def _psql(url: str, statement: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(statement)
