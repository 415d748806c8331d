# Two commands do all set-up on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo bench lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) setup.cfg pyproject.toml constraints.txt
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -c constraints.txt -e '.[train,dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check .

test: lint
	$(PY) -m pytest

demo: $(STAMP)
	$(PY) -m arena_envs.demo

bench: $(STAMP)
	$(VENV)/bin/arena-bench

clean:
	rm -rf $(VENV) build *.egg-info runs
