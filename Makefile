# The two commands of the README: `make run` and `make test`. Both create the virtualenv first.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' && echo $$p && break; done)
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install run test check lint typecheck bench screenshots clean

$(BIN)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "Python 3.11 or newer is needed" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

run: $(BIN)/.installed
	$(BIN)/durable-chat serve --host $(HOST) --port $(PORT)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/.installed
	$(BIN)/pyright

check: lint typecheck

test: check
	$(BIN)/python -m pytest

# The page's screenshots in docs/screenshots/, taken by its browser tests (Chromium, a few minutes).
screenshots: $(BIN)/.installed
	DURABLE_CHAT_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest -q tests/test_page.py \
		tests/test_page_trail.py tests/test_page_runs.py tests/test_page_threads.py

bench: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.store

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
