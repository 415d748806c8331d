# Two commands do all set-up on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo bench lint clean soak docs

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) setup.cfg pyproject.toml constraints.txt
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -c constraints.txt -e '.[train,dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports

test: lint
	$(PY) -m pytest

demo: $(STAMP)
	$(PY) -m arena_envs.demo

# The fuzz and property suites round after round in one process for SOAK_MINUTES, the resident
# memory printed after each round (tests/soak.py). `make test` runs the same suites bounded.
SOAK_MINUTES ?= 10
soak: $(STAMP)
	$(PY) tests/soak.py $(SOAK_MINUTES)

# The docs site (also built by `make test`, warnings as errors: tests/test_docs_build.py)
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

bench: $(STAMP)
	$(VENV)/bin/arena-bench

clean:
	rm -rf $(VENV) build dist *.egg-info runs docs/_build docs/environments
