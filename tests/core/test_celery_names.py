"""core.celery_names agrees with Celery: every name the settings route or schedule, and
every name the module holds, is a task the app registers; every task of ours has its
route to a queue some worker consumes; and the product sends tasks by these names only,
never by a string typed where it is sent."""

import ast
import re
from pathlib import Path

import pytest
from django.conf import settings

from core import celery_names

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ["annotation", "core", "crowd", "datafiles", "dynabench", "jobs", "leaderboard", "ml", "registry",
           "tasks"]
# The calls that take a task's name, and where: its position among their arguments.
SENDERS = {"celery_task": 0, "enqueue_by_name": 1, "send_task": 0, "send_task_in_background": 0}


def _constants(queues: bool) -> dict[str, str]:
    return {key: value for key, value in vars(celery_names).items()
            if key.isupper() and isinstance(value, str) and key.endswith("_QUEUE") == queues}


@pytest.fixture(scope="module")
def registered() -> set[str]:
    """Our tasks as a worker registers them (Celery's own, ``celery.*``, left out)."""
    from dynabench.celery import app

    app.loader.import_default_modules()
    return {name for name in app.tasks if not name.startswith("celery.")}


def test_the_lists_hold_every_constant():
    assert sorted(celery_names.TASKS) == sorted(_constants(queues=False).values())
    assert sorted(celery_names.QUEUES) == sorted(_constants(queues=True).values())


def test_every_name_is_a_registered_task_and_every_task_has_a_name(registered):
    assert sorted(set(celery_names.TASKS) - registered) == []
    assert sorted(registered - set(celery_names.TASKS)) == []


def test_every_route_names_a_registered_task(registered):
    assert sorted(set(settings.CELERY_TASK_ROUTES) - registered) == []


def test_every_beat_entry_names_a_registered_task(registered):
    scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert sorted(scheduled - registered) == []


def test_every_task_of_ours_is_routed_to_a_known_queue(registered):
    """Each task says its queue; none lands on the default queue by omission."""
    assert sorted(registered - set(settings.CELERY_TASK_ROUTES)) == []
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    assert sorted(routed - set(celery_names.QUEUES)) == []
    assert settings.CELERY_TASK_DEFAULT_QUEUE == celery_names.DEFAULT_QUEUE


def _consumed(path: Path) -> list[set[str]]:
    """The queues of each ``celery ... worker -Q a,b`` line of a Makefile or Procfile."""
    return [set(match.group(1).split(","))
            for match in re.finditer(r"celery -A dynabench worker\b.*?-Q (\S+)", path.read_text())]


@pytest.mark.parametrize("path", ["Makefile", "Procfile"])
def test_the_workers_consume_every_queue(path):
    """``make worker`` alone, or ``make services`` (the Procfile's workers together),
    leave no queue without a consumer, and consume no queue nobody sends to."""
    workers = _consumed(ROOT / path)
    assert workers, f"no celery worker line in {path}"
    assert set().union(*workers) == set(celery_names.QUEUES)
    if path == "Makefile":  # `make worker` is the one worker of a small deployment
        assert set(celery_names.QUEUES) in workers


def _typed_names(tree: ast.AST) -> list[str]:
    """Each task or queue name written as a string literal where a task is defined,
    sent or given a queue."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        position = SENDERS.get(func, len(node.args))
        arguments = node.args[position:position + 1]
        arguments += [keyword.value for keyword in node.keywords if keyword.arg in ("name", "queue")
                      and func in {*SENDERS, "shared_task", "apply_async", "enqueue"}]
        found += [f"line {node.lineno}: {value.value!r}" for value in arguments
                  if isinstance(value, ast.Constant) and isinstance(value.value, str)]
    return found


def test_the_product_names_tasks_and_queues_through_the_constants():
    typed = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" not in path.parts and path.name != "celery_names.py":
                if found := _typed_names(ast.parse(path.read_text(encoding="utf-8"))):
                    typed[str(path.relative_to(ROOT))] = found
    assert typed == {}


def test_a_typed_name_is_found():
    """The check above can fail: a name or queue typed in place is caught."""
    source = ('enqueue_by_name(job, "leaderboard.train_model", queue="training")\n'
              '@shared_task(name="crowd.sync")\ndef sync(): pass\n')
    assert _typed_names(ast.parse(source)) == [
        "line 1: 'leaderboard.train_model'", "line 1: 'training'", "line 2: 'crowd.sync'"]
