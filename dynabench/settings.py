# Long on purpose: one settings module by design: every setting is read from the environment in one place.
"""Dynabench settings: one module, configured by the environment.

Unset service variables mean the embedded default: SQLite under ``var/`` and
Celery tasks run in-process. See the settings table in docs/operations.md.
"""

import json
import os
import re
import secrets
import sys
import tempfile
import urllib.parse
from decimal import Decimal
from pathlib import Path

import environ
from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from core import celery_names
from ml.endpoints.network import parse_host

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
if (BASE_DIR / ".env").exists():
    environ.Env.read_env(BASE_DIR / ".env")

VAR_DIR = Path(env("DYNABENCH_VAR_DIR", default=str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# Off unless asked for: `make run`, `make test` and the other make targets set
# DEBUG=true for a development checkout; a deployment that forgets it is safe.
DEBUG = env.bool("DEBUG", default=False)


def _local_secret_key(name: str = "secret_key") -> str:
    """A key generated once per checkout and kept in var/<name> (local development only).

    Written to a private temporary file (mode 0600 from the start) and linked into
    place, so a reader never sees a half-written key, the key is never readable by
    others, and when two processes start at once the first link wins and both use it.
    """
    path = VAR_DIR / name
    if not path.exists():
        descriptor, tmp = tempfile.mkstemp(dir=VAR_DIR, prefix=f".{name}.")  # mode 0600
        try:
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_urlsafe(64))
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process got there first: use its key
        finally:
            os.unlink(tmp)
    return path.read_text().strip()


# Commands that only read the code (they serve nothing and sign nothing that outlives
# them) need no production secret, so `manage.py makemigrations --check` works on a
# fresh checkout with DEBUG off; they get a throwaway key.
CODE_ONLY_COMMANDS = {"makemigrations"}
_code_only_command = Path(sys.argv[0]).name == "manage.py" and sys.argv[1:2] != [] and sys.argv[1] in CODE_ONLY_COMMANDS

SECRET_KEY = env("SECRET_KEY", default="")
if not SECRET_KEY and not DEBUG and _code_only_command:
    SECRET_KEY = secrets.token_urlsafe(64)
# Earlier keys, newest first, while what they signed is still in flight (completion
# tokens, example signatures, page tokens): rotate SECRET_KEY and list the old one here.
SECRET_KEY_FALLBACKS = env.list("SECRET_KEY_FALLBACKS", default=[])
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "SECRET_KEY must be set when DEBUG is off. For local development set DEBUG=true "
            "(the make targets do), which keeps a generated key in var/secret_key.")
    SECRET_KEY = _local_secret_key()

ALLOWED_HOSTS = env.list(
    "ALLOWED_HOSTS",
    default=["127.0.0.1", "localhost", "[::1]", "testserver"] if DEBUG else [],
)
# The platform's public address (HIT links). Unset: none is assumed; the admin's publish
# form shows the address its own request came to, and publishing asks for the setting.
PUBLIC_BASE_URL = env("PUBLIC_BASE_URL", default="").rstrip("/")
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[PUBLIC_BASE_URL] if PUBLIC_BASE_URL else [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "jobs",
    "registry",
    "tasks",
    "annotation",
    "leaderboard",
    "crowd",
    "replay",  # the experiment (manage.py replay); no models
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "core.middleware.text_charset_only",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.QueryCeilingMiddleware",  # after the static files, before the first query
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "dynabench.urls"
WSGI_APPLICATION = "dynabench.wsgi.application"
ASGI_APPLICATION = "dynabench.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets readers run beside one writer; IMMEDIATE takes the write lock at
    # BEGIN so concurrent writers queue instead of failing to upgrade a lock.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
else:
    DATABASES["default"].setdefault("CONN_HEALTH_CHECKS", True)
# Persistent connections, SQLite included: opening one costs the connect and the
# PRAGMAs, and closing the last SQLite connection checkpoints the WAL: a good share
# of a create-example call when done per request.
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("CONN_MAX_AGE", default=60))
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


