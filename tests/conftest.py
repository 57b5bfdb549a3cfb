"""Shared fixtures: personas, demo tasks, and the embedded/integration switch."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if os.environ.get("PYTEST_XDIST_WORKER"):  # several test processes share the cores: one torch thread each
    os.environ.setdefault("DYNABENCH_TORCH_THREADS", "1")
# Two timed passes per evaluation (_fewer_timed_passes says why): here for the processes
# the tests start; _fewer_timed_passes sets it in this one, whose settings are loaded.
TIMED_PASSES = 2
os.environ.setdefault("EVALUATION_TIMED_PASSES", str(TIMED_PASSES))
# A validator's record on checked items moves with each decision here, and its agreement
# shows over any number of answers (_checked_record_at_once says why): for the processes
# the tests start too.
os.environ.setdefault("CHECKED_RECORD_STEP", "1")
os.environ.setdefault("CHECKED_AGREEMENT_MIN_ANSWERS", "1")

from datetime import timedelta  # noqa: E402

import pytest  # noqa: E402
from django.utils import timezone  # noqa: E402

# The real data sets are where the setting DYNABENCH_DATA_DIR says (default var/data,
# which `manage.py fetch_data` fills; .ci/run sets it to the CI machines' copy). Tests
# that need a file skip, with the reason, where it is absent.


def pytest_configure(config):
    _own_redis_cache_per_test_process()


# Redis databases no test process takes for its cache: make services' defaults (0-2) and
# tests/browser/test_services_browser.py's (3-5).
_RESERVED_REDIS_DBS = {0, 1, 2, 3, 4, 5}


def _own_redis_cache_per_test_process():
    """With pytest-xdist (make test), each test process after the first gets a Redis
    database of its own for the cache: tests empty the cache (FLUSHDB), which would wipe
    another process's throttle counts and boards mid-test. Processes it starts (a Celery
    worker) inherit it through CACHE_URL. The first process keeps the one configured."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    from django.conf import settings

    cache = settings.CACHES["default"]
    if worker == "gw0" or "redis" not in cache["BACKEND"].lower():
        return
    from urllib.parse import urlsplit

    from django.test import override_settings

    urls = [cache["LOCATION"], settings.CELERY_BROKER_URL, settings.CELERY_RESULT_BACKEND,
            getattr(settings, "INFERENCE_REPLY_URL", "")]
    used = {int(urlsplit(u).path.strip("/") or 0) for u in urls if u and u.startswith(("redis://", "rediss://"))}
    free = [n for n in range(15, -1, -1) if n not in used | _RESERVED_REDIS_DBS]
    number = free[(int(worker.removeprefix("gw")) - 1) % len(free)]
    parts = urlsplit(cache["LOCATION"])
    location = parts._replace(path=f"/{number}").geturl()
    override_settings(CACHES={"default": {**cache, "LOCATION": location}}).enable()
    os.environ["CACHE_URL"] = f"rediscache://{parts.netloc}/{number}"

INTEGRATION = os.environ.get("DYNABENCH_INTEGRATION") == "1"
PASSWORD = "correct horse battery staple 42"


