# The two commands a newcomer needs (see README):
#   make preflight   set everything up, run the fleet preflight playbook, write reports/
#   make test        set everything up, run the whole test suite (what .ci/run calls)

SHELL := /bin/bash
VENV ?= .venv
INVENTORY ?= inventory/localhost.yml
PLAYBOOK_ARGS ?=

# Current ansible-core needs Python >= 3.12: take the first interpreter that is new enough.
PYTHON312 := $(shell for p in python3.12 $$HOME/.pyenv/versions/3.12*/bin/python3.12 /usr/bin/python3.12 python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3.13 python3; do \
	"$$p" -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1 && { echo "$$p"; break; }; done)

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: setup system-deps stubs wheel preflight test lint typecheck unit bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@if [ -z "$(PYTHON312)" ]; then echo "error: Python >= 3.12 is required (ansible-core needs it); install python3.12" >&2; exit 1; fi
	@echo "==> creating $(VENV) with $(PYTHON312)"
	"$(PYTHON312)" -m venv "$(VENV)"
	"$(BIN)/python" -m pip install --quiet --upgrade pip
	"$(BIN)/python" -m pip install --quiet -e '.[dev]'
	@touch "$(STAMP)"

# Debian packages the integration tests use (sshd for the real-SSH fleet, chromium for the HTML
# report); installs only what is missing, as root.
system-deps:
	bash tests/tools/system_deps.sh

# The vendor-library stand-ins the simulated fleet's fixture nodes load (compiled with gcc).
stubs: $(STAMP)
	"$(BIN)/python" -m tests.stubs.build

# The package as a wheel (for the install role): dist/gpustack_operator-<version>-py3-none-any.whl
wheel: $(STAMP)
	"$(BIN)/python" -m pip wheel --quiet --no-deps --wheel-dir dist .

preflight: $(STAMP) stubs
	"$(BIN)/ansible-playbook" -i "$(INVENTORY)" playbooks/preflight.yml $(PLAYBOOK_ARGS)

lint: $(STAMP)
	"$(BIN)/ruff" check operator plugins tests bench
	"$(BIN)/ruff" format --check operator tests bench

typecheck: $(STAMP)
	"$(BIN)/mypy"

unit: $(STAMP) system-deps stubs
	"$(BIN)/pytest" -q

test: lint typecheck unit

bench: $(STAMP) stubs
	"$(BIN)/python" bench/run.py
	"$(BIN)/python" bench/ansible_bench.py

clean:
	rm -rf "$(VENV)" reports tests/.build dist .mypy_cache .ruff_cache .pytest_cache .hypothesis
