# The two commands a newcomer needs (see README):
#   make preflight   the package + ansible-core into .venv, run the fleet preflight playbook, write reports/
#   make test        the development toolchain into .venv, run the whole test suite (what .ci/run calls)
# and the collection's release artifact:
#   make collection  dist/gpustack-accelerators-<version>.tar.gz (carries the package wheel)

SHELL := /bin/bash
VENV ?= .venv
INVENTORY ?= inventory/localhost.yml
PLAYBOOK_ARGS ?=

# Current ansible-core needs Python >= 3.12: take the first interpreter that is new enough.
PYTHON312 := $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3.13 python3; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { echo "$$p"; break; }; done)

BIN := $(VENV)/bin
# Two installs into one venv, each with its own stamp: what running the playbooks needs (the package
# and ansible-core: `.[ansible]`), and the development toolchain on top of it (`.[dev]`, for make test).
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed-dev
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: setup setup-run system-deps stubs wheel collection preflight test lint typecheck unit bench clean

setup: $(STAMP)
setup-run: $(RUN_STAMP)

$(BIN)/python:
	@if [ -z "$(PYTHON312)" ]; then echo "error: Python >= 3.12 is required (ansible-core needs it); install python3.12" >&2; exit 1; fi
	@echo "==> creating $(VENV) with $(PYTHON312)"
	"$(PYTHON312)" -m venv "$(VENV)"
	"$(BIN)/python" -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	"$(BIN)/python" -m pip install --quiet -e '.[ansible]'
	@touch "$(RUN_STAMP)"

$(STAMP): pyproject.toml | $(BIN)/python
	"$(BIN)/python" -m pip install --quiet -e '.[dev]'
	@touch "$(RUN_STAMP)" "$(STAMP)"

# Debian packages the integration tests use (sshd for the real-SSH fleet, chromium for the HTML
# report); installs only what is missing, as root.
system-deps:
	bash tests/tools/system_deps.sh

# The vendor-library stand-ins the simulated fleet's fixture nodes load (compiled with gcc).
stubs: $(RUN_STAMP)
	"$(BIN)/python" -m tests.stubs.build

# The package as a wheel: dist/gpustack_operator-<version>-py3-none-any.whl
wheel: $(RUN_STAMP)
	"$(BIN)/python" -m pip wheel --quiet --no-deps --wheel-dir dist .

# The Galaxy tarball dist/gpustack-accelerators-<version>.tar.gz, built from a staging copy that
# carries the package wheel in roles/install/files/ (tests/tools/collection_tree.py says what else).
collection: $(RUN_STAMP)
	"$(BIN)/python" -m tests.tools.collection_tree --dist dist

# Reports land in reports/ of the directory this runs from (the repository root).
preflight: $(RUN_STAMP) stubs
	"$(BIN)/ansible-playbook" -i "$(INVENTORY)" playbooks/preflight.yml $(PLAYBOOK_ARGS)

lint: $(STAMP)
	"$(BIN)/ruff" check operator plugins tests bench
	"$(BIN)/ruff" format --check operator tests bench

typecheck: $(STAMP)
	"$(BIN)/mypy"

unit: $(STAMP) system-deps stubs
	"$(BIN)/pytest" -q

# every phase timed, the table printed at the end (tests/tools/ci.sh says what runs in which order)
test:
	MAKE="$(MAKE)" VENV="$(VENV)" bash tests/tools/ci.sh

bench: $(STAMP) stubs
	"$(BIN)/python" bench/run.py
	"$(BIN)/python" bench/ansible_bench.py
	"$(BIN)/python" bench/allocate_bench.py
	"$(BIN)/python" bench/probe_bench.py
	"$(BIN)/python" bench/worker_bench.py
	"$(BIN)/python" bench/deploy_bench.py

clean:
	rm -rf "$(VENV)" reports tests/.build dist .mypy_cache .ruff_cache .pytest_cache .hypothesis
