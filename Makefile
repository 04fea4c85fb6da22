# streammom — the newcomer's contract: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CACHE ?= $(CURDIR)/.cache
KAFKA_LIBS ?= $(CACHE)/kafka-libs
KAFKA_POM := service/devbroker/pom.xml
PYTEST_ARGS ?=
# Test workers (pytest-xdist): one per core, at most 4; the Kafka tests run on one of them
# against one broker (tests/conftest.py groups them). TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); echo $$(( n < 4 ? n : 4 )))
XDIST_ARGS := $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadgroup)

.PHONY: help install kafka-libs system-deps lint test unit demo bench clean

help:
	@echo "make demo   - run the main job on the embedded default (no services needed)"
	@echo "make test   - lint + full test suite against a real Apache Kafka broker"
	@echo "make bench  - benchmarks against peers (writes numbers for BENCHMARKS.md)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install when the project metadata changes. The demo needs the runtime only (a few
# packages); tests and lint add the [dev] tools on top.
$(VENV)/.installed-runtime: pyproject.toml | $(BIN)/python
	@echo "installing streammom and its runtime dependencies into $(VENV) (first time: about a minute)"
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	@echo "installing streammom with the test and lint tools into $(VENV) (first time: a few minutes)"
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-runtime

install: $(VENV)/.installed

# Apache Kafka broker jars from Maven Central (pinned in the POM), for the test broker.
# Resolved into a temp dir then swapped in: a POM bump never leaves two Kafka versions mixed.
$(KAFKA_LIBS)/.resolved: $(KAFKA_POM)
	rm -rf $(KAFKA_LIBS).tmp
	mvn -B -q -f $(KAFKA_POM) \
	    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
	    -DincludeScope=runtime -DoutputDirectory=$(KAFKA_LIBS).tmp
	touch $(KAFKA_LIBS).tmp/.resolved
	rm -rf $(KAFKA_LIBS)
	mv $(KAFKA_LIBS).tmp $(KAFKA_LIBS)

kafka-libs: $(KAFKA_LIBS)/.resolved

# Debian tools the tests drive for real (promtool/prometheus, headless chromium).
system-deps:
	@need=""; \
	{ command -v promtool && command -v prometheus; } >/dev/null || need="$$need prometheus"; \
	command -v chromium >/dev/null || need="$$need chromium"; \
	if [ -n "$$need" ]; then \
	  echo "installing Debian packages:$$need"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$need >/dev/null; \
	fi

lint: install
	$(BIN)/ruff check .

test: install kafka-libs system-deps lint
	STREAMMOM_REQUIRE_KAFKA=1 STREAMMOM_KAFKA_LIBS=$(KAFKA_LIBS) $(BIN)/pytest $(XDIST_ARGS) $(PYTEST_ARGS)

unit: install
	$(BIN)/pytest -m "not kafka" $(XDIST_ARGS) $(PYTEST_ARGS)

demo: $(VENV)/.installed-runtime
	$(BIN)/streammom demo
	@echo
	@echo "streammom is installed in $(VENV): run 'source $(VENV)/bin/activate' to put it on your PATH"

bench: install
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	$(BIN)/python bench/quality.py
	$(BIN)/python bench/throughput.py

clean:
	rm -rf $(VENV) $(CACHE) .pytest_cache .ruff_cache
