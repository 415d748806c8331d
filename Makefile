# Two commands do all set-up on a fresh machine: `make test` and `make demo`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test demo bench lint clean soak sysdeps docs results stats mutate verifiers llama-wheel

# Debian packages the tests and the demo need, installed only when one is missing (`apt-get update`
# runs once, then): bubblewrap, libseccomp2 (its filter, through pyseccomp), mount and util-linux
# (`mount`, `unshare`: each jail's overlays) for the code sandbox's jail, headless Chromium and its
# driver for the arena-view page tests.
SYSTEM_PACKAGES := bubblewrap libseccomp2 mount util-linux chromium chromium-driver

$(PY):
	$(PYTHON) -m venv $(VENV)

# The statistics of the results page (training/render_results.py) in a small venv of their own:
# rliable 1.2 needs arch<8, and arch 7 does not import beside pandas 3 (the project venv's).
STATS       := .venv-stats
STATS_STAMP := $(STATS)/.installed
STATS_PACKAGES := rliable==1.2.0 'pandas<3' matplotlib

# llama.cpp (llama-cpp-python) built once per machine for any x86-64 with AVX2, into a wheelhouse that
# pip installs from: built for the machine itself (pip's default, -march=native) it used AMX, which this
# VM's processor lists and its kernel refuses (SIGILL at a model's first reply), and pip's cache would
# hand that build to every later venv.
LLAMA_WHEELS := $(HOME)/.cache/arena-envs/llama-wheels
LLAMA_CMAKE  := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_WHEEL   = $(firstword $(wildcard $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl))
LLAMA_VERSION := $(shell sed -n 's/^llama-cpp-python==//p' constraints.txt)

llama-wheel: $(PY)
	@if [ -z "$(LLAMA_WHEEL)" ]; then \
		echo "building llama-cpp-python $(LLAMA_VERSION) for AVX2 (about 16 min once)"; \
		CMAKE_ARGS="$(LLAMA_CMAKE)" $(PY) -m pip wheel --no-deps --no-cache-dir -c constraints.txt \
			-w $(LLAMA_WHEELS) 'llama-cpp-python==$(LLAMA_VERSION)'; \
	fi

$(STAMP): $(PY) setup.cfg pyproject.toml constraints.txt
	$(PY) -m pip install --upgrade pip
	$(MAKE) llama-wheel
	$(PY) -m pip install -c constraints.txt --find-links $(LLAMA_WHEELS) -e '.[train,dev]'
	touch $(STAMP)

sysdeps:
	@missing=$$(for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y $$missing; \
	fi

$(STATS_STAMP):
	$(PYTHON) -m venv $(STATS)
	$(STATS)/bin/python -m pip install $(STATS_PACKAGES)
	touch $(STATS_STAMP)

stats: $(STATS_STAMP)

# verifiers (arena_envs.verifiers, run by `vf-eval`) in a venv of its own: verifiers 0.3 pins
# openai<3 and websockets<17 (through openai-agents), the project venv has openai 3 and websockets 17;
# older releases downgrade datasets and huggingface_hub. tests/test_verifiers_env.py runs it there.
VERIFIERS       := .venv-verifiers
VERIFIERS_STAMP := $(VERIFIERS)/.installed

$(VERIFIERS_STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VERIFIERS)
	$(VERIFIERS)/bin/python -m pip install -e '.[verifiers]'
	touch $(VERIFIERS_STAMP)

verifiers: $(VERIFIERS_STAMP)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports

test: sysdeps lint $(STATS_STAMP) $(VERIFIERS_STAMP)
	$(PY) -m pytest

# Every headline run (5 seeds x Foraging, Crafting, team capture 2v2 and 3v3; about four hours, not in CI), their
# JSON under docs/results/, the shipped policies exported from the best runs, and the page
# rendered from the JSON (`make test` runs the same two steps at a few updates per run).
results: sysdeps $(STAMP) $(STATS_STAMP)
	$(PY) -m arena_envs.training.results --out docs/results --runs runs/results
	$(STATS)/bin/python training/render_results.py docs/results --page docs/results.md

# About a minute: PPO learns Foraging and meets the baselines, then a shipped team's capture match
# as a GIF and a replay page (arena_envs/demo.py; everything under runs/demo/). No system packages.
demo: $(STAMP)
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
# EVERY=5 (any N) measures a sample, one mutant in N drawn at random from the whole module with the
# seed SEED (the jail's whole run, bubblewrap starting for each test, takes hours on 2 cores); each
# module's results.json there lists the sample and every verdict.
MODULES ?=
EVERY ?= 1
SEED ?= 0
mutate: sysdeps $(STAMP)
	$(PY) tests/mutate.py --every $(EVERY) --seed $(SEED) $(MODULES)

# The docs site (also built by `make test`, warnings as errors: tests/test_docs_build.py)
docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

# The full arena-bench table (minutes: its serve rows start servers, its sandbox rows need bubblewrap)
bench: sysdeps $(STAMP)
	$(VENV)/bin/arena-bench

clean:
	rm -rf $(VENV) $(STATS) $(VERIFIERS) build dist *.egg-info runs docs/_build docs/environments
