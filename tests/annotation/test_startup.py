"""The project's wiring holds no start-up policy: dynabench.celery connects the worker's
receivers of annotation.startup, once, and dynabench.wsgi calls start_web_process."""

import ast
from pathlib import Path

from celery import signals

from annotation import startup

ROOT = Path(__file__).resolve().parent.parent.parent


def connected(signal) -> list:
    return [receiver for _key, receiver in signal.receivers if getattr(receiver, "__module__", "") == startup.__name__]


def test_the_celery_app_connects_each_worker_receiver_once_however_often_it_is_wired():
    import dynabench.celery  # noqa: F401 - making the app connects them

    expected = {
        signals.worker_init: [startup.remember_the_worker_process, startup.split_cores_between_pool_processes],
        signals.worker_ready: [startup.load_models_in_solo_worker, startup.start_heartbeat],  # loads, then beats
        signals.worker_shutdown: [startup.stop_heartbeat],
        signals.worker_process_init: [startup.load_models_in_child],
    }
    for signal, receivers in expected.items():
        assert connected(signal) == receivers, signal.name
    startup.connect_worker_signals()
    for signal, receivers in expected.items():
        assert connected(signal) == receivers, signal.name


def test_the_wiring_modules_define_no_policy_of_their_own():
    """Read, not imported (importing dynabench.wsgi starts a web process)."""
    for name in ("celery.py", "wsgi.py"):
        tree = ast.parse((ROOT / "dynabench" / name).read_text(encoding="utf-8"))
        defined = [node.name for node in ast.walk(tree)
                   if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
        assert defined == [], (name, defined)
