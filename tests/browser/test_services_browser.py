"""Service mode in one command: ``make services`` brings up every process of the
production shape (gunicorn, the inference, training and default workers, beat) on a
database of its own, trains the demo's models on its training worker, and a newcomer
in a browser signs up and writes an example that the inference worker answers.

Nothing here runs in the test's process but the browser: the platform is the
Makefile's, seen over HTTP, and its database is read at the end to check what it
stored. Needs PostgreSQL and Redis (the integration group) and Chromium."""

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Redis databases of this test's own (CI's run uses 13-15, make services 0-2).
BROKER_DB, RESULTS_DB, CACHE_DB = 3, 4, 5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a local URL
        return json.loads(response.read())


@pytest.fixture
def services_up(tmp_path, settings):
    """``make services`` on a fresh database and Redis databases of its own; its base URL
    and database URL. Stopped (the whole process group) and dropped afterwards."""
    import psycopg
    import redis

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql" or not settings.CELERY_BROKER_URL:
        pytest.skip("make services needs PostgreSQL and Redis (DATABASE_URL and CELERY_BROKER_URL, as in .ci/run)")
    db = settings.DATABASES["default"]
    server = dict(host=db.get("HOST") or "127.0.0.1", port=db.get("PORT") or 5432, user=db.get("USER") or "postgres",
                  password=db.get("PASSWORD") or None)
    name = f"dynabench_services_{uuid.uuid4().hex[:8]}"
    auth = server["user"] + (f":{server['password']}" if server["password"] else "")
    database_url = f"postgres://{auth}@{server['host']}:{server['port']}/{name}"
    broker = urlsplit(settings.CELERY_BROKER_URL)
    redis_base = f"redis://{broker.hostname or '127.0.0.1'}:{broker.port or 6379}"
    for number in (BROKER_DB, RESULTS_DB, CACHE_DB):  # nothing left from an earlier run
        redis.Redis.from_url(f"{redis_base}/{number}").flushdb()
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DATABASE_URL", "CELERY_", "CACHE_URL", "DYNABENCH_INTEGRATION", "PYTEST_"))}
    env.update(SERVICES_DATABASE_URL=database_url, SERVICES_BROKER=f"{redis_base}/{BROKER_DB}",
               SERVICES_RESULTS=f"{redis_base}/{RESULTS_DB}",
               SERVICES_CACHE=f"rediscache://{redis_base.removeprefix('redis://')}/{CACHE_DB}",
               HOST="127.0.0.1", PORT=str(port), DEBUG="true", TRAINING_MAX_STEPS="2",
               DYNABENCH_MODELS_DIR=str(tmp_path / "models"), DYNABENCH_VAR_DIR=str(tmp_path / "var"))
    log_path = tmp_path / "services.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(["make", "services"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:  # serving, and the demo's sentiment model trained, evaluated and made the target
            if proc.poll() is not None:
                pytest.fail(f"make services exited ({proc.returncode}):\n{log_path.read_text()[-4000:]}")
            try:
                rounds = get_json(f"{base}/api/tasks/sentiment/rounds/")["results"]
                if any(r["status"] == "open" and r["target_models"] for r in rounds):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"no sentiment target 300 s after make services:\n{log_path.read_text()[-4000:]}")
            time.sleep(2)
        with psycopg.connect(host=server["host"], port=server["port"], user=server["user"],
                             password=server["password"], dbname=name, autocommit=True) as stored:
            yield base, stored
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
        with psycopg.connect(host=server["host"], port=server["port"], user=server["user"],
                             password=server["password"], dbname="postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_newcomer_writes_an_example_through_make_services(services_up, browser_page):
    base, db = services_up
    page, errors = browser_page
    username = f"newcomer{uuid.uuid4().hex[:6]}"
    password = "a long pass phrase 4 the services"

    page.goto(f"{base}/tasks/sentiment/")
    page.click("text=Write examples for round 1")
    page.wait_for_url("**/accounts/login/**")
    page.goto(f"{base}/accounts/signup/?next=/tasks/sentiment/create/")
    page.fill("#id_username", username)
    page.fill("#id_password1", password)
    page.fill("#id_password2", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/tasks/sentiment/create/")

    # The task's onboarding comes first (the built-in tasks ship one): answered right, item
    # by item, then on to the work.
    from tasks.services import load_definition
    from tests.browser.test_onboarding_browser import pass_onboarding

    page.wait_for_selector("#onboarding")
    pass_onboarding(page, load_definition("sentiment")["config"]["onboarding"]["items"])

    page.wait_for_selector("#context-fields .field .text")
    page.fill("#input-statement", "Not exactly terrible, I suppose.")
    page.locator("input[name=label][value=positive]").check()
    page.click("#submit-example")
    page.wait_for_selector("#result:not([hidden])", timeout=120_000)  # answered by the inference worker
    verdict = page.locator("#result-verdict").inner_text()
    assert verdict in ("You fooled the model!", "The model got it right. Try again?")
    assert page.locator(".probabilities li").count() == 2
    assert page.locator("#count-written").inner_text() == "1"
    assert errors == []

    stored = db.execute(
        "SELECT e.inputs, e.target, e.prediction, e.fooled FROM annotation_example e "
        "JOIN auth_user u ON u.id = e.annotator_id WHERE u.username = %s", (username,)).fetchall()
    assert len(stored) == 1
    inputs, target, prediction, fooled = stored[0]
    assert inputs == {"statement": "Not exactly terrible, I suppose."} and target == {"label": "positive"}
    assert set(prediction["probabilities"]) == {"positive", "negative"}
    assert fooled == (prediction["label"] != "positive") == (verdict == "You fooled the model!")
