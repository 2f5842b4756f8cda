# Every target creates or reuses .venv; a change to pyproject.toml or setup.cfg reinstalls.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint typecheck pytest demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml setup.cfg
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel
	$(BIN)/python -m pip install --quiet -e ".[all,dev]"
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check xsm_celery tests bench examples
	$(BIN)/ruff format --check xsm_celery tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict xsm_celery

pytest: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test: lint typecheck pytest

demo: $(STAMP)
	$(BIN)/python -m xsm_celery.demo

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache .hypothesis
