# Two commands do all set-up on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo bench lint clean soak sysdeps docs mutate

# Debian packages the tests and the demo need, installed only when one is missing (`apt-get update`
# runs once, then): bubblewrap for the code sandbox's jail, headless Chromium and its driver for the
# arena-view page tests.
SYSTEM_PACKAGES := bubblewrap chromium chromium-driver

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) setup.cfg pyproject.toml constraints.txt
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -c constraints.txt -e '.[train,dev]'
	touch $(STAMP)

sysdeps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y $$missing; \
	fi

lint: $(STAMP)
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports

test: sysdeps lint
	$(PY) -m pytest

demo: sysdeps $(STAMP)
	$(PY) -m arena_envs.demo

# The fuzz and property suites round after round in one process for SOAK_MINUTES, the resident
# memory printed after each round (tests/soak.py). `make test` runs the same suites bounded.
SOAK_MINUTES ?= 10
soak: sysdeps $(STAMP)
	$(PY) tests/soak.py $(SOAK_MINUTES)

# Mutation testing (mutmut) of the modules that hold the project's promises, each module's mutants
# against its own fast tests (tests/mutate.py); prints the kill rate per module. MODULES= picks some
# (names transcripts pool serve_guard jail); a module's work folder build/mutate/<module> keeps its
# results: remove it to measure a changed module afresh.
MODULES ?=
mutate: sysdeps $(STAMP)
	$(PY) tests/mutate.py $(MODULES)

# The docs site (also built by `make test`, warnings as errors: tests/test_docs_build.py)
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

bench: $(STAMP)
	$(VENV)/bin/arena-bench

clean:
	rm -rf $(VENV) build dist *.egg-info runs docs/_build docs/environments
