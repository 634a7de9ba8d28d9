# llmmeter — `make run` starts the proxy, `make test` runs every check.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Where `make run` forwards to; override: make run UPSTREAM=http://127.0.0.1:8000/v1
UPSTREAM ?= https://api.moonshot.ai/v1

.PHONY: run test lint typecheck unit bench system-deps clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $@

$(BIN)/.installed-test: $(BIN)/.installed
	$(BIN)/pip install -q -e '.[test]'
	touch $@

run: $(BIN)/.installed
	mkdir -p data
	LLMMETER_UPSTREAM="$${LLMMETER_UPSTREAM:-$(UPSTREAM)}" $(BIN)/llmmeter serve

test: $(BIN)/.installed-test system-deps lint typecheck unit

lint: $(BIN)/.installed-test
	$(BIN)/ruff check proxy pricing tests bench

typecheck: $(BIN)/.installed-test
	$(BIN)/mypy

unit: $(BIN)/.installed-test
	$(BIN)/pytest

# System parts some tests need; installed only when running as root on Debian.
SYSTEM_PACKAGES := util-linux chromium postgresql
system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing; fi; \
	else echo "make test: not root on Debian; tests needing system packages may skip"; fi

bench: $(BIN)/.installed-test
	$(BIN)/python bench/relay.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
