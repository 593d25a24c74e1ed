# Every target creates the virtual environment on first use; `.venv/.installed` is re-made
# whenever pyproject.toml changes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: demo test test-fast lint typecheck bench accuracy k8s-check clean venv tools

# Areas add their own targets and test prerequisites in mk/<area>.mk (TEST_DEPS += ...).
.DEFAULT_GOAL := test
TEST_DEPS :=
-include mk/*.mk

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -qq --upgrade pip setuptools wheel
	$(BIN)/pip install -qq -e '.[all]'
	touch $@

# wrk is the C reference load generator (Debian package); best effort: tests that need it skip
# with the reason when it cannot be installed.
tools:
	@command -v wrk >/dev/null 2>&1 || (command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  (apt-get install -y -qq wrk >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq wrk >/dev/null 2>&1))) || true

demo: venv tools
	$(BIN)/python -m tritonkit.demo $(ARGS)

lint: venv
	$(BIN)/ruff check tools tests loadtests
	$(BIN)/ruff format --check tools tests loadtests

typecheck: venv
	$(BIN)/mypy

test: venv tools $(TEST_DEPS) lint typecheck
	$(BIN)/python -m pytest

# The quick tier: `make test` less the tests marked `slow` (each seconds of server, build or Locust run,
# measured with --durations) and the fault suite's reduced form (marker `faults`).
test-fast: venv tools lint typecheck
	$(BIN)/python -m pytest -m "not slow and not faults"

bench: venv tools
	$(BIN)/python -m tritonkit.demo --build-only
	$(BIN)/tritonkit bench --output docs/benchmarks.md

accuracy: venv
	$(BIN)/tritonkit accuracy --build --repo model_repository --report docs/accuracy.md

k8s-check: venv checkov
	$(BIN)/tritonkit k8s check --checkov require
	$(BIN)/python -m pytest tests/deploy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
