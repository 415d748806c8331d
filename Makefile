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

# The fuzz and property suites with many more examples (SOAK examples each); GNU time reports
# the peak memory. `make test` runs the same suites bounded.
SOAK ?= 20000
soak: $(STAMP)
	/usr/bin/time -v $(PY) -m pytest -p no:cacheprovider --soak $(SOAK) -q \
		tests/test_toollayer_fuzz.py tests/test_treasure_hunt_fuzz.py tests/test_pool_properties.py 2>&1 \
		| grep -E "passed|failed|Maximum resident|Elapsed"

bench: $(STAMP)
	$(VENV)/bin/arena-bench

clean:
	rm -rf $(VENV) build *.egg-info runs