# --- Celery ---------------------------------------------------------------
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="")
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", default="")
# Embedded mode: no broker configured, tasks run in-process.
EMBEDDED_MODE = not CELERY_BROKER_URL
CELERY_TASK_ALWAYS_EAGER = EMBEDDED_MODE
CELERY_TASK_EAGER_PROPAGATES = EMBEDDED_MODE
CELERY_TASK_STORE_EAGER_RESULT = False
# Task and queue names: core.celery_names (tests/core/test_celery_names.py checks that
# every route and beat entry names a registered task, and every task has its route).
CELERY_TASK_DEFAULT_QUEUE = celery_names.DEFAULT_QUEUE
CELERY_TASK_ROUTES = {
    celery_names.HEALTH_CHECK: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.HEALTH_CHECK_JOB: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.PRUNE_IDEMPOTENCY_KEYS: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.REFIT_RELIABILITY: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.REFIT_DUE_RELIABILITY: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.RECONCILE_COUNTS: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.EXPORT_EXAMPLES: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.PREDICT: {"queue": celery_names.INFERENCE_QUEUE},
    celery_names.EXPLAIN: {"queue": celery_names.EXPLAIN_QUEUE},
    celery_names.LOAD_MODELS: {"queue": celery_names.INFERENCE_QUEUE},
    celery_names.TRAIN_MODEL: {"queue": celery_names.TRAINING_QUEUE},
    celery_names.EVALUATE_MODEL: {"queue": celery_names.TRAINING_QUEUE},
    celery_names.CHECK_SUBMISSION: {"queue": celery_names.TRAINING_QUEUE},
    celery_names.RELEASE_DATASET: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.SWEEP_STALE_JOBS: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.CROWD_SYNC: {"queue": celery_names.DEFAULT_QUEUE},
    celery_names.PAY_BONUSES: {"queue": celery_names.DEFAULT_QUEUE},
}
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_TRACK_STARTED = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery closes the worker's database connection around every task unless told to
# reuse it; a PostgreSQL reconnect can cost more than a small task.
CELERY_DB_REUSE_MAX = env.int("CELERY_DB_REUSE_MAX", default=100)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Where the inference worker pushes each answer for the web request waiting on it
# (one Redis list per call, read with BLPOP): one round trip, where waiting through
# Celery's result backend costs a subscribe, a read and an unsubscribe per call
# (bench/annotation.py). Defaults to the result backend (or broker) when that is
# Redis; empty means "wait through the result backend".
_redis_urls = [u for u in (CELERY_RESULT_BACKEND, CELERY_BROKER_URL) if u.startswith(("redis://", "rediss://"))]
INFERENCE_REPLY_URL = env("INFERENCE_REPLY_URL", default=_redis_urls[0] if _redis_urls else "")
CELERY_RESULT_EXPIRES = 3600
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE = {
    "prune-idempotency-keys": {"task": celery_names.PRUNE_IDEMPOTENCY_KEYS, "schedule": 3600.0},
    "sweep-stale-jobs": {"task": celery_names.SWEEP_STALE_JOBS, "schedule": 60.0},
    "mturk-sync": {"task": celery_names.CROWD_SYNC, "schedule": 300.0},
    "mturk-pay-bonuses": {"task": celery_names.PAY_BONUSES, "schedule": 600.0},
    "refit-reliability": {"task": celery_names.REFIT_DUE_RELIABILITY,
                          "schedule": float(env.int("RELIABILITY_REFIT_SECONDS", default=600))},
    # The pages' counters are kept by every write; this recount repairs what went around
    # the services (annotation.counters). It reads every row: daily by default.
    "reconcile-counts": {"task": celery_names.RECONCILE_COUNTS,
                         "schedule": float(env.int("COUNTS_RECONCILE_SECONDS", default=86400))},
}
# Adaptive validation (annotation.reliability): a task's validator reliability
# model is refitted after this many new counted votes (and by beat, above); a validator
# whose estimate rests on at least RELIABILITY_KNOWN_VOTES votes is "known" to the
# validation queue, which serves known validators the examples closest to a decision.
RELIABILITY_REFIT_VOTES = env.int("RELIABILITY_REFIT_VOTES", default=200)
RELIABILITY_KNOWN_VOTES = env.int("RELIABILITY_KNOWN_VOTES", default=10)
# Jobs (training, evaluation): a running job whose worker has not reported for
# JOB_STALE_SECONDS is taken as lost; the sweeper queues it again until it has been
# started JOB_MAX_ATTEMPTS times, then fails it. Training reports at least every
# 1% of its steps, so the default leaves a wide margin on these CPUs.
JOB_STALE_SECONDS = env.int("JOB_STALE_SECONDS", default=600)
JOB_MAX_ATTEMPTS = env.int("JOB_MAX_ATTEMPTS", default=2)
# Embedded mode has no sweeper: when a web process starts, a job still "running" that
# has not reported for this long ran in a process that stopped (Ctrl-C during `make
# run`); it is queued again and run here.
EMBEDDED_JOB_STALE_SECONDS = env.int("EMBEDDED_JOB_STALE_SECONDS", default=60)
# Embedded mode runs jobs on a background thread of the web process; inline (in the
# caller) is for tests and one-shot commands.
JOBS_RUN_INLINE = env.bool("JOBS_RUN_INLINE", default=False)
# An upper bound on the optimizer steps of any one training job (0: none), so a typo in
# epochs cannot hold the shared training worker (submission checks wait there too) for
# a day.
TRAINING_MAX_STEPS = env.int("TRAINING_MAX_STEPS", default=10_000) or None
# Seconds one evaluation job may score for (checked after every batch); past it the
# job fails with a readable error, its partial evaluations kept.
EVALUATION_TIME_LIMIT = env.int("EVALUATION_TIME_LIMIT", default=3 * 3600)


def _at_least(name: str, low, cast):
    """The setting ``name`` read with ``cast``; a value below ``low`` stops the start
    with a message that names the setting, rather than failing later in a request."""
    value = cast(name)
    if value < low:
        raise ImproperlyConfigured(f"{name} must be at least {low}; it is {value}.")
    return value


