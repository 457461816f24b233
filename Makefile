# ykafka — the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev
SERVER_EXTRAS ?= pipeline,postgres,devstack
PYTEST_ARGS ?=
# Apache Kafka's broker (devstack/kafka/pom.xml pins the release), resolved by Maven into a cache outside the checkout
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' devstack/kafka/pom.xml)
KAFKA_LIBS ?= $(HOME)/.cache/ykafka/kafka-$(KAFKA_VERSION)/libs
# Toxiproxy (Shopify's TCP fault proxy, a Go module) for the soak's network faults (bench/soak.py, tests/toxiproxy.py)
TOXIPROXY_VERSION := v2.5.0
TOXIPROXY ?= $(HOME)/.cache/ykafka/toxiproxy-$(TOXIPROXY_VERSION)/toxiproxy-server
# the OpenID provider the console's single sign-on test runs (npm oidc-provider, pinned by tests/oidc/package-lock.json)
OIDC_PROVIDER_DIR ?= $(HOME)/.cache/ykafka/oidc-provider

.PHONY: help prereqs chromium postgres kafka toxiproxy oidc-provider venv install lint typecheck test test-fast demo dev dev-down dev-status bench soak dist clean

help:
	@echo "make demo      start the local stack and run the quickstart sample"
	@echo "make test      install, lint (ruff + mypy) and run the whole test suite"
	@echo "make dev       start the local stack (ykafka dev up);  make dev-down stops it"
	@echo "make lint      ruff + mypy;  make bench  run every benchmark;  make soak  seeded fault-injection soak"
	@echo "make kafka     resolve Apache Kafka $(KAFKA_VERSION) from Maven Central into $(KAFKA_LIBS)"
	@echo "make toxiproxy install Toxiproxy $(TOXIPROXY_VERSION) (go install) for the soak's network faults"
	@echo "make dist      build the wheels and sdists of ykafka and ykafka-server into dist/ and check them"

prereqs:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null \
	  || { echo "ykafka needs Python >= 3.11 as '$(PYTHON)': install it (e.g. apt-get install python3.11 python3.11-venv) or run make PYTHON=/path/to/python3.11"; exit 1; }
	@$(PYTHON) -c 'import venv, ensurepip' 2>/dev/null \
	  || { echo "Python's venv module is missing: install python3-venv (e.g. apt-get install python3.11-venv)"; exit 1; }
	@command -v java >/dev/null 2>&1 \
	  || { echo "Java 17 is needed for the PySpark pipeline: install it (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }

# Apache Kafka's jars, once per pom content (checksums verified: -C fails on a mismatch): the stamp holds the pom's
# hash, so a fresh clone reuses the cache; resolved into a temporary folder and moved in whole
kafka:
	@want=$$(sha256sum devstack/kafka/pom.xml | cut -c1-16); \
	[ "$$(cat $(KAFKA_LIBS)/.resolved 2>/dev/null)" = "$$want" ] && exit 0; \
	command -v java >/dev/null 2>&1 \
	  || { echo "the Kafka broker needs Java 17: install it (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }; \
	command -v mvn >/dev/null 2>&1 \
	  || { echo "resolving Apache Kafka needs Maven 3.8+: install it (e.g. apt-get install maven)"; exit 1; }; \
	tmp=$(KAFKA_LIBS).tmp.$$$$; rm -rf $$tmp; \
	echo "resolving Apache Kafka $(KAFKA_VERSION) from Maven Central into $(KAFKA_LIBS)"; \
	mvn -B -q -C -f devstack/kafka/pom.xml dependency:copy-dependencies -Dkafka.libs=$$tmp \
	  && echo $$want > $$tmp/.resolved && rm -rf $(KAFKA_LIBS) && mv $$tmp $(KAFKA_LIBS)

# the console's browser tests drive Debian's chromium (Playwright's own browser download is not reachable)
chromium:
	@test -x /usr/bin/chromium || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; } \
	  || { echo "the console browser tests need Chromium at /usr/bin/chromium: install it (e.g. apt-get install chromium)"; exit 1; }

# the console's single sign-on test (tests/test_console_sso.py) logs in through a real OpenID provider: the npm
# package oidc-provider on Node.js, installed with npm ci (lockfile integrity checked) once per lockfile content
oidc-provider:
	@want=$$(cat tests/oidc/package.json tests/oidc/package-lock.json | sha256sum | cut -c1-16); \
	[ "$$(cat $(OIDC_PROVIDER_DIR)/.installed 2>/dev/null)" = "$$want" ] && exit 0; \
	command -v npm >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }; } \
	  || { echo "the single sign-on test runs an OpenID provider on Node.js 20+: install it (e.g. apt-get install nodejs npm)"; exit 1; }; \
	tmp=$(OIDC_PROVIDER_DIR).tmp.$$$$; rm -rf $$tmp; mkdir -p $$tmp; \
	cp tests/oidc/package.json tests/oidc/package-lock.json $$tmp/; \
	echo "installing oidc-provider from npm into $(OIDC_PROVIDER_DIR)"; \
	npm ci --prefix $$tmp --no-audit --no-fund --loglevel=error >/dev/null \
	  && echo $$want > $$tmp/.installed && rm -rf $(OIDC_PROVIDER_DIR) && mv $$tmp $(OIDC_PROVIDER_DIR)

