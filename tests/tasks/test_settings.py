"""Settings in embedded mode and in service mode, read in a fresh process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import json, django; from django.conf import settings; django.setup(); "
    "print(json.dumps({'engine': settings.DATABASES['default']['ENGINE'], "
    "'name': str(settings.DATABASES['default']['NAME']), 'embedded': settings.EMBEDDED_MODE, "
    "'eager': settings.CELERY_TASK_ALWAYS_EAGER, 'broker': settings.CELERY_BROKER_URL, "
    "'debug': settings.DEBUG, 'secret_len': len(settings.SECRET_KEY), "
    "'sandbox': settings.MTURK_SANDBOX, 'mturk': __import__('crowd.mturk', fromlist=['mturk']).endpoint_url(), "
    "'data_dir': settings.DYNABENCH_DATA_DIR, 'hosts': settings.ALLOWED_HOSTS, "
    "'cache': settings.CACHES['default']['BACKEND'], "
    "'num_proxies': settings.REST_FRAMEWORK['NUM_PROXIES'], 'proxy_ssl': settings.SECURE_PROXY_SSL_HEADER}))"
)
SERVICE_VARS = ["DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CACHE_URL", "SECRET_KEY", "DEBUG",
                "ALLOWED_HOSTS", "MTURK_SANDBOX", "MTURK_ENDPOINT_URL", "DYNABENCH_DATA_DIR", "NUM_PROXIES",
                "PROXY_SETS_FORWARDED_PROTO", "ADDRESS_HASH_KEY"]
# What production needs besides SECRET_KEY: each key its own, and how many proxies are in front.
PRODUCTION = {"ADDRESS_HASH_KEY": "a" * 50, "NUM_PROXIES": "0"}


def run_settings(tmp_path, **env_vars):
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env.update(DJANGO_SETTINGS_MODULE="dynabench.settings", DYNABENCH_VAR_DIR=str(tmp_path / "var"))
    env.update(env_vars)
    return subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def test_debug_is_off_unless_asked_for(tmp_path):
    result = run_settings(tmp_path, SECRET_KEY="k" * 50, **PRODUCTION)
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    assert values["debug"] is False and values["hosts"] == []
    assert values["data_dir"] == str(tmp_path / "var" / "data")  # the folder fetch_data fills
    assert not (tmp_path / "var" / "secret_key").exists()  # no local key without DEBUG


def test_embedded_mode_is_the_default(tmp_path):
    result = run_settings(tmp_path, DEBUG="true")
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    assert values["engine"] == "django.db.backends.sqlite3"
    assert values["name"] == str(tmp_path / "var" / "db.sqlite3")
    assert values["embedded"] is True and values["eager"] is True and values["broker"] == ""
    assert values["sandbox"] is True and "sandbox" in values["mturk"]
    # A local secret key was generated and is kept for the next start.
    key_file = tmp_path / "var" / "secret_key"
    assert key_file.exists() and len(key_file.read_text()) >= 50
    assert key_file.stat().st_mode & 0o777 == 0o600  # readable by its owner only
    assert [p.name for p in key_file.parent.iterdir() if p.name.startswith(".secret_key")] == []
    again = json.loads(run_settings(tmp_path, DEBUG="true").stdout)
    assert again["secret_len"] == values["secret_len"]


def test_processes_starting_together_share_one_secret_key(tmp_path):
    """Eight processes create the key file at once: one key wins, all use it, no temp file is left."""
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env.update(DJANGO_SETTINGS_MODULE="dynabench.settings", DYNABENCH_VAR_DIR=str(tmp_path / "var"), DEBUG="true")
    probe = "import django; from django.conf import settings; django.setup(); print(settings.SECRET_KEY)"
    procs = [subprocess.Popen([sys.executable, "-c", probe], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(8)]
    keys = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(keys) == 1 and len(keys.pop()) >= 50
    assert sorted(p.name for p in (tmp_path / "var").iterdir() if "secret" in p.name) == ["secret_key"]


def test_service_mode_from_the_environment(tmp_path):
    result = run_settings(
        tmp_path, DATABASE_URL="postgres://dyna:pw@db.internal:5432/dynabench",
        CELERY_BROKER_URL="redis://redis.internal:6379/0", MTURK_SANDBOX="false",
        DYNABENCH_DATA_DIR="/srv/data", DEBUG="true",
    )
    assert result.returncode == 0, result.stderr
    values = json.loads(result.stdout)
    assert values["engine"] == "django.db.backends.postgresql"
    assert values["name"] == "dynabench"
    assert values["embedded"] is False and values["eager"] is False
    assert values["broker"] == "redis://redis.internal:6379/0"
    assert values["sandbox"] is False and "sandbox" not in values["mturk"]
    assert values["data_dir"] == "/srv/data"
    # Throttles and sign-in lockouts count on a cache every web process shares.
    # Signed (core/cache.py): a value someone else wrote into Redis is never unpickled.
    assert values["cache"] == "core.cache.SignedRedisCache"
    assert values["num_proxies"] == 0  # no client-sent X-Forwarded-For is trusted


def test_secret_key_is_required_when_debug_is_off(tmp_path):
    result = run_settings(tmp_path, DEBUG="false", ALLOWED_HOSTS="dynabench.example.org")
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_checking_submissions_without_a_sandbox_is_refused_when_debug_is_off(tmp_path):
    """SUBMISSION_SANDBOX=none runs uploaded models' checks with the server's rights and
    network: a production configuration that says so does not start."""
    result = run_settings(tmp_path, DEBUG="false", SECRET_KEY="k" * 50, SUBMISSION_SANDBOX="none", **PRODUCTION)
    assert result.returncode != 0
    assert "SUBMISSION_SANDBOX=none checks uploaded models without a sandbox" in result.stderr
    assert run_settings(tmp_path, DEBUG="true", SUBMISSION_SANDBOX="None").returncode == 0


def test_check_deploy_is_clean_under_production_settings(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env.update(
        DEBUG="false", SECRET_KEY="x" * 20 + "-production-secret-key-with-enough-entropy-9f8e7d6c",
        ALLOWED_HOSTS="dynabench.example.org", PUBLIC_BASE_URL="https://dynabench.example.org",
        DYNABENCH_VAR_DIR=str(tmp_path / "var"), **PRODUCTION,
    )
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize("url", ["postgres://u@h/db", "sqlite:////tmp/x.sqlite3"])
def test_database_url_selects_the_engine(tmp_path, url):
    values = json.loads(run_settings(tmp_path, DATABASE_URL=url, DEBUG="true").stdout)
    expected = "postgresql" if url.startswith("postgres") else "sqlite3"
    assert values["engine"].endswith(expected)


def test_makemigrations_needs_no_secret_but_serving_does(tmp_path):
    """`manage.py makemigrations --check` reads only the code: it runs with DEBUG off and
    no SECRET_KEY (a throwaway key); every other command still refuses."""
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env.update(DEBUG="false", DYNABENCH_VAR_DIR=str(tmp_path / "var"))
    check = subprocess.run([sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    refused = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode != 0 and "SECRET_KEY must be set when DEBUG is off" in refused.stderr


@pytest.mark.parametrize("name, value", [("INFERENCE_MAX_BATCH", "0"), ("EXPLANATION_PASS_STEPS", "0"),
                                         ("INFERENCE_BATCH_WINDOW_MS", "-1"), ("EXPLANATION_YIELD_MS", "-5"),
                                         ("EXPLANATION_QUEUE_MAX", "0"), ("EVALUATION_TIMED_PASSES", "0")])
def test_inference_settings_out_of_range_stop_the_start_with_their_name(tmp_path, name, value):
    result = run_settings(tmp_path, DEBUG="true", **{name: value})
    assert result.returncode != 0
    assert f"{name} must be at least" in result.stderr


def test_inference_settings_at_their_bounds_are_accepted(tmp_path):
    result = run_settings(tmp_path, DEBUG="true", INFERENCE_MAX_BATCH="1", EXPLANATION_PASS_STEPS="1",
                          INFERENCE_BATCH_WINDOW_MS="0", EXPLANATION_YIELD_MS="0")
    assert result.returncode == 0, result.stderr


def test_a_fresh_web_process_runs_the_jobs_left_queued(tmp_path):
    """`make run`: bootstrap_demo --background leaves jobs queued and exits; the web
    process, importing dynabench.wsgi before any task module, finds their tasks and runs
    them (here inline, JOBS_RUN_INLINE). Its Celery app had not imported leaderboard.tasks
    or tasks.tasks yet: the job's task was not registered (NotRegistered stopped the start)."""
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env.update(DJANGO_SETTINGS_MODULE="dynabench.settings", DYNABENCH_VAR_DIR=str(tmp_path / "var"), DEBUG="true",
               DYNABENCH_WARM_UP="0")
    migrate = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr
    queue = ("import django; django.setup(); from jobs.models import Job; "
             "print(Job.objects.create(kind='health_check', celery_task_name='tasks.health_check_job', "
             "queue='default').pk)")
    job_id = int(subprocess.run([sys.executable, "-c", queue], cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=120, check=True).stdout.strip().splitlines()[-1])
    start = ("import sys; import dynabench.wsgi; from jobs.models import Job; "
             "assert 'leaderboard.tasks' in sys.modules; "
             f"job = Job.objects.get(pk={job_id}); print(job.status, job.result.get('ok'))")
    result = subprocess.run([sys.executable, "-c", start], cwd=ROOT, env={**env, "JOBS_RUN_INLINE": "true"},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-2:] == ["succeeded", "True"]


