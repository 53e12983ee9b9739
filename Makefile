# The two commands of the README: `make demo` and `make test`.
# Everything else here is what they need on a fresh machine.

VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin

.PHONY: demo test lint unit e2e devcluster-build clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/pitcrew devcluster up --nodes 32

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/pitcrew crds --check

devcluster-build: $(VENV)/.installed
	$(BIN)/pitcrew devcluster build

unit: $(VENV)/.installed
	$(BIN)/pytest tests/unit

e2e: devcluster-build
	$(BIN)/pytest tests/e2e

test: lint devcluster-build
	$(BIN)/pytest

clean:
	-$(BIN)/pitcrew devcluster down
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