# tests and benchmarks start a private PostgreSQL from Debian's server binaries (tests/pg_server.py), unless
# YKAFKA_TEST_PG_DSN names a running one
postgres:
	@[ -n "$${YKAFKA_TEST_PG_DSN:-}" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null \
	  || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	  && { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }; } \
	  || { echo "the PostgreSQL tests start a private server from Debian's binaries: install them (e.g. apt-get install postgresql) or set YKAFKA_TEST_PG_DSN"; exit 1; }

$(BIN)/python: | prereqs
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the client (ykafka) and the servers (server/pyproject.toml: ykafka-server) editable from this checkout
$(STAMP): pyproject.toml server/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[$(EXTRAS)]' -e './server[$(SERVER_EXTRAS)]'
	@touch $(STAMP)

venv install: $(STAMP) kafka

lint: $(STAMP)
	$(BIN)/ruff check ykafka metaserver pipeline server tests samples bench
	$(BIN)/mypy

# two passes: everything not timing-sensitive on both cores (one test file per worker), then the chaos, DR,
# pacing and benchmark modules alone (tests/conftest.py SERIAL_MODULES), so no test races another for the CPU
# (both passes run; the target fails if either had a failure; exit code 5 means none selected)
# the in-process Spark tests (tests/test_pipeline*.py, not serial) run in a fresh process of their own: in an xdist
# worker that earlier files had filled with leftover clients (1,000+ threads), a py4j foreachBatch callback hung
# a failed test is run once more and the summary lists it as rerun (R) with its failed attempt's traceback (a
# flake that passes on its rerun keeps its error text): a test that fails twice fails the target
RERUNS ?= --reruns 1 --reruns-delay 2 -rfER --rerun-show-tracebacks
test: lint chromium postgres kafka oidc-provider toxiproxy
	@rc=0; \
	$(BIN)/python -m pytest -q -n 2 --dist loadfile $(RERUNS) -m "not serial" $(if $(PYTEST_ARGS),,--ignore-glob='tests/test_pipeline*.py') $(PYTEST_ARGS) || [ $$? -eq 5 ] || rc=1; \
	$(BIN)/python -m pytest -q $(RERUNS) -m serial $(PYTEST_ARGS) || [ $$? -eq 5 ] || rc=1; \
	$(if $(PYTEST_ARGS),true,$(BIN)/python -m pytest -q $(RERUNS) -m "not serial" tests/test_pipeline*.py) || [ $$? -eq 5 ] || rc=1; \
	exit $$rc

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

dev: $(STAMP) kafka
	$(BIN)/ykafka dev up

dev-down: $(STAMP)
	$(BIN)/ykafka dev down

dev-status: $(STAMP)
	$(BIN)/ykafka dev status

demo: $(STAMP) kafka
	$(BIN)/ykafka dev up
	source .ykafka/dev.env && $(BIN)/python samples/quickstart.py
	@echo
	@source .ykafka/dev.env && echo "Console: $$YKAFKA_METASERVER/console/  (log in as $$YKAFKA_CONSOLE_USER / $$YKAFKA_CONSOLE_PASSWORD)"
	@echo "The stack is still running: 'make dev-status' shows it, 'make dev-down' (or '$(BIN)/ykafka dev down') stops it."
	@echo "Try next: source .ykafka/dev.env && $(BIN)/python samples/hot_producer.py"

bench: $(STAMP)
	@set -e; for b in bench/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b | tail -n 1; done

# the seeded fault-injection soak (docs/reliability.md): make soak SOAK_MINUTES=30 SOAK_SEED=2
SOAK_MINUTES ?= 30
SOAK_SEED ?= 1
soak: $(STAMP) toxiproxy
	$(BIN)/python bench/soak.py --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED)

# built once into a cache outside the checkout; without Go it says how and the soak leaves the network faults out
toxiproxy:
	@[ -x $(TOXIPROXY) ] && exit 0; \
	command -v go >/dev/null 2>&1 \
	  || { echo "the soak's network faults need Toxiproxy: install Go (e.g. apt-get install golang) and run make toxiproxy"; exit 0; }; \
	tmp=$$(mktemp -d); echo "installing Toxiproxy $(TOXIPROXY_VERSION) (go install) into $(TOXIPROXY)"; \
	GOBIN=$$tmp go install github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION) \
	  && mkdir -p $(dir $(TOXIPROXY)) && mv $$tmp/server $(TOXIPROXY); rm -rf $$tmp

# the client and the server distributions (server/build_dist.py), checked as PyPI would
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python server/build_dist.py --out dist
	$(BIN)/check-wheel-contents --toplevel ykafka dist/ykafka-*.whl
	@# W004: alembic loads the migration scripts by path, they are not modules
	$(BIN)/check-wheel-contents --toplevel ykafka_metaserver,ykafka_pipeline --ignore W004 dist/ykafka_server-*.whl
	$(BIN)/twine check --strict dist/*

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache *.egg-info dist build
