# `make run` and `make test` each create the virtualenv they need (.venv) on first use:
# `make run` installs what running undoproxy needs, `make test` adds the test extra on top.
# A stamp per install (named by pyproject.toml's checksum) makes the next call skip it.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
SUM    := $(shell cksum pyproject.toml | cut -d' ' -f1)
RUN_STAMP  := $(VENV)/.installed-run-$(SUM)
TEST_STAMP := $(VENV)/.installed-test-$(SUM)
# pip's own progress stays visible; the version check would only add a line of noise.
PIP := $(BIN)/python -m pip --disable-pip-version-check
# Two workers on this project's 2-core machines; each test file stays on one worker
# (--dist loadfile; tests/conftest.py keeps the Docker files together), so a file's shared
# `undoproxy run` starts once.
PYTEST_WORKERS ?= 3

.PHONY: run test lint bench clean

$(RUN_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "undoproxy needs Python 3.11 or newer (found $$($(PYTHON) --version))"; exit 1; }
	@echo "==> [1/3] creating the virtualenv $(VENV)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "==> [2/3] upgrading pip"
	@$(PIP) install --progress-bar on --upgrade pip
	@echo "==> [3/3] installing undoproxy and what it needs to run (pip install -e .)"
	@$(PIP) install --progress-bar on -e .
	@rm -f $(VENV)/.installed-* && touch $@
	@echo "==> installed what undoproxy needs to run"

$(TEST_STAMP): $(RUN_STAMP)
	@echo "==> installing the test tools (pip install -e '.[test]')"
	@$(PIP) install --progress-bar on -e '.[test]'
	@touch $@

run: $(RUN_STAMP)
	$(BIN)/undoproxy run $(ARGS)

lint: $(TEST_STAMP)
	$(BIN)/ruff check undoproxy tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile --durations=15 $(PYTEST_ARGS)

bench: $(TEST_STAMP)
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
