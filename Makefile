# Two commands do everything on a fresh machine with Python 3.11:
#   make demo   set up .venv, serve the bundled ensembles on the embedded Triton, invoke, show metrics
#   make test   set up .venv (and a Docker engine + CPU Triton image for the docker suite), run all tests
# Locally, `make test-fast` skips the slow and docker suites; `make test SKIP_DOCKER=1` only docker.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
EXTRAS := ensembles,harness,docker,dev
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast lint docker-prepare clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]'
	@rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(BIN)/mme demo

docker-prepare:
	bash docker/prepare-ci.sh

test: $(STAMP)
	$(BIN)/ruff check emulator ensembles harness tests docker mme
	bash tests/install-chromium.sh
	$(BIN)/mypy
ifeq ($(SKIP_DOCKER),1)
	$(BIN)/python -m pytest --no-docker $(PYTEST_ARGS)
else
	bash docker/prepare-ci.sh
	$(BIN)/python -m pytest $(PYTEST_ARGS)
endif

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" --no-docker $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check emulator ensembles harness tests docker mme
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