@pytest.mark.parametrize(("env_vars", "trusted"), [
    ({}, False),  # nothing in front: a client's X-Forwarded-Proto: https is not believed
    ({"NUM_PROXIES": "1"}, True),  # a trusted proxy sets it
    ({"NUM_PROXIES": "1", "PROXY_SETS_FORWARDED_PROTO": "false"}, False),
    ({"PROXY_SETS_FORWARDED_PROTO": "true"}, True),
])
def test_x_forwarded_proto_is_trusted_only_behind_a_proxy_that_sets_it(tmp_path, env_vars, trusted):
    result = run_settings(tmp_path, SECRET_KEY="k" * 50, **{**PRODUCTION, **env_vars})
    assert result.returncode == 0, result.stderr
    proxy_ssl = json.loads(result.stdout)["proxy_ssl"]
    assert (proxy_ssl == ["HTTP_X_FORWARDED_PROTO", "https"]) is trusted and (proxy_ssl is None) is not trusted


KEYS = ("import json, django; from django.conf import settings; django.setup(); "
        "from annotation.trust import address_hash; "
        "print(json.dumps({'address_key': settings.ADDRESS_HASH_KEY, 'hash': address_hash('203.0.113.9'), "
        "'num_proxies': settings.REST_FRAMEWORK['NUM_PROXIES']}))")