# The time budget (minutes) of `make run`'s QA target on SQuAD (leaderboard.demo): it trains
# until its epochs are done or this much time has passed, and keeps what it reached
# (bench/qa_training.py measures what each budget reaches on a machine like this).
DYNABENCH_QA_TRAINING_MINUTES = _at_least("DYNABENCH_QA_TRAINING_MINUTES", 1,
                                          lambda n: env.int(n, default=30))
# An evaluation's throughput is the median of this many timed passes at batch 32: the
# scoring pass, then passes over a sample of the test set (the board shows their spread).
EVALUATION_TIMED_PASSES = _at_least("EVALUATION_TIMED_PASSES", 1, lambda n: env.int(n, default=5))

# Seconds a web request waits for an inference result before answering 503.
INFERENCE_TIMEOUT = env.float("INFERENCE_TIMEOUT", default=30.0)
# Seconds any one database statement of a web request (pages, API, admin) may run: past
# it the database stops the statement and the request answers 503 (code query_timeout,
# Retry-After), so a slow query cannot hold a web worker (core.query_ceiling). Celery
# workers, the embedded job thread and management commands are not limited. 0: no limit.
REQUEST_QUERY_TIMEOUT = _at_least("REQUEST_QUERY_TIMEOUT", 0, lambda n: env.float(n, default=30.0))
# How long an example the validation queue served stays the validator's to answer.
VALIDATION_CLAIM_SECONDS = env.int("VALIDATION_CLAIM_SECONDS", default=30 * 60)
# A site account's validation decisions count only once the account is this old (seconds):
# sign-ups made in bulk cannot vote at once. MTurk workers of a validation batch and the
# task's researchers do not wait.
VALIDATOR_MIN_ACCOUNT_AGE = env.int("VALIDATOR_MIN_ACCOUNT_AGE", default=24 * 3600)

# Gold items stay secret (annotation.record, annotation.gold). A validator's record on
# checked items (what decides trust and the stop after failed checks, and what they are
# told of it) moves only after every CHECKED_RECORD_STEP decisions on a task, so that no
# change in it points at one item; the agreement is shown to them only over at least
# CHECKED_AGREEMENT_MIN_ANSWERS answers on checked items.
CHECKED_RECORD_STEP = _at_least("CHECKED_RECORD_STEP", 1, lambda n: env.int(n, default=20))
CHECKED_AGREEMENT_MIN_ANSWERS = _at_least("CHECKED_AGREEMENT_MIN_ANSWERS", 1, lambda n: env.int(n, default=10))
# The key of the hashes that addresses are kept as (accounts seen at one address count as
# one person when validating). Changing it forgets which accounts share an address, so it
# is its own setting: rotating SECRET_KEY keeps every same-person link. Required when
# DEBUG is off (as SECRET_KEY); with DEBUG on, a key generated once into var/.
ADDRESS_HASH_KEY = env.str("ADDRESS_HASH_KEY", default="")
if not ADDRESS_HASH_KEY:
    if DEBUG:
        ADDRESS_HASH_KEY = _local_secret_key("address_hash_key")
    elif _code_only_command:
        ADDRESS_HASH_KEY = secrets.token_urlsafe(64)
    else:
        raise ImproperlyConfigured(
            "ADDRESS_HASH_KEY must be set when DEBUG is off: the key of the hashes that accounts' addresses are "
            "kept as (the same-person check), kept apart from SECRET_KEY so that rotating SECRET_KEY keeps them. "
            "A deployment that ran without it hashed with its SECRET_KEY: set ADDRESS_HASH_KEY to that value to "
            "keep the links made so far; a new deployment sets a fresh random value.")
# Dynamic batching (annotation.batching), in the embedded model thread and in the
# inference worker: predictions waiting while a pass runs, or arriving within this
# window after the first, share the next forward pass, up to this many examples.
# A window of 0 batches as much under load (the requests that arrive during a pass)
# and answers single requests sooner than a window of a few ms (a sleeping model
# thread wakes late: it must win the GIL back); bench/load.py's --window-ms compares.
INFERENCE_BATCH_WINDOW_MS = _at_least("INFERENCE_BATCH_WINDOW_MS", 0, lambda n: env.float(n, default=0.0))
INFERENCE_MAX_BATCH = _at_least("INFERENCE_MAX_BATCH", 1, lambda n: env.int(n, default=32))
# A prediction for a model that is still loading waits this long for it, then gets a
# 503 "warming up" (code warming_up, Retry-After) instead of a long wait. The open
# rounds' target models load when the web process or the worker starts.
INFERENCE_WARMUP_WAIT = env.float("INFERENCE_WARMUP_WAIT", default=3.0)
# Explanations: the integration-gradient step counts a request may ask for (a small
# set, so the cache of explanations is not defeated by alternating values).
EXPLANATION_STEPS = (5, 10, 20, 50)
# Explanations give way to predictions: an explanation runs its integration in
# passes of this many steps, and before each pass waits (up to this long) while the
# process's model thread has predictions queued or running.
EXPLANATION_PASS_STEPS = _at_least("EXPLANATION_PASS_STEPS", 1, lambda n: env.int(n, default=10))
EXPLANATION_YIELD_MS = _at_least("EXPLANATION_YIELD_MS", 0, lambda n: env.float(n, default=200.0))
# Explanations waiting or running: per web process in embedded mode, across every web
# process in service mode (core.slots); one more gets a 503 with Retry-After at once
# (near saturation they would otherwise time out one by one).
EXPLANATION_QUEUE_MAX = _at_least("EXPLANATION_QUEUE_MAX", 1, lambda n: env.int(n, default=8))