def pytest_collection_modifyitems(config, items):
    if INTEGRATION:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            # They share one Celery worker, which consumes the broker's queues and would
            # take another test process's tasks: one process runs them (make test does).
            for item in items:
                if "integration" in item.keywords:
                    item.add_marker(pytest.mark.skip(
                        reason="integration tests run in one process: make test runs them after the others"))
        return
    skip = pytest.mark.skip(
        reason="integration test: set DYNABENCH_INTEGRATION=1 with DATABASE_URL (PostgreSQL) and "
        "CELERY_BROKER_URL (Redis) pointing at running services (.ci/run does this)"
    )
    for item in items:
        if "integration" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _empty_cache():
    """Each test starts with an empty cache (this process's own: a Redis database of its
    own, or memory): throttle counts keyed by a user id or an address that an earlier
    test used (ids come round again after a rollback) must not refuse this test's
    requests."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture(autouse=True)
def _celery_mode(request):
    """Unit tests run Celery tasks in-process; integration tests use the broker."""
    from django.conf import settings

    from dynabench.celery import app

    eager = "integration" not in request.keywords
    before = (app.conf.task_always_eager, app.conf.task_eager_propagates, settings.JOBS_RUN_INLINE)
    app.conf.task_always_eager = eager
    app.conf.task_eager_propagates = eager
    # Jobs run in the test's own thread, unless a test asks for the background runner.
    settings.JOBS_RUN_INLINE = "background_jobs" not in request.keywords
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates, settings.JOBS_RUN_INLINE = before


@pytest.fixture(autouse=True)
def _background_jobs_done(request):
    """A test on the embedded background job thread ends only once that thread is idle,
    before its database is flushed: the in-memory SQLite test database locks whole
    tables, so a job still writing would fail the flush and leave its rows to the next
    test. (This fixture takes the database first, so its teardown runs before the flush.)"""
    if "background_jobs" not in request.keywords:
        yield
        return
    request.getfixturevalue("transactional_db")
    yield
    from jobs.engine import wait_for_background_jobs

    assert wait_for_background_jobs(300), "the background job thread was still busy 300 s after the test"


@pytest.fixture(autouse=True, scope="session")
def _fewer_timed_passes():
    """An evaluation times its throughput twice here, not five times: the timed passes
    over a small test set are the larger part of an evaluation's time, and the tests
    check how the passes are taken and stored, not how many (the default five give the
    board a steadier median)."""
    from django.conf import settings

    before = settings.EVALUATION_TIMED_PASSES
    settings.EVALUATION_TIMED_PASSES = TIMED_PASSES
    yield
    settings.EVALUATION_TIMED_PASSES = before


@pytest.fixture(autouse=True, scope="session")
def _checked_record_at_once():
    """A validator's record on checked items moves after each decision here, not after
    every CHECKED_RECORD_STEP (20) of them, and its agreement is told over any number of
    answers: the tests of trust and gold count answers one by one. The tests of the steps
    themselves (tests/annotation/test_gold_secrecy.py) set the production values back."""
    from django.conf import settings

    before = settings.CHECKED_RECORD_STEP, settings.CHECKED_AGREEMENT_MIN_ANSWERS
    settings.CHECKED_RECORD_STEP, settings.CHECKED_AGREEMENT_MIN_ANSWERS = 1, 1
    yield
    settings.CHECKED_RECORD_STEP, settings.CHECKED_AGREEMENT_MIN_ANSWERS = before


@pytest.fixture
def production_steps(settings):
    """The production values of the record's step and of the agreement's minimum
    (dynabench/settings.py's defaults), for the tests of the steps and of attacks that
    must run under the default settings."""
    settings.CHECKED_RECORD_STEP = 20
    settings.CHECKED_AGREEMENT_MIN_ANSWERS = 10


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing():
    """Real hashing costs ~0.3 s a user; tests create many users."""
    from django.conf import settings

    before = settings.PASSWORD_HASHERS
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    yield
    settings.PASSWORD_HASHERS = before


@pytest.fixture(autouse=True, scope="session")
def _models_load_before_a_warming_up_answer():
    """A test's first prediction waits for its model to load (seconds on a busy CI
    machine) instead of a 503 "warming up"; tests/annotation/test_batching.py sets a
    short wait to see that answer."""
    from django.conf import settings

    before = settings.INFERENCE_WARMUP_WAIT
    settings.INFERENCE_WARMUP_WAIT = 300
    yield
    settings.INFERENCE_WARMUP_WAIT = before


@pytest.fixture(autouse=True, scope="session")
def _models_dir(tmp_path_factory):
    """Model artifacts written by tests go to a temporary folder."""
    from django.conf import settings

    path = tmp_path_factory.mktemp("models")
    before = settings.DYNABENCH_MODELS_DIR
    settings.DYNABENCH_MODELS_DIR = path
    yield path
    settings.DYNABENCH_MODELS_DIR = before


@pytest.fixture(autouse=True, scope="session")
def _close_database_sessions_at_the_end(django_db_setup, django_db_blocker):
    """Before the test database is dropped, end sessions that threads, the live
    server or a worker subprocess may still hold (PostgreSQL refuses to drop a
    database in use). A session whose tests use no database made none: nothing to end."""
    yield
    from django.db import connection, connections

    with django_db_blocker.unblock():
        if connection.vendor == "postgresql" and connection.settings_dict["NAME"].startswith("test_"):
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
        connections.close_all()


ESTABLISHED = timedelta(days=30)


def _user(django_user_model, username, **extra):
    """A persona: an account made a month ago, so its validation votes count
    (``VALIDATOR_MIN_ACCOUNT_AGE``); tests of new accounts make their own."""
    extra.setdefault("date_joined", timezone.now() - ESTABLISHED)
    return django_user_model.objects.create_user(username=username, password=PASSWORD, **extra)


@pytest.fixture
def researcher(demo_tasks, django_user_model):
    """A staff researcher who owns the four demo tasks."""
    from tasks.roles import make_researcher

    user = make_researcher(_user(django_user_model, "researcher", email="r@example.org"))
    for task in demo_tasks.values():
        task.owners.add(user)
    return user


@pytest.fixture
def other_researcher(db, django_user_model):
    """A staff researcher who owns no demo task."""
    from tasks.roles import make_researcher

    return make_researcher(_user(django_user_model, "other_researcher"))


@pytest.fixture
def superuser(db, django_user_model):
    return django_user_model.objects.create_superuser("root", password=PASSWORD)


@pytest.fixture
def annotator(db, django_user_model):
    return _user(django_user_model, "annotator")


@pytest.fixture
def second_annotator(db, django_user_model):
    return _user(django_user_model, "second_annotator")


@pytest.fixture
def mturk_worker(db, django_user_model):
    from crowd.models import WorkerIdentity

    user = _user(django_user_model, "mturk_A1B2C3D4E5")
    WorkerIdentity.objects.create(user=user, worker_id="A1B2C3D4E5", sandbox=True)
    return user


@pytest.fixture
def anonymous():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def client_for():
    """An API client signed in (by session) as the given user."""
    from rest_framework.test import APIClient

    def make(user):
        client = APIClient()
        client.force_login(user)
        client.user = user  # for helpers that act as the queue serving this user
        return client

    return make


@pytest.fixture
def token_client():
    """An API client that authenticates only with a session token for ``user`` on ``task``."""
    from rest_framework.test import APIClient

    from annotation.sessions import start_session
    from annotation.tokens import make_token

    def make(user, task):
        client = APIClient()
        client.credentials(HTTP_X_DYNABENCH_TOKEN=make_token(start_session(user, task)))
        return client

    return make


@pytest.fixture
def demo_tasks(db, request):
    """The four demo tasks with round 1 open and the seed contexts (no models, and no
    seed examples in round 0: tests add the examples they count). Their onboarding is
    taken out, so that the personas write and validate at once; a test of onboarding
    asks for ``with_onboarding`` (before this fixture) to keep the shipped sets."""
    from leaderboard.demo import bootstrap_demo
    from tasks.models import Task

    bootstrap_demo(with_models=False, seed_examples=False)
    if "with_onboarding" not in request.fixturenames:
        for task in Task.objects.all():
            task.config = {k: v for k, v in task.config.items() if k != "onboarding"}
            task.save(update_fields=["config"])
    return {t.slug: t for t in Task.objects.all()}


@pytest.fixture
def with_onboarding():
    """Keeps the demo tasks' shipped onboarding sets (``demo_tasks`` looks for it)."""
    return True