def run_keys(tmp_path, **env_vars):
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS}
    env.update(DJANGO_SETTINGS_MODULE="dynabench.settings", DYNABENCH_VAR_DIR=str(tmp_path / "var"), **env_vars)
    return subprocess.run([sys.executable, "-c", KEYS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


def test_production_behind_an_unnamed_proxy_refuses_to_start(tmp_path):
    """Behind a proxy, NUM_PROXIES=0 makes the proxy's address everyone's: one person's
    wrong passwords lock every user out and all accounts count as one person. A
    deployment must say how many proxies are in front."""
    result = run_keys(tmp_path, DEBUG="false", SECRET_KEY="k" * 50, ADDRESS_HASH_KEY="a" * 50)
    assert result.returncode != 0
    assert "NUM_PROXIES must be set when DEBUG is off" in result.stderr
    assert "1 for one nginx or load balancer" in result.stderr
    said = run_keys(tmp_path, DEBUG="false", SECRET_KEY="k" * 50, ADDRESS_HASH_KEY="a" * 50, NUM_PROXIES="1")
    assert said.returncode == 0, said.stderr
    assert json.loads(said.stdout)["num_proxies"] == 1
    negative = run_keys(tmp_path, DEBUG="true", NUM_PROXIES="-1")
    assert negative.returncode != 0 and "NUM_PROXIES must be at least 0" in negative.stderr


def test_the_address_hash_key_is_required_when_debug_is_off(tmp_path):
    result = run_keys(tmp_path, DEBUG="false", SECRET_KEY="k" * 50, NUM_PROXIES="0")
    assert result.returncode != 0
    assert "ADDRESS_HASH_KEY must be set when DEBUG is off" in result.stderr


def test_rotating_the_secret_key_keeps_the_same_person_links(tmp_path):
    """The address hashes (which accounts share an address) are keyed apart from
    SECRET_KEY: a rotation of SECRET_KEY must not make ten sign-ups at one address ten
    strangers again."""
    before = run_keys(tmp_path, DEBUG="false", SECRET_KEY="old-" + "k" * 50, **PRODUCTION)
    after = run_keys(tmp_path, DEBUG="false", SECRET_KEY="new-" + "k" * 50, SECRET_KEY_FALLBACKS="old-" + "k" * 50,
                     **PRODUCTION)
    assert before.returncode == 0 and after.returncode == 0, before.stderr + after.stderr
    assert json.loads(before.stdout)["hash"] == json.loads(after.stdout)["hash"]
    # The same in development: the generated address key is kept apart from the secret key.
    dev_before = json.loads(run_keys(tmp_path, DEBUG="true", SECRET_KEY="old-" + "k" * 50).stdout)
    dev_after = json.loads(run_keys(tmp_path, DEBUG="true", SECRET_KEY="new-" + "k" * 50).stdout)
    assert dev_before["hash"] == dev_after["hash"] and dev_before["address_key"] != "old-" + "k" * 50
    assert (tmp_path / "var" / "address_hash_key").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("password, clean", [("", False), (":s3cret-redis-password@", True)])
def test_check_deploy_refuses_a_redis_without_a_password(tmp_path, password, clean):
    """Anyone who reaches a Redis without a password can queue tasks and write the
    cache: production names every Redis with its password (or ACL user)."""
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS + ["INFERENCE_REPLY_URL"]}
    env.update(
        DEBUG="false", SECRET_KEY="x" * 20 + "-production-secret-key-with-enough-entropy-9f8e7d6c",
        ALLOWED_HOSTS="dynabench.example.org", PUBLIC_BASE_URL="https://dynabench.example.org",
        DYNABENCH_VAR_DIR=str(tmp_path / "var"), **PRODUCTION,
        CELERY_BROKER_URL=f"redis://{password}redis.internal:6379/0",
        CELERY_RESULT_BACKEND=f"redis://{password}redis.internal:6379/1",
        CACHE_URL=f"rediscache://{password}redis.internal:6379/2",
    )
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    if clean:
        assert result.returncode == 0, result.stdout + result.stderr
    else:
        assert result.returncode != 0
        assert "dynabench.E101" in result.stderr and "CELERY_BROKER_URL" in result.stderr
        assert "CACHE_URL" in result.stderr


def test_training_jobs_are_bounded_unless_a_deployment_says_otherwise(tmp_path):
    """Submission checks wait on the training worker: a training job asking for a
    million steps cannot hold it for days by default."""
    probe = ("import django; from django.conf import settings; django.setup(); "
             "print(settings.TRAINING_MAX_STEPS, settings.SUBMISSION_CHECKS_QUEUED)")
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_VARS + ["TRAINING_MAX_STEPS"]}
    env.update(DJANGO_SETTINGS_MODULE="dynabench.settings", DYNABENCH_VAR_DIR=str(tmp_path / "var"), DEBUG="true")
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["10000", "2"]
    env["TRAINING_MAX_STEPS"] = "0"  # a deployment with its own training machines lifts it
    lifted = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    assert lifted.stdout.split()[0] == "None"