# --- Cache ------------------------------------------------------------------
# Throttles and sign-in lockouts count on the default cache, so every web process
# must share it: in service mode it defaults to Redis (the reply-list server);
# embedded mode keeps it in process memory.
# A Redis cache signs what it stores (core/cache.py): a value someone else wrote into
# Redis is never unpickled. Replies from inference workers are signed the same way
# (core/replies.py). REDIS_SIGNING_KEY keys both (every web process and worker needs
# the same one); unset, a key derived from SECRET_KEY.
REDIS_SIGNING_KEY = env.str("REDIS_SIGNING_KEY", default="")
_UNSIGNED_REDIS_CACHE = "django.core.cache.backends.redis.RedisCache"
if env("CACHE_URL", default=""):
    CACHES = {"default": env.cache("CACHE_URL")}
    if CACHES["default"]["BACKEND"] == _UNSIGNED_REDIS_CACHE:
        CACHES["default"]["BACKEND"] = "core.cache.SignedRedisCache"
elif INFERENCE_REPLY_URL:
    CACHES = {"default": {"BACKEND": "core.cache.SignedRedisCache",
                          "LOCATION": INFERENCE_REPLY_URL, "KEY_PREFIX": "dynabench"}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# --- REST API -------------------------------------------------------------
# Largest JSON body the API reads (413 above it); forms and uploads are bounded by
# DATA_UPLOAD_MAX_MEMORY_SIZE and FILE_UPLOAD_MAX_MEMORY_SIZE.
API_MAX_BODY_BYTES = env.int("API_MAX_BODY_BYTES", default=1024 * 1024)
REST_FRAMEWORK = {
    # The API reads JSON (415 otherwise); an endpoint that takes forms or files says so.
    "DEFAULT_PARSER_CLASSES": ["core.parsers.BoundedJSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: failed token auth then answers 401 with WWW-Authenticate.
        "core.authentication.StrictTokenAuthentication",
        "annotation.tokens.SessionTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticatedOrReadOnly"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.Pagination",
    "PAGE_SIZE": 25,
    "DEFAULT_SCHEMA_CLASS": "core.schema.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    # Proxies in front of the web processes whose X-Forwarded-For may be trusted:
    # 0 trusts none, so throttles key on the connection's address and a client cannot
    # pick its own by sending the header. Required when DEBUG is off (below).
    "NUM_PROXIES": _at_least("NUM_PROXIES", 0, lambda n: env.int(n, default=0)),
    "DEFAULT_THROTTLE_CLASSES": [
        # DRF's, counting anonymous clients by address_key (IPv6 by its /64).
        "core.ratelimit.AnonRateThrottle",
        "core.ratelimit.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env("THROTTLE_ANON", default="120/min"),
        "user": env("THROTTLE_USER", default="600/min"),
        "examples": env("THROTTLE_EXAMPLES", default="60/min"),
        "explanations": env("THROTTLE_EXPLANATIONS", default="30/min"),
        "validations": env("THROTTLE_VALIDATIONS", default="120/min"),
    },
}
# Behind a proxy, NUM_PROXIES=0 makes the proxy's address every client's: one person's
# failed sign-ins lock everyone out, and every account counts as one person. Nothing at
# start can see a proxy, so a deployment says how many there are.
if not DEBUG and not _code_only_command:
    if "NUM_PROXIES" not in env.ENVIRON:
        raise ImproperlyConfigured(
            "NUM_PROXIES must be set when DEBUG is off: the number of proxies in front of the web processes that "
            "set X-Forwarded-For (1 for one nginx or load balancer, 2 for a CDN in front of it), or 0 when "
            "clients connect to the web processes directly. Left at 0 behind a proxy, every client has the "
            "proxy's address: limits and the same-person check see one client.")
SPECTACULAR_SETTINGS = {
    "TITLE": "Dynabench API",
    "DESCRIPTION": "Dynamic adversarial data collection and benchmarking.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,

    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI is served by us (no CDN), its script as a file (strict CSP).
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Several models have a ``status``; each choice set gets its own name.
    "ENUM_NAME_OVERRIDES": {
        "RoundStatusEnum": "tasks.models.Round.Status",
        "JobStatusEnum": "jobs.models.Job.Status",
        "ModelVersionStatusEnum": "registry.models.ModelVersion.Status",
        "ExampleValidationStatusEnum": "annotation.models.Example.ValidationStatus",
    },
}

# --- Auth -----------------------------------------------------------------
AUTHENTICATION_BACKENDS = ["core.backends.PasswordBackend"]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"
# E-mail (password reset, the sign-up confirmation link): EMAIL_URL in django-environ's
# form, e.g. smtp+tls://user:password@smtp.example.org:587; the default prints each
# message on the web process's console.
vars().update(env.email_url("EMAIL_URL", default="consolemail://"))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Dynabench <noreply@localhost>")
# How long a password-reset or e-mail confirmation link works (seconds).
PASSWORD_RESET_TIMEOUT = env.int("PASSWORD_RESET_TIMEOUT", default=3 * 24 * 3600)
# Sign-in lockout (the page and /api/auth/token/): 429 after this many failures in
# the window, per account and per address; sign-ups per address per hour.
LOGIN_FAILURES_PER_ACCOUNT = env.int("LOGIN_FAILURES_PER_ACCOUNT", default=5)
LOGIN_FAILURES_PER_ADDRESS = env.int("LOGIN_FAILURES_PER_ADDRESS", default=20)
LOGIN_FAILURE_WINDOW = env.int("LOGIN_FAILURE_WINDOW", default=15 * 60)
SIGNUPS_PER_ADDRESS = env.int("SIGNUPS_PER_ADDRESS", default=10)
SIGNUP_WINDOW = env.int("SIGNUP_WINDOW", default=3600)
# An API token (POST /api/auth/token/) works this many days from when it was made, then
# answers 401 "expired"; DELETE /api/auth/token/ revokes it sooner.
API_TOKEN_TTL_DAYS = _at_least("API_TOKEN_TTL_DAYS", 1, lambda n: env.int(n, default=30))
# A session token works at most this long after its annotation session began.
ANNOTATION_SESSION_MAX_AGE = env.int("ANNOTATION_SESSION_MAX_AGE", default=12 * 3600)
# How long an Idempotency-Key's first answer is kept for retries.
IDEMPOTENCY_KEY_TTL = env.int("IDEMPOTENCY_KEY_TTL", default=24 * 3600)

# Accounts one e-mail inbox may confirm (annotation.accounts), however the address is
# spelled (core.inboxes folds case, +tags and Gmail's dots), deleted accounts included.
# A confirmed address is what lets a site account's votes count: one inbox, one voter.
ACCOUNTS_PER_INBOX = _at_least("ACCOUNTS_PER_INBOX", 1, lambda n: env.int(n, default=1))

# --- i18n / static --------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
# Serve files straight from the app folders while developing (no collectstatic).
WHITENOISE_AUTOREFRESH = DEBUG
# Files that jobs make (an export of examples), downloaded from the job's page by the task's
# researchers (jobs.files): a folder that the web and the workers share.
DYNABENCH_JOB_FILES_DIR = Path(env("DYNABENCH_JOB_FILES_DIR", default=str(VAR_DIR / "job-files")))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "job_files": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                  "OPTIONS": {"location": DYNABENCH_JOB_FILES_DIR,
                              "file_permissions_mode": 0o600, "directory_permissions_mode": 0o700}},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Security -------------------------------------------------------------
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# X-Forwarded-Proto says "https" only where a proxy in front sets it (and drops the
# client's own): trusted only when that is configured, else any client could claim it.
if env.bool("PROXY_SETS_FORWARDED_PROTO", default=REST_FRAMEWORK["NUM_PROXIES"] > 0):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
if not DEBUG:
    SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 365)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
    SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