TINY = {"max_steps": 2, "epochs": 1, "batch_size": 4}


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory):
    """``tiny_artifact(slug)``: a tiny trained artifact for one demo task, trained on
    first use and kept for the test session (a test that needs one task trains one)."""
    import ml
    from leaderboard.rows import read_seed_rows
    from tasks.config import validate_task_config
    from tasks.services import load_definition

    root = tmp_path_factory.mktemp("tiny-models")
    trained = {}

    def make(slug):
        if slug not in trained:
            definition = load_definition(slug)
            config = validate_task_config(definition["task_type"], definition["config"])
            spec = ml.TaskSpec.from_dict(config.ml_spec_dict())
            rows = read_seed_rows(slug)["train"][:12]
            trained[slug] = ml.train(spec, rows, [], root / slug, **TINY)
        return trained[slug]

    return make


@pytest.fixture(scope="session")
def tiny_artifacts(tiny_artifact):
    """One tiny trained artifact per demo task, trained once per test session."""
    from tasks.services import DEFAULT_TASK_SLUGS

    return {slug: tiny_artifact(slug) for slug in DEFAULT_TASK_SLUGS}


@pytest.fixture(scope="session")
def other_sentiment_artifact(tmp_path_factory, tiny_artifacts):
    """A second, different tiny sentiment model (other rows, other seed): for ensembles."""
    import ml
    from leaderboard.rows import read_seed_rows
    from tasks.config import validate_task_config
    from tasks.services import load_definition

    definition = load_definition("sentiment")
    spec = ml.TaskSpec.from_dict(validate_task_config(definition["task_type"], definition["config"]).ml_spec_dict())
    rows = read_seed_rows("sentiment")["train"][-16:]
    return ml.train(spec, rows, [], tmp_path_factory.mktemp("other-sentiment") / "artifact", seed=7, **TINY)


