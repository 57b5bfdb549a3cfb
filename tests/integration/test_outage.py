"""A Redis outage under load: the whole service stack against a Redis this test runs itself.

A web server (gunicorn) and an inference worker (Celery, solo pool) share a private
Redis (broker, reply lists, cache) and the test's PostgreSQL database. Annotators
write without pause; the test stops Redis for a few seconds, then starts it again.
While it is down every request must answer 503 with Retry-After, never a 5xx of
another kind; afterwards the loop resumes by itself; and every 201 is a stored
example, with nothing stored that was not acknowledged.
"""

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from .conftest import ROOT, database_url

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REDIS = shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(log) -> str:
    return f"\n--- {log.name} ---\n{log.read_text()[-3000:]}" if log and log.exists() else ""


def wait_for(check, timeout: float, what: str, log=None, alive=(), detail=lambda: ""):
    """Poll ``check`` until it holds; fail at once, with its log, if one of the
    ``alive`` processes ((process, log) pairs) has exited meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc, proc_log in alive:
            if proc.poll() is not None:
                pytest.fail(f"{proc_log.stem} exited ({proc.returncode}) while waiting for {what}{tail(proc_log)}")
        if check():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} did not happen in {timeout:.0f} s{detail()}{tail(log)}")


class PrivateRedis:
    def __init__(self, port: int, workdir):
        self.port, self.workdir, self.proc = port, workdir, None

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self.up, 10, "redis-server start")

    def up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)


def post(url: str, token: str, body: bytes):
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": f"Token {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.mark.django_db(transaction=True)
def test_a_redis_restart_under_load_answers_503_and_the_loop_resumes(services, live_tasks, tmp_path,
                                                                     django_user_model):
    if not REDIS:
        pytest.skip("redis-server is not installed")
    import json

    from django.db import connection
    from rest_framework.authtoken.models import Token

    from annotation.models import Example

    task = live_tasks["sentiment"]
    tokens = {}
    for i in range(4):
        user = django_user_model.objects.create_user(f"outage{i}", password=None)
        tokens[user.username] = Token.objects.create(user=user).key
    context_id = task.contexts.first().pk

    redis = PrivateRedis(free_port(), tmp_path)
    web_port = free_port()
    redis_url = f"redis://127.0.0.1:{redis.port}"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(connection.settings_dict), CELERY_BROKER_URL=f"{redis_url}/0",
        CELERY_RESULT_BACKEND=f"{redis_url}/1", DEBUG="true", PYTHONUNBUFFERED="1", INFERENCE_TIMEOUT="10",
        THROTTLE_EXAMPLES="100000/min", THROTTLE_USER="100000/min", DYNABENCH_TORCH_THREADS="1",
    )
    env.pop("CACHE_URL", None)
    worker_log, web_log = tmp_path / "worker.log", tmp_path / "web.log"
    processes = []
    redis.start()
    try:
        with open(worker_log, "w") as wl, open(web_log, "w") as gl:
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "dynabench", "worker", "-Q", "inference", "-P", "solo",
                 "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info",
                 "-n", f"outage-{web_port}@%h"], cwd=ROOT, env=env, stdout=wl, stderr=subprocess.STDOUT))
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "dynabench.wsgi", "-b", f"127.0.0.1:{web_port}", "-w", "1",
                 "--threads", "4", "--timeout", "120"], cwd=ROOT, env=env, stdout=gl, stderr=subprocess.STDOUT))
            url = f"http://127.0.0.1:{web_port}/api/tasks/sentiment/examples/"

            def write(i, token):
                return post(url, token, json.dumps({"context": context_id, "inputs": {"statement": f"Take {i}."},
                                                   "target": {"label": "positive"}}).encode())

            first_token = next(iter(tokens.values()))

            last_answer = {}

            def first_example_accepted() -> bool:
                try:
                    status, _headers, body = write(0, first_token)
                except OSError:  # the server is not listening yet
                    return False
                last_answer.update(status=status, body=body[:500])
                return status == 201

            alive = list(zip(processes, (worker_log, web_log), strict=True))
            wait_for(first_example_accepted, 120, "a first accepted example", worker_log, alive,
                     detail=lambda: f"\nthe last answer: {last_answer}")

            results = []  # (time, annotator, status, headers)
            stop = threading.Event()

            def annotator(name, token):
                i = 0
                while not stop.is_set():
                    i += 1
                    status, headers, _body = write(i, token)
                    results.append((time.monotonic(), name, status, headers))

            threads = [threading.Thread(target=annotator, args=item) for item in tokens.items()]
            for t in threads:
                t.start()
            time.sleep(3)
            redis.stop()
            down_at = time.monotonic()
            time.sleep(5)
            redis.start()
            up_at = time.monotonic()
            # The loop resumes by itself: examples are accepted again after the restart.
            wait_for(lambda: any(t > up_at and s == 201 for t, _n, s, _h in list(results)), 60,
                     "an example accepted after the restart", worker_log, alive)
            time.sleep(2)
            stop.set()
            for t in threads:
                t.join(timeout=90)
    finally:
        for proc in processes:
            proc.terminate()
        for proc in processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        redis.stop()

    statuses = [s for _t, _n, s, _h in results]
    unexpected = sorted({s for s in statuses if s not in (201, 503)})
    assert not unexpected, f"unexpected statuses {unexpected}:\n{web_log.read_text()[-3000:]}"
    during = [(s, h) for t, _n, s, h in results if down_at + 1 < t < up_at]
    assert during and all(s == 503 for s, _h in during), "requests while Redis was down must answer 503"
    assert all(int(h.get("Retry-After", "0")) > 0 for s, h in ((s, h) for _t, _n, s, h in results) if s == 503)
    assert statuses.count(201) >= 2 and any(t < down_at and s == 201 for t, _n, s, _h in results)
    # Every acknowledged example is stored, and nothing unacknowledged was.
    for name in tokens:
        accepted = sum(1 for _t, n, s, _h in results if n == name and s == 201)
        stored = Example.objects.filter(task=task, annotator__username=name).count()
        first = 1 if name == "outage0" else 0  # the readiness probe's example
        assert stored == accepted + first, name
