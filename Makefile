# Two commands for a fresh machine with only python3: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: demo test test-long test-celery-matrix lint docs format venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/asyncbook demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict asyncbook tests

# The documentation site (mkdocs.yml, docs/), built strict into a throwaway directory: a
# broken link, anchor or page outside the nav fails. `$(BIN)/mkdocs serve` to read it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

# Two test processes (pytest-xdist), each with a Redis server of its own (tests/README.md).
test: lint docs
	$(BIN)/pytest -n 2

# The long tests (marked `long`: fault runs, races of processes, large workloads), which
# `make test` leaves out to stay within its ten minutes; .ci/run runs them after it.
test-long: $(STAMP)
	$(BIN)/pytest -m long

# The Celery layer's tests once per older supported Celery minor, a venv each (.ci/run runs it).
test-celery-matrix:
	bash .ci/celery-matrix

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .venv-celery-* site dist build .mypy_cache .pytest_cache .ruff_cache .hypothesis *.egg-info