# Pages are never framed, except those that opt in (the MTurk HIT pages).
MTURK_FRAME_ANCESTORS = ["https://workersandbox.mturk.com", "https://worker.mturk.com"]
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "object-src": [NONE],
        "base-uri": [SELF],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    }
}

# --- Dynabench ------------------------------------------------------------
# The public data sets (``manage.py fetch_data`` fills it): imports, real-data targets, replays, benches.
DYNABENCH_DATA_DIR = env("DYNABENCH_DATA_DIR", default=str(VAR_DIR / "data"))
DYNABENCH_MODELS_DIR = Path(env("DYNABENCH_MODELS_DIR", default=str(VAR_DIR / "models")))
# Where model artifacts, uploaded submissions and replay reports are kept (registry.artifacts):
# file:///path (a folder: DYNABENCH_MODELS_DIR, the default) or s3://bucket/prefix, read by
# every web and worker machine, each through its own local cache of verified downloads.
DYNABENCH_ARTIFACTS_URL = env("DYNABENCH_ARTIFACTS_URL", default="")
if DYNABENCH_ARTIFACTS_URL.startswith("file:"):
    _folder = Path(urllib.parse.unquote(urllib.parse.urlsplit(DYNABENCH_ARTIFACTS_URL).path))
    if "DYNABENCH_MODELS_DIR" in os.environ and Path(os.environ["DYNABENCH_MODELS_DIR"]) != _folder:
        raise ImproperlyConfigured(
            f"DYNABENCH_ARTIFACTS_URL ({DYNABENCH_ARTIFACTS_URL}) and DYNABENCH_MODELS_DIR "
            f"({os.environ['DYNABENCH_MODELS_DIR']}) name different folders; set one of them.")
    DYNABENCH_MODELS_DIR = _folder
    DYNABENCH_ARTIFACTS_URL = ""
