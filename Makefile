# Two commands do everything on a fresh machine with Python 3.11:
#   make demo   set up .venv, serve the bundled ensembles on the embedded Triton, invoke, show metrics
#   make test   set up .venv (and a Docker engine + CPU Triton image for the docker suite), run all tests
# Locally, `make test-unit` runs tests/unit (no Triton, seconds), `make test-fast` skips the slow
# and docker suites; `make test SKIP_DOCKER=1` only docker. make test runs on PYTEST_WORKERS
# pytest-xdist workers (a module's tests share one; see tests/conftest.py); 1 for no xdist.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
EXTRAS := ensembles,harness,docker,dev
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | md5sum | cut -c1-12)
PYTEST_ARGS ?=
PYTEST_WORKERS ?= 4
XDIST := $(if $(filter 1,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder)
# Thousands of the suite's processes import numpy (pytest workers, mme commands, every Python stub
# Triton starts for a model). OpenBLAS starts its thread pool as numpy is imported, which costs
# each of them more CPU than the tests' small arrays ever win back on a machine whose cores the
# workers already fill; the tests' behaviour does not depend on it.
test test-unit test-fast: export OPENBLAS_NUM_THREADS := 1
# The suite starts hundreds of Python processes (pytest workers, mme commands, servers), each
# importing this project's packages and, for the workers, its tests. They compile them once into
# __pycache__ (gitignored) and read them from there after, even where the environment asks Python
# not to write bytecode (PYTHONDONTWRITEBYTECODE, set on some CI machines and sandboxes):
# importing the emulator cost each process 0.94 CPU-seconds uncached, 0.68 cached, and collecting
# the suite (asserts rewritten) each worker 8.4, against 3.6.
test test-unit test-fast: export PYTHONDONTWRITEBYTECODE :=

.PHONY: setup wrk demo test test-fast lint docker-prepare clean

setup: $(STAMP) wrk

# wrk (a C load generator) drives `mme bench overhead`; without it the benchmark falls back to a
# Python client. Installed with apt-get where we can (root with apt, as on CI); never fails.
wrk:
	@command -v wrk >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get install -y -q wrk >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && \
		 apt-get install -y -q wrk >/dev/null 2>&1)) && echo "installed wrk" || \
		echo "could not install wrk with apt-get; mme bench overhead will use its Python client"; \
	else \
		echo "wrk is not installed: sudo apt-get install -y wrk (Debian/Ubuntu) or brew install wrk;" \
		     "mme bench overhead uses its Python client until then"; \
	fi

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	@echo "make setup: installing sagemaker-mme-emulator[$(EXTRAS)] into $(VENV): about 3.5 GB," \
	      "most of it the CUDA wheels torch pulls in even on a machine without a GPU; several" \
	      "minutes on a fresh machine (pip's progress follows)"
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on \
		-e '.[$(EXTRAS)]' | grep --line-buffered -E '^ *(Collecting|Downloading|Installing|Successfully)' ; \
		exit $${PIPESTATUS[0]}
	@rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(BIN)/mme demo

docker-prepare:
	bash docker/prepare-ci.sh

test: $(STAMP) wrk
	$(BIN)/ruff check emulator ensembles harness tests docker mme
	$(BIN)/python tests/lint_ci_files.py
	bash tests/install-chromium.sh
	$(BIN)/mypy  # strict over emulator, harness, mme, ensembles: pyproject's [tool.mypy]
	$(BIN)/lint-imports  # the layers: .importlinter
	$(BIN)/python -m pytest --collect-only -q > /dev/null  # compiles the tests once (see above)
ifeq ($(SKIP_DOCKER),1)
	$(BIN)/python -m pytest --no-docker $(XDIST) $(PYTEST_ARGS)
else
	bash docker/prepare-ci.sh
	$(BIN)/python -m pytest $(XDIST) $(PYTEST_ARGS)
endif

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow" --no-docker $(XDIST) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check emulator ensembles harness tests docker mme
	$(BIN)/python tests/lint_ci_files.py
	$(BIN)/mypy  # strict over emulator, harness, mme, ensembles: pyproject's [tool.mypy]
	$(BIN)/lint-imports  # the layers: .importlinter

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
