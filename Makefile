# The two commands of the README: `make run` and `make test`. Both create the virtualenv first.
# `make run` installs what serving needs; the test tools (the `dev` extra) only come with `make test`.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo $$p && break; done)
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
APP ?=

.PHONY: install install-dev run test check lint typecheck bench bench-tools bench-cpu bench-step \
	bench-targets bench-smoke screenshots clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "Python 3.11 or newer is needed" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(BIN)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(BIN)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(BIN)/.installed

install: $(BIN)/.installed

install-dev: $(BIN)/.installed-dev

# `make run APP=agent.demo:staffed_shop_app`: another app (`serve --app`); the staffed shop also prints a reviewer's link.
run: $(BIN)/.installed
	$(BIN)/durable-chat serve --host $(HOST) --port $(PORT) $(if $(APP),--app $(APP))

lint: $(BIN)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/.installed-dev
	$(BIN)/pyright

check: lint typecheck

# In parallel: one process per core, each test file's tests in one process (module fixtures start once).
test: check
	$(BIN)/python -m pytest -n auto --dist loadfile

# The page's screenshots in docs/screenshots/, taken by its browser tests (Chromium, a few minutes).
screenshots: $(BIN)/.installed-dev
	DURABLE_CHAT_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest -q tests/test_page.py \
		tests/test_page_trail.py tests/test_page_runs.py tests/test_page_threads.py tests/test_travel_page.py \
		tests/test_page_outputs.py tests/test_review_page.py tests/test_page_agents.py

# The benchmarks (bench/README.md); each writes its sections of docs/benchmarks.md on a full run, and
# takes PostgreSQL from $$DURABLE_CHAT_TEST_POSTGRES_URL. `bench` is the store's.
bench: $(BIN)/.installed-dev
	$(BIN)/python -m bench.store

# What bench.step needs besides the dev tools for its third column: pydantic-ai-harness. It pins an
# older pydantic-ai than ours, so it is installed WITHOUT its dependencies, for the benchmark only.
bench-tools: $(BIN)/.installed-dev
	$(BIN)/python -m pip install --quiet --no-deps pydantic-ai-harness

# Issue 14's targets, each in one command.
bench-cpu: $(BIN)/.installed-dev
	$(BIN)/python -m bench.cpu

bench-step: bench-tools
	$(BIN)/python -m bench.step

bench-targets: bench-cpu bench-step

# Every benchmark once, briefly, writing nothing: that each runs end to end (about 8 minutes; PostgreSQL needed).
bench-smoke: bench-tools
	$(BIN)/python -m bench.store --quick
	$(BIN)/python -m bench.step --quick
	$(BIN)/python -m bench.web --quick
	$(BIN)/python -m bench.files --quick --no-write
	$(BIN)/python -m bench.review --quick --no-write
	$(BIN)/python -m bench.storage --quick --no-write
	$(BIN)/python -m bench.delegation --quick --no-write
	$(BIN)/python -m bench.history --quick --no-write
	$(BIN)/python -m bench.purge --quick --no-write
	$(BIN)/python -m bench.cpu --quick
	$(BIN)/python -m bench.pool --users 20 --turns 2 --pools 10+20 30+0 --no-write
	$(BIN)/python -m bench.cpu_ab --rounds 1 --seconds 1 --alone 2

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