# With s3://: this machine's cache of downloaded artifacts (default <DYNABENCH_MODELS_DIR>/.store-cache),
# another S3-compatible endpoint (MinIO, Ceph; boto3 reads credentials as usual), and how long
# a connection may take before the store counts as unreachable (503 on the web, a job retries).
DYNABENCH_ARTIFACTS_CACHE = env("DYNABENCH_ARTIFACTS_CACHE", default="") or None
AWS_ENDPOINT_URL_S3 = env("AWS_ENDPOINT_URL_S3", default="")
ARTIFACTS_CONNECT_TIMEOUT = env.float("ARTIFACTS_CONNECT_TIMEOUT", default=5.0)
DYNABENCH_BACKBONE = env("DYNABENCH_BACKBONE", default="all-MiniLM-L6-v2")
# Bounds on a file of contexts uploaded to a round (admin and API; 413 above them).
CONTEXT_UPLOAD_MAX_BYTES = env.int("CONTEXT_UPLOAD_MAX_BYTES", default=20 * 1024 * 1024)
CONTEXT_UPLOAD_MAX_ROWS = env.int("CONTEXT_UPLOAD_MAX_ROWS", default=50_000)
# Model submissions: the largest zip taken (413 above), and how many a user may
# send per task per day (researchers of the task are exempt; 429 above).
# SUBMISSION_MAX_BYTES is enforced while the upload is read (core.uploads): the
# byte after the limit is never stored.
SUBMISSION_MAX_BYTES = env.int("SUBMISSION_MAX_BYTES", default=600 * 1000 * 1000)
SUBMISSIONS_PER_DAY = env.int("SUBMISSIONS_PER_DAY", default=3)
# Check jobs one user may have queued or running at once (every task together): they
# share the training worker.
SUBMISSION_CHECKS_QUEUED = _at_least("SUBMISSION_CHECKS_QUEUED", 1, lambda n: env.int(n, default=2))
# A submitted model is unpacked, loaded, run and saved by a worker job, in a child
# process (ml.sandbox) with at most this much address space (MiB) and wall time
# (seconds), and this many torch threads. Over either limit the submission is
# refused with the reason; the worker carries on. The memory default leaves room
# for the largest weights the archive limits let through: torch takes a good part
# of the address space by itself, and loading a model more than its weights again.
SUBMISSION_CHECK_MEMORY_MB = _at_least("SUBMISSION_CHECK_MEMORY_MB", 256,
                                       lambda n: env.int(n, default=6144))
SUBMISSION_CHECK_SECONDS = _at_least("SUBMISSION_CHECK_SECONDS", 1, lambda n: env.float(n, default=300.0))
SUBMISSION_CHECK_THREADS = _at_least("SUBMISSION_CHECK_THREADS", 1, lambda n: env.int(n, default=2))

# The sandbox that child process runs in: bubblewrap (Debian's package bubblewrap), named
# by its program on PATH or its path. Inside it the check has no network, a read-only view
# of Python and the ml code, nothing of var/ or the data sets, and none of this
# environment's variables. Where it is missing or cannot start, submitted models are not
# checked at all (the job fails and says so). "none" checks them unconfined, with this
# process's rights and network: only a development checkout may (DEBUG on); with DEBUG
# off the settings refuse it.
SUBMISSION_SANDBOX = env.str("SUBMISSION_SANDBOX", default="bwrap").strip()
if SUBMISSION_SANDBOX.lower() == "none" and not DEBUG:
    raise ImproperlyConfigured(
        "SUBMISSION_SANDBOX=none checks uploaded models without a sandbox, with this server's rights and network; "
        "it is allowed only with DEBUG on (a development checkout). Install bubblewrap (apt-get install "
        "bubblewrap) and leave SUBMISSION_SANDBOX unset, or set it to bwrap's path.")
# Data releases (leaderboard.releases): the key of the annotator pseudonyms a release
# carries (a keyed hash of the account; never the account, username or MTurk id). Its
# own setting, like ADDRESS_HASH_KEY: rotating SECRET_KEY keeps every published
# pseudonym, so one annotator has one id across a deployment's releases. With DEBUG
# on, a key generated once into var/; with DEBUG off and none set, making a release is
# refused with this reason (the site itself runs without it).
RELEASE_PSEUDONYM_KEY = env.str("RELEASE_PSEUDONYM_KEY", default="")
if not RELEASE_PSEUDONYM_KEY and DEBUG:
    RELEASE_PSEUDONYM_KEY = _local_secret_key("release_pseudonym_key")
# Pushing a release to the Hugging Face Hub (manage.py release_dataset --push): a write
# token, and the Hub's address (another for a private Hub). No token: nothing is pushed.
HF_TOKEN = env.str("HF_TOKEN", default="")
HF_ENDPOINT = env.str("HF_ENDPOINT", default="https://huggingface.co").rstrip("/")
# The public browser of a task's verified examples: rows a page, and how many rows one
# text search reads at most before it answers with what it found and where to go on.
PUBLIC_EXAMPLES_PAGE = _at_least("PUBLIC_EXAMPLES_PAGE", 1, lambda n: env.int(n, default=25))
PUBLIC_EXAMPLES_SEARCH_WINDOW = _at_least("PUBLIC_EXAMPLES_SEARCH_WINDOW", 1,
                                          lambda n: env.int(n, default=2000))
