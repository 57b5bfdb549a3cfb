"""Real services for the integration group: PostgreSQL, Redis and a Celery worker.

Switched on by DYNABENCH_INTEGRATION=1 (``.ci/run`` sets it). Without the
services these tests skip with a reason; with CI=true they fail instead.
"""

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() == "true"


def unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"CI=true and a required service is unavailable: {reason}", pytrace=False)
    pytest.skip(reason)


def reachable(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=3):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def services(django_db_setup):
    from django.conf import settings
    from django.db import connection

    if connection.vendor != "postgresql":
        unavailable(f"integration tests need DATABASE_URL=postgres://... (got {connection.vendor})")
    broker = settings.CELERY_BROKER_URL
    if not broker:
        unavailable("integration tests need CELERY_BROKER_URL=redis://...")
    if not reachable(broker):
        unavailable(f"the broker at {broker} cannot be reached")
    if not settings.CELERY_RESULT_BACKEND:
        unavailable("integration tests need CELERY_RESULT_BACKEND=redis://...")
    return settings


def database_url(db: dict) -> str:
    user = quote(db.get("USER") or "")
    password = quote(db.get("PASSWORD") or "")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{db['NAME']}"


@pytest.fixture(scope="session")
def worker_mturk(tmp_path_factory):
    """The fake MTurk (crowd/testing/fake_mturk.py) that the worker process talks to."""
    from crowd.testing.fake_mturk import FakeMTurk

    with FakeMTurk() as fake:
        yield fake


@pytest.fixture(scope="session")
def worker_store(s3_endpoint):
    """The worker's artifact store: a bucket on moto's S3 server. The worker writes what
    it trains or checks there (s3://<bucket>/ci) and keeps its own cache; this process,
    another machine, reads those artifacts through the same endpoint into its cache."""
    from django.conf import settings

    from tests.objectstore import S3_CREDENTIALS, new_bucket

    before = (settings.AWS_ENDPOINT_URL_S3, {name: os.environ.get(name) for name in S3_CREDENTIALS})
    os.environ.update(S3_CREDENTIALS)
    settings.AWS_ENDPOINT_URL_S3 = s3_endpoint
    yield {"url": f"s3://{new_bucket(s3_endpoint)}/ci", "endpoint": s3_endpoint}
    settings.AWS_ENDPOINT_URL_S3 = before[0]
    for name, value in before[1].items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def worker_job_files(tmp_path_factory):
    """The folder the worker writes job files to (exports), and this process reads them from:
    one folder both share, as web and workers share DYNABENCH_JOB_FILES_DIR."""
    return tmp_path_factory.mktemp("job-files")


@pytest.fixture(scope="session")
def celery_worker_process(services, tmp_path_factory, _models_dir, worker_mturk, worker_store, worker_job_files):
    """A real `celery worker` process, on the test database, all queues (MTurk: the fake),
    with the threads pool `make worker` uses (predictions batched on its model thread).
    Its artifacts go to object storage (``worker_store``), through a cache of its own."""
    from django.db import connection

    from core import consumers
    from dynabench.celery import app

    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(connection.settings_dict),
        DYNABENCH_MODELS_DIR=str(_models_dir), DYNABENCH_JOB_FILES_DIR=str(worker_job_files),
        DYNABENCH_ARTIFACTS_URL=worker_store["url"], AWS_ENDPOINT_URL_S3=worker_store["endpoint"],
        DYNABENCH_ARTIFACTS_CACHE=str(tmp_path_factory.mktemp("worker-artifact-cache")),
        PYTHONUNBUFFERED="1", INFERENCE_WARMUP_WAIT="120",
        MTURK_ENDPOINT_URL=worker_mturk.endpoint_url, AWS_ACCESS_KEY_ID="fake", AWS_SECRET_ACCESS_KEY="fake",
        AWS_DEFAULT_REGION="us-east-1", AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
    )
    name = f"test-{uuid.uuid4().hex[:8]}@%h"
    log_file = open(log_path, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "dynabench", "worker", "-Q", "default,inference,explain,training",
         "-P", "threads", "-c", "8", "--without-gossip", "--without-mingle", "-l", "info", "-n", name],
        cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
    )
    app.conf.task_always_eager = False
    deadline = time.monotonic() + 90
    try:
        # Ready when it answers a ping and its heartbeat stamps the queues (core.consumers):
        # the web sends nothing to a queue without one.
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the Celery worker exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}")
            replies = app.control.ping(timeout=1.0)
            if any(name.split("@")[0] in host for reply in replies for host in reply) and all(
                    consumers.live_count(services.INFERENCE_REPLY_URL, q) for q in ("inference", "explain")):
                break
            if time.monotonic() > deadline:
                pytest.fail(f"the Celery worker did not answer in 90 s:\n{log_path.read_text()[-3000:]}")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log_file.close()