@pytest.fixture
def live_tasks(demo_tasks, tiny_artifacts):
    """The demo tasks with a registered target model on each open round."""
    from registry.services import register_model

    for slug, task in demo_tasks.items():
        model = register_model(task, tiny_artifacts[slug], name=f"{slug}-tiny")
        task.open_round().target_models.add(model)
    return demo_tasks


@pytest.fixture
def fake_mturk(monkeypatch, tmp_path):
    """A running fake MTurk (crowd/testing/fake_mturk.py); no real AWS credential or config is read."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "fake")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_RETRY_MODE", "AWS_MAX_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    from crowd.testing.fake_mturk import FakeMTurk

    with FakeMTurk() as fake:
        yield fake


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """moto's server mode: a real S3 protocol endpoint (HTTP on a free local port), in a
    process of its own, for the session. Yields its URL; credentials are moto's fakes."""
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"moto's S3 server did not start on {url} (exit {proc.poll()})")
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture
def s3_store(s3_endpoint, settings, monkeypatch, tmp_path):
    """This test's artifact store: a new bucket on the moto endpoint, as s3://<bucket>/store,
    and a local cache of its own (one machine's)."""
    from tests.objectstore import S3_CREDENTIALS, new_bucket

    for name, value in S3_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    bucket = new_bucket(s3_endpoint)
    settings.DYNABENCH_ARTIFACTS_URL = f"s3://{bucket}/store"
    settings.AWS_ENDPOINT_URL_S3 = s3_endpoint
    settings.DYNABENCH_ARTIFACTS_CACHE = str(tmp_path / "cache-a")
    return bucket


@pytest.fixture
def release_world(demo_tasks, annotator, second_annotator, researcher, other_researcher, superuser):
    """The NLI demo task with data in every state a release must tell apart
    (tests/leaderboard/release_data.py): rounds 0 and 1 closed, round 2 open."""
    from tests.leaderboard.release_data import populate

    return populate(demo_tasks["nli"], [annotator, second_annotator], researcher, [other_researcher, superuser])


@pytest.fixture
def released(release_world, django_capture_on_commit_callbacks):
    """A release of ``release_world``'s rounds 0 and 1, made by the service and its job."""
    from leaderboard.models import Release
    from leaderboard.releases import service

    with django_capture_on_commit_callbacks(execute=True):
        service.start_release(release_world.task, rounds=[0, 1])
    return Release.objects.get()
