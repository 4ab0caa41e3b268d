# Two entry points: `make demo` (main job) and `make test` (the suite). Both bootstrap idempotently.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.dlcb-installed

.PHONY: demo test test-changed test-slow fuzz setup dot chromium clean

$(PY):
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e '.[viz,dev]'
	touch $(STAMP)

dot:
	@command -v dot >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq graphviz >/dev/null; \
	  else echo "graphviz 'dot' missing: install Debian's graphviz (needs root) for diagrams"; fi; }

chromium:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing: install Debian's chromium (needs root) for report screenshots"; fi; }

setup: $(STAMP) dot chromium

demo: setup
	$(PY) -m dlcb_lab.demo

test: setup
	$(VENV)/bin/ruff check dlcb_lab tests
	$(PY) -m pytest -q -n 2 tests

# The test folders of the stages a change touches (tests/tools/stages.py; REV=HEAD by default),
# in pipeline order: a quick first answer before `make test`.
test-changed: setup
	@dirs="$$($(PY) tests/tools/stages.py $(REV))"; [ -n "$$dirs" ] || { echo "no stage touched"; exit 0; }; \
	  echo "$$dirs"; $(PY) -m pytest -q -n 2 $$dirs

test-slow: setup
	$(PY) -m pytest -q -n 2 -m slow tests

# Differential fuzzing: 10,000 random graphs against eager on the CPU (about 40 minutes on one
# core), one process per core; failures shrink to tests/fuzz/fuzz_cases/*.json, which the suite
# replays. FUZZ_ARGS adds options (--seed S, --device cuda, --graphs N, --jobs J).
fuzz: setup
	cd tests/tools && ../../$(PY) fuzz.py --graphs 10000 --jobs $(shell nproc) $(FUZZ_ARGS)

clean:
	rm -rf $(VENV)
