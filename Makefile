# Two commands for a fresh machine with only python3: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
export PIP_DISABLE_PIP_VERSION_CHECK := 1

LOCK   := requirements/dev.lock

.PHONY: demo test test-long test-celery-matrix test-newest lock lint docs format venv clean

# The venv holds exactly the lock (every dev and test dependency, pinned with hashes; pip
# itself first, from its own lock, since newer wheels need a newer pip) and this checkout,
# installed with Python's own venv and pip. `make lock` refreshes the lock.
$(STAMP): pyproject.toml requirements/pip.lock $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r requirements/pip.lock
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/asyncbook demo --app workers

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

# The long tests (marked `long`: fault runs, races of processes, large workloads, the
# schemathesis run against the status server), which
# `make test` leaves out to stay within its ten minutes; .ci/run runs them after it.
test-long: $(STAMP)
	$(BIN)/pytest -m long

# The Celery layer's tests once per older supported Celery minor, a venv each (.ci/run runs it).
test-celery-matrix:
	bash .ci/celery-matrix

# The lock again, from pyproject.toml's ranges at today's newest versions (a commit lands it).
lock: $(STAMP)
	echo pip | $(BIN)/uv pip compile - --universal --python-version 3.11 --generate-hashes \
		--no-header --quiet --upgrade -o requirements/pip.lock
	$(BIN)/uv pip compile pyproject.toml --extra dev --universal --python-version 3.11 \
		--generate-hashes --no-header --quiet --upgrade -o $(LOCK)

# Lint and the tests on the newest versions pyproject.toml allows, in a venv of their own
# (.ci/run runs it): upstream drift is seen here, never by a fresh clone.
test-newest:
	bash .ci/newest

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .venv-celery-* .venv-newest site dist build .mypy_cache .pytest_cache .ruff_cache .hypothesis *.egg-info