# A leaderboard is computed once per state of its task, weights and audience, and kept
# in the cache this long (0: never cached). Evaluations and models drop it at once when
# they change; the limit bounds what nothing signals (e.g. the baseline's training data).
LEADERBOARD_CACHE_SECONDS = env.int("LEADERBOARD_CACHE_SECONDS", default=60)

# Models behind endpoints (registry.endpoints, ml.endpoints.network).
# The keys an endpoint may use, owned by the operator: a JSON object mapping a key's
# name (what a researcher picks) to the environment variable holding it and the hosts
# it may be sent to, e.g. {"openai": {"env": "OPENAI_API_KEY", "hosts": ["api.openai.com"]}}.
# Nothing else is ever read as a key: no other variable, no Django setting, and none of
# the platform's own secrets (refused here).
_OWN_SECRETS = {"SECRET_KEY", "SECRET_KEY_FALLBACKS", "ADDRESS_HASH_KEY", "REDIS_SIGNING_KEY",
                "RELEASE_PSEUDONYM_KEY", "HF_TOKEN", "PROLIFIC_TOKEN", "DATABASE_URL", "CELERY_BROKER_URL",
                "CELERY_RESULT_BACKEND", "CACHE_URL", "INFERENCE_REPLY_URL", "EMAIL_URL",
                "DJANGO_SUPERUSER_PASSWORD"}


def _endpoint_secrets(raw: str) -> dict:
    problem = "ENDPOINT_SECRETS must be a JSON object {name: {\"env\": VARIABLE, \"hosts\": [host, ...]}}"
    try:
        found = json.loads(raw or "{}")
    except ValueError:
        raise ImproperlyConfigured(f"{problem}; it is not JSON.") from None
    if not isinstance(found, dict):
        raise ImproperlyConfigured(f"{problem}.")
    keys = {}
    for name, entry in found.items():
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
            raise ImproperlyConfigured(f"{problem}; the name {name!r} is not letters, digits, '_', '.', '-'.")
        if not isinstance(entry, dict) or set(entry) != {"env", "hosts"}:
            raise ImproperlyConfigured(f"{problem}; {name!r} needs exactly 'env' and 'hosts'.")
        variable, hosts = entry["env"], entry["hosts"]
        if not isinstance(variable, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,99}", variable):
            raise ImproperlyConfigured(f"{problem}; {name!r}: 'env' must name an environment variable.")
        if variable in _OWN_SECRETS or variable.startswith(("AWS_", "MTURK_", "PROLIFIC_")):
            raise ImproperlyConfigured(f"ENDPOINT_SECRETS: {name!r} names {variable}, one of the platform's own "
                                       "secrets; an endpoint's key has a variable of its own.")
        if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) for h in hosts):
            raise ImproperlyConfigured(f"{problem}; {name!r}: 'hosts' must be a list of host names.")
        for host in hosts:
            try:
                parse_host(host)
            except ValueError as exc:
                raise ImproperlyConfigured(f"ENDPOINT_SECRETS: {name!r}: {exc}.") from None
        keys[name] = {"env": variable, "hosts": tuple(hosts)}
    return keys


ENDPOINT_SECRETS = _endpoint_secrets(env.str("ENDPOINT_SECRETS", default=""))
# Hosts whose addresses an endpoint may have although they are internal (loopback,
# private, ...), and which may be reached over plain http with DEBUG off: "host" (any
# port) or "host:port", comma-separated. Empty: none. The make targets for a
# development checkout set 127.0.0.1 (a model server on this machine).
ENDPOINT_ALLOWED_HOSTS = env.list("ENDPOINT_ALLOWED_HOSTS", default=[])
for _host in ENDPOINT_ALLOWED_HOSTS:
    try:
        parse_host(_host)
    except ValueError as _exc:
        raise ImproperlyConfigured(f"ENDPOINT_ALLOWED_HOSTS: {_exc}.") from None
# What an endpoint's calls may cost per round, and outside rounds (evaluations and
# health checks) in all, where no superuser has set its budget.
ENDPOINT_DEFAULT_BUDGET = Decimal(env.str("ENDPOINT_DEFAULT_BUDGET", default="10.00"))
if not ENDPOINT_DEFAULT_BUDGET.is_finite() or ENDPOINT_DEFAULT_BUDGET < 0:
    raise ImproperlyConfigured("ENDPOINT_DEFAULT_BUDGET must be a number of at least 0.")

# Amazon Mechanical Turk (credentials come from the standard AWS variables).
MTURK_SANDBOX = env.bool("MTURK_SANDBOX", default=True)
# Empty: the sandbox or live requester endpoint, by MTURK_SANDBOX (crowd.mturk).
MTURK_ENDPOINT_URL = env("MTURK_ENDPOINT_URL", default="")
MTURK_REGION = env("MTURK_REGION", default="us-east-1")
# Attempts per MTurk call, the first included (boto3's standard retry mode: throttling, 5xx and lost
# connections are retried with backoff, with the same UniqueRequestToken).
MTURK_MAX_ATTEMPTS = env.int("MTURK_MAX_ATTEMPTS", default=4)

