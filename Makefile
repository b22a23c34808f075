# Conduit. `make run` serves the console and the router; `make test` runs the tests.
# Needs only make and Python 3.12+ (scripts/find-python finds one); everything else goes into .venv.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-installed
DEV_STAMP := $(VENV)/.requirements-dev-installed
VAR := $(or $(CONDUIT_VAR_DIR),var)
# Where receivers' secret files are (CONDUIT_SECRETS_DIR, as the settings read it).
SECRETS := $(or $(CONDUIT_SECRETS_DIR),$(VAR)/secrets)
# Set on the command line (make run HOST=0.0.0.0 PORT=9000), not from the environment: some
# shells keep the machine's name in HOST.
HOST := 127.0.0.1
PORT := 8000
OPERATOR := operator
DEMO_CONFIG := demo/conduit.yaml
LOCAL_POSTGRES := postgres://postgres@127.0.0.1:5432/test
# Extra pytest arguments, e.g. make test PYTEST_ARGS='-k r15 -x'
PYTEST_ARGS ?=

# Parallel mutants of make mutate (default: one per CPU), and which mutants it runs: a glob of
# mutant names, e.g. MUTANTS='worklife.waits.*' for one module (default: every mutant).
MUTATE_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
MUTANTS ?=

# uv writes the locks (make lock), from a virtualenv of its own.
UV_VERSION := 0.13.9
LOCK_VENV := $(VAR)/lock-venv
LOCK_FLAGS := --universal --python-version 3.12 --generate-hashes --no-emit-index-url \
	--no-emit-find-links --custom-compile-command "make lock" --quiet

.PHONY: help run test test-postgres lint venv mutate editor-bundle lock

help: ## Show the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/^([a-z-]+):.*## /  make \1\t/' | expand -t 24

# The virtualenv is (re)built when it is missing, broken, or older than requirements.txt.
# requirements.txt and requirements-dev.txt are locks (every package pinned, with its hashes),
# written by make lock from requirements.in and requirements-dev.in.
$(STAMP): requirements.txt
	@if ! $(PY) -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then \
	    python=$$(scripts/find-python); \
	    echo "Creating $(VENV) with $$python"; \
	    rm -rf $(VENV); \
	    "$$python" -m venv $(VENV); \
	fi
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.txt
	@touch $@

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements-dev.txt
	@touch $@

venv: $(STAMP) ## Create or update .venv from requirements.txt.

lock: | $(VAR) ## Write requirements.txt and requirements-dev.txt (pins and hashes, Python 3.12+) from the .in files.
	@[ -x $(LOCK_VENV)/bin/uv ] || { python=$$(scripts/find-python); "$$python" -m venv $(LOCK_VENV); \
	    $(LOCK_VENV)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION); }
	$(LOCK_VENV)/bin/uv pip compile requirements.in $(LOCK_FLAGS) -o requirements.txt
	$(LOCK_VENV)/bin/uv pip compile requirements-dev.in $(LOCK_FLAGS) -o requirements-dev.txt

$(VAR):
	@mkdir -p -m 700 $@

run: $(STAMP) | $(VAR) ## Migrate, apply the demo configuration, create the operator login and the demo webhooks' secret, serve on HOST:PORT.
	@if [ -z "$${DATABASE_URL:-}" ] && [ ! -e $(VAR)/conduit.sqlite3 ]; then \
	    rm -f $(VAR)/demo.applied $(VAR)/operator-password; \
	fi
	$(PY) manage.py migrate --noinput
	@digest=$$($(PY) -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' $(DEMO_CONFIG)); \
	if [ "$$(cat $(VAR)/demo.applied 2>/dev/null)" != "$$digest" ]; then \
	    echo "Applying $(DEMO_CONFIG)"; \
	    $(PY) manage.py config apply $(DEMO_CONFIG); \
	    echo "$$digest" > $(VAR)/demo.applied; \
	fi
	@reset=; [ -s $(VAR)/operator-password ] || reset=--reset-password; \
	password=$$($(PY) manage.py operator create $(OPERATOR) --role admin $$reset); \
	if [ -n "$$password" ]; then \
	    (umask 077; printf '%s\n' "$$password" > $(VAR)/operator-password); \
	    chmod 600 $(VAR)/operator-password; \
	fi
	@# The demo receivers' secret is a file of the secrets directory, so every process reads it
	@# (serve, manage.py receivers test); CONDUIT_DEMO_HOOK_SECRET, when set, is written there.
	@mkdir -p -m 700 $(SECRETS); \
	if [ -n "$${CONDUIT_DEMO_HOOK_SECRET:-}" ]; then \
	    (umask 077; printf '%s\n' "$$CONDUIT_DEMO_HOOK_SECRET" > $(SECRETS)/demo-hook-secret); \
	elif [ ! -s $(SECRETS)/demo-hook-secret ]; then \
	    (umask 077; $(PY) -c 'import secrets; print(secrets.token_hex(32))' > $(SECRETS)/demo-hook-secret); \
	fi
	@# demo/send posts to the address served here.
	@(umask 077; printf 'http://%s:%s\n' "$$(case '$(HOST)' in 0.0.0.0|'') echo 127.0.0.1;; ::) echo '[::1]';; *:*) echo '[$(HOST)]';; *) echo '$(HOST)';; esac)" '$(PORT)' > $(VAR)/demo-url)
	@echo "Sign in at http://$(HOST):$(PORT)/ as $(OPERATOR) with the password in $(VAR)/operator-password"
	@echo "Send the demo's webhooks, signed with the secret in $(SECRETS)/demo-hook-secret: demo/send demo/deliveries/github/pr-opened.json"
	exec $(PY) manage.py serve --host $(HOST) --port $(PORT)

test: $(DEV_STAMP) | $(VAR) ## Run the tests on the embedded default database (SQLite under var/).
	DATABASE_URL= $(PY) -m pytest $(PYTEST_ARGS)

test-postgres: $(DEV_STAMP) | $(VAR) ## Run the tests on PostgreSQL (DATABASE_URL, default the local server).
	DATABASE_URL=$${DATABASE_URL:-$(LOCAL_POSTGRES)} $(PY) -m pytest $(PYTEST_ARGS)

mutate: $(DEV_STAMP) ## Mutation testing (mutmut) of the routing decision, settlement and failures, the Work lifecycle, waits and input, the causal limits (MUTANTS='worklife.waits.*': one module).
	rm -rf mutants
	DATABASE_URL= TEST_DATABASE_NAME=:memory: $(VENV)/bin/mutmut run --max-children $(MUTATE_JOBS) $(MUTANTS)
	$(VENV)/bin/mutmut results
	@$(VENV)/bin/mutmut export-cicd-stats >/dev/null
	@$(PY) -c 'import json; print("mutants: {total} in all, {killed} killed, {survived} survived, {no_tests} reached by no selected test, {timeout} timed out".format(**json.load(open("mutants/mutmut-cicd-stats.json"))))'

lint: $(DEV_STAMP) | $(VAR) ## ruff format --check, ruff check, manage.py check, makemigrations --check.
	$(PY) -m ruff format --check .
	$(PY) -m ruff check .
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run

editor-bundle: ## Rebuild the committed static/codemirror/editor.js from frontend/ (needs Node.js and npm; CI does not run it).
	cd frontend && npm ci && npm run build
