# Two commands do all set-up on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo bench lint clean soak

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) setup.cfg pyproject.toml constraints.txt
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -c constraints.txt -e '.[train,dev]'
	touch $(STAMP)

# import-linter reads the package from disk; wrappers/ and training/ are installed into
# arena_envs by package_dir, so it reads a tree of links laid out as installed.
IMPORT_VIEW := build/import-view

lint: $(STAMP)
	$(PY) -m ruff check .
	rm -rf $(IMPORT_VIEW) && mkdir -p $(IMPORT_VIEW)
	cp -rs $(CURDIR)/arena_envs $(IMPORT_VIEW)/arena_envs
	cp -rs $(CURDIR)/wrappers $(IMPORT_VIEW)/arena_envs/wrappers
	cp -rs $(CURDIR)/training $(IMPORT_VIEW)/arena_envs/training
	cd $(IMPORT_VIEW) && $(CURDIR)/$(VENV)/bin/lint-imports --config $(CURDIR)/setup.cfg

test: lint
	$(PY) -m pytest

demo: $(STAMP)
	$(PY) -m arena_envs.demo

# The fuzz and property suites round after round in one process for SOAK_MINUTES, the resident
# memory printed after each round (tests/soak.py). `make test` runs the same suites bounded.
SOAK_MINUTES ?= 10
soak: $(STAMP)
	$(PY) tests/soak.py $(SOAK_MINUTES)

bench: $(STAMP)
	$(VENV)/bin/arena-bench

clean:
	rm -rf $(VENV) build *.egg-info runs
