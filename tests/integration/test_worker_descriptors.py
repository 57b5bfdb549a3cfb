"""A worker never closes a database connection's descriptor twice (annotation.startup).

Celery's Django fix-up answers ``worker_process_init`` by ``os.close``-ing the descriptor
of every open database connection and then closing the connection, which closes the
same number again. Celery 5.7's solo pool sends that signal in the worker's own process.
When a connection was open then, the second close hit whatever file another thread had
opened under that number meanwhile, and workers died at start-up importing their own
modules. The first test sends the signal with Celery's own fix-up connected, as a worker
does; the second watches real workers start under strace.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from celery import signals
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

import annotation.startup
import dynabench.celery

from .conftest import ROOT, database_url

pytestmark = pytest.mark.integration
STRACE = shutil.which("strace")


@pytest.fixture
def celery_django_fixup():
    fixup = DjangoWorkerFixup(dynabench.celery.app)
    # connected after annotation.startup's receivers (which dynabench.celery connects), as the worker's start-up does
    signals.worker_process_init.connect(fixup.on_worker_process_init)
    yield fixup
    signals.worker_process_init.disconnect(fixup.on_worker_process_init)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("process", ["the solo worker's own process", "a forked pool child"])
def test_worker_process_init_leaves_no_connection_for_the_fixup_to_close_twice(
        services, monkeypatch, celery_django_fixup, process):
    solo = process.startswith("the solo")
    monkeypatch.setattr(annotation.startup, "_main_pid", os.getpid() if solo else -1)
    # a connection open in this thread, as one is after anything has read the database
    connection.ensure_connection()
    descriptor = connection.connection.fileno()

    closed_by_number = []
    real_close = os.close

    def recording_close(fd):
        closed_by_number.append(fd)
        return real_close(fd)

    monkeypatch.setattr(os, "close", recording_close)
    signals.worker_process_init.send(sender="worker@test" if solo else None)
    monkeypatch.setattr(os, "close", real_close)

    assert descriptor not in closed_by_number, "the fix-up closed a live connection's descriptor by number"
    assert connection.connection is None, "the connection is closed properly, once"
    # and the database is usable again afterwards: Django reconnects on the next query
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_a_starting_worker_never_closes_a_descriptor_twice(services, live_tasks, tmp_path, pool):
    """Every ``close`` that fails with EBADF is a second close of a number that another
    file may hold by then. A worker that reads the database while it starts (open rounds'
    target models) must make none, whatever the pool."""
    if not STRACE:
        pytest.skip("strace is not installed")
    probe = subprocess.run([STRACE, "-f", "-qq", "-o", os.devnull, "true"], capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"strace cannot trace here: {probe.stderr.strip()[:200]}")
    trace, log = tmp_path / "strace.txt", tmp_path / "worker.log"
    env = dict(os.environ, DATABASE_URL=database_url(connection.settings_dict), PYTHONUNBUFFERED="1",
               DYNABENCH_TORCH_THREADS="1")
    queue = f"descriptors-{pool}-{os.getpid()}"  # consumes nothing the other tests send
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [STRACE, "-f", "-qq", "-e", "trace=close", "-e", "status=failed", "-o", str(trace),
             sys.executable, "-m", "celery", "-A", "dynabench", "worker", "-Q", queue, "-P", pool, "-c", "2",
             "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info",
             "-n", f"{queue}@%h"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)  # its own group: the stop reaches the worker, not only strace
    try:
        deadline = time.monotonic() + 120
        while "ready." not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "ready." in log.read_text(), f"the worker did not start:\n{log.read_text()[-3000:]}"
        time.sleep(5)  # pool children and the model thread load the target models meanwhile
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    second_closes = [line for line in trace.read_text().splitlines() if re.search(r"close\(\d+\).*EBADF", line)]
    assert not second_closes, f"descriptors closed twice: {second_closes[:5]}\n{log.read_text()[-2000:]}"
