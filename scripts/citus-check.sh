#!/usr/bin/env bash
# make citus-check: the store's whole suite against a real Citus cluster (a coordinator and two
# workers, PostgreSQL 15 with Citus built by scripts/citus-build.sh from CITUS_SRC).
#
#   make citus-check CITUS_SRC=~/citus     # a checkout of github.com/citusdata/citus (v13.2.2)
#
# Every test database is created on the three nodes with the workers added first, migrated with
# bbmigrate's migrations (0027 distributes), and used through the coordinator (see
# Sources/PostgresTestKit/TestCitus.swift). It needs Debian's package mirror (the PostgreSQL 15
# packages are unpacked into a private tree) and a Citus checkout, so CI does not run it: it
# lives beside make bench. Exits 0 only if every test passes; the output ends with what failed.
set -uo pipefail
cd "$(dirname "$0")/.."
SWIFT="${SWIFT:-swift}"
bin=$(scripts/citus-build.sh) || exit 2
echo "== citus-check: PostgreSQL with Citus in $bin"
"$SWIFT" build --build-tests >/dev/null || { echo "citus-check: the build failed; run $SWIFT build --build-tests" >&2; exit 2; }
results=.build/citus-check
rm -rf "$results"
mkdir -p "$results"
export BB_TEST_SERVER_LOG_DIR="$PWD/$results/server-logs"
BB_TEST_CITUS=1 BB_PG_BINDIR="$bin" BB_TEST_LOG_LEVEL="${BB_TEST_LOG_LEVEL:-error}" \
    SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="${BB_TEST_PARALLELISM:-8}" \
    "$SWIFT" test --skip-build --disable-xctest --filter "${CITUS_CHECK_FILTER:-BabyBasicsStoreTests}" 2>&1 | tee "$results/tests.log"
status=${PIPESTATUS[0]}
echo
if [ "$status" -eq 0 ]; then
    echo "citus-check: the store's suite passed on a coordinator with two workers."
    exit 0
fi
echo "citus-check: FAILED. What failed:"
grep -aE "^✘ Test .* (failed|recorded an issue)" "$results/tests.log" | sed 's/^/  /' | head -60
echo "Full output: $results/tests.log; the three nodes' server logs: $results/server-logs/"
exit 1