# Prolific (crowd.prolific): the API's base address and the researcher's API token (from the
# environment only; it carries full permission on the account and is never logged).
PROLIFIC_API_URL = env("PROLIFIC_API_URL", default="https://api.prolific.com").rstrip("/")
PROLIFIC_TOKEN = env("PROLIFIC_TOKEN", default="")
# Prolific's fees, as a share of each reward and bonus: an estimate for what a batch may cost
# before Prolific answers (a bonus's set-up answer then gives its real fees). Prolific
# advertises a 33.3% service fee (plus VAT where it applies): check your account's rate.
PROLIFIC_FEE_RATE = Decimal(env.str("PROLIFIC_FEE_RATE", default="0.333"))
# Prolific's minimum pay per hour, by study currency (refused before any call). Today's
# values (Prolific's researcher help, "Prolific's payment principles"): GBP 6.00, USD 8.00.
PROLIFIC_MIN_HOURLY_REWARD = {currency: Decimal(value) for currency, value in env.dict(
    "PROLIFIC_MIN_HOURLY_REWARD", default={"GBP": "6.00", "USD": "8.00"}).items()}
# Optional: a Prolific participant group used as the studies' blocklist (a superuser's block
# adds the participant to it). Empty: blocks hold on our pages only.
PROLIFIC_BLOCKLIST_GROUP_ID = env("PROLIFIC_BLOCKLIST_GROUP_ID", default="")
# Optional: the Prolific workspace in which each task gets two participant groups of ours
# (crowd.prolific_groups): its blocked participants (every study of the task's blocklist)
# and those who passed its onboarding (the allowlist of a study that requires it). Empty:
# task blocks and the onboarding a study requires hold on our pages only.
PROLIFIC_WORKSPACE_ID = env("PROLIFIC_WORKSPACE_ID", default="")
# A bonus whose pay call's answer was lost (sent, unconfirmed) that Prolific's records do not
# show as paid after this many hours is listed for a person to settle (the admin's filter).
PROLIFIC_UNCONFIRMED_AFTER_HOURS = env.int("PROLIFIC_UNCONFIRMED_AFTER_HOURS", default=2)
# New assignments one address may open on the HIT page per window (a worker opens
# one per HIT; made-up ids from one machine are capped).
# Tries before a bonus that MTurk keeps refusing with a request error ends as gave_up.
BONUS_MAX_ATTEMPTS = env.int("BONUS_MAX_ATTEMPTS", default=8)

# A bonus held for a researcher's decision (a flagged or escalated example: crowd.bonuses)
# never settles by a deadline; the bonus run reminds each task's researchers (and the
# site's admins) of what waits on them, at most once per this many hours.
BONUS_DECISION_REMINDER_HOURS = _at_least("BONUS_DECISION_REMINDER_HOURS", 1,
                                          lambda n: env.int(n, default=24))
# Bounds on what one batch may offer, in USD: a typo (50.00 for 0.50) cannot reach MTurk.
CROWD_MAX_REWARD = Decimal(env.str("CROWD_MAX_REWARD", default="5.00"))  # per assignment
CROWD_MAX_BONUS_PER_EXAMPLE = Decimal(env.str("CROWD_MAX_BONUS_PER_EXAMPLE", default="2.00"))
# The live-site budget, in USD, of a task whose superusers set none (crowd.budgets): 0 refuses
# every live batch until one is set. In the sandbox (no real money) such a task has no budget.
CROWD_DEFAULT_TASK_BUDGET = Decimal(env.str("CROWD_DEFAULT_TASK_BUDGET", default="0.00"))
# A batch that may cost more than this (USD) waits for a superuser's approval, another
# person's than its creator's, before anything is posted.
CROWD_APPROVAL_THRESHOLD = Decimal(env.str("CROWD_APPROVAL_THRESHOLD", default="100.00"))
# The pay floor, in USD per hour (the US federal minimum by default; 0: none). The publish
# form estimates a new batch's effective hourly pay from the task's earlier batches and
# warns below it; with DYNABENCH_REFUSE_BELOW_MIN_PAY the service refuses such a batch.
DYNABENCH_MIN_HOURLY_PAY = Decimal(env.str("DYNABENCH_MIN_HOURLY_PAY", default="7.25"))
DYNABENCH_REFUSE_BELOW_MIN_PAY = env.bool("DYNABENCH_REFUSE_BELOW_MIN_PAY", default=False)
MTURK_ARRIVALS_PER_ADDRESS = env.int("MTURK_ARRIVALS_PER_ADDRESS", default=30)
MTURK_ARRIVAL_WINDOW = env.int("MTURK_ARRIVAL_WINDOW", default=3600)

# Arrivals the platform has not confirmed as the worker's (crowd.assignments): each holds a
# place on its HIT or study for at most this many seconds (crowd_limits.unconfirmed_per_hit
# bounds how many at once), so made-up ids cannot keep real workers out for longer.
CROWD_UNCONFIRMED_HOLD_SECONDS = env.int("CROWD_UNCONFIRMED_HOLD_SECONDS", default=1800)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # Training progress goes to Job rows and command output; its step log is opt-in.
        "ml": {"level": env("ML_LOG_LEVEL", default="WARNING")},
    },
}
