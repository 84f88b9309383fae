# Two entry points: `make run` serves the function, `make test` checks everything.
# Both create .venv and install the project into it first.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Serving flags; each can also come from the environment, as the SDK's CLI reads.
ADDRESS ?= 0.0.0.0:9443

# Where the upstream CRDs are: CRD_DIR if set, else ../shared/crds, else .crds.
CRD_DIR ?= $(firstword $(wildcard ../shared/crds) .crds)
export CRD_DIR

.PHONY: run test lint typecheck unit validate render-examples crds clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

run: $(STAMP)
	ADDRESS=$(ADDRESS) $(BIN)/python -m function --insecure

lint: $(STAMP)
	$(BIN)/ruff format --check function tests
	$(BIN)/ruff check function tests

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/python -m pytest -q

test: lint typecheck unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Regenerate the expected render outputs after a deliberate change; review the diff.
render-examples: $(STAMP)
	UPDATE_EXPECTED=1 $(BIN)/python -m pytest -q tests/test_examples.py
