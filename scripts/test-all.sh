#!/usr/bin/env bash
# What `make test` runs once everything is built: every suite, each even when one before it
# failed, then the list of what failed. Exits 1 if anything failed.
#
#   1. the whole suite on the system's PostgreSQL (Debian's 15) with the system's libpq;
#   2. the store's suite again through a real PgBouncer in transaction pooling mode;
#   3. the whole suite on PostgreSQL 18 with the wheel's libpq 18 (whose PQsendPipelineSync
#      lets the engine send a loop batch's requests in one write: the other write path);
#   4. the reference service (Examples/BabyBasicsService): its build, then its tests;
#   5. a few seconds of fuzzing per decoder.
#
# Swift Testing runs a suite's tests in parallel, at most BB_TEST_PARALLELISM at once (default
# 8): with every test of the suite at once, 2 cores shared by hundreds of tasks left a task
# waiting seconds for each of its turns, and deadlines and time limits tripped on a busy
# machine.
set -uo pipefail
cd "$(dirname "$0")/.."
SWIFT="${SWIFT:-swift}"
FUZZ_SMOKE_SECONDS="${FUZZ_SMOKE_SECONDS:-5}"
export BB_TEST_LOG_LEVEL="${BB_TEST_LOG_LEVEL:-error}"
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH="${BB_TEST_PARALLELISM:-8}"
results=.build/test-results
rm -rf "$results"
mkdir -p "$results"
# Each run's test cluster leaves its server log here (TestPostgres keeps it when it stops).
export BB_TEST_SERVER_LOG_DIR="$PWD/$results/server-logs"
failed=()
number=0

# run "what" command...: runs one suite, its output both shown and kept.
run() {
    local what="$1"; shift
    number=$((number + 1))
    local log="$results/$number.log"
    echo "== $number. $what"
    "$@" 2>&1 | tee "$log"
    local status=${PIPESTATUS[0]}
    if [ "$status" -ne 0 ]; then
        failed+=("$number. $what (exit $status; full output: $log)")
    fi
}

run "Tests on the system's PostgreSQL: $(BB_PG_BINDIR="${BB_PG_BINDIR:-}" scripts/server-version.sh)" \
    env BB_PG_BINDIR="${BB_PG_BINDIR:-}" "$SWIFT" test --skip-build --disable-xctest
run "The store's suite again, through PgBouncer in transaction pooling mode (the system's PostgreSQL)" \
    env BB_PG_BINDIR="${BB_PG_BINDIR:-}" BB_TEST_STORE_THROUGH=pgbouncer "$SWIFT" test --skip-build --disable-xctest --filter BabyBasicsStoreTests
if bin=$(scripts/pg18-bindir.sh); then
    run "Tests on PostgreSQL 18 (.venv-pg18), with its libpq 18: $(BB_PG_BINDIR="$bin" scripts/server-version.sh)" \
        env LD_LIBRARY_PATH="$bin/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" BB_PG_BINDIR="$bin" "$SWIFT" test --skip-build --disable-xctest
else
    failed+=("PostgreSQL 18 was not found in .venv-pg18 (make pg18 installs it)")
fi
run "The reference service (Examples/BabyBasicsService): build, then its tests over real HTTP" \
    make --no-print-directory example-test SWIFT="$SWIFT"
run "Fuzzing every decoder and parser for ${FUZZ_SMOKE_SECONDS}s each (make fuzz runs longer)" \
    Fuzz/run.sh "$FUZZ_SMOKE_SECONDS"

echo
if [ ${#failed[@]} -eq 0 ]; then
    echo "make test: every suite passed ($number of $number)."
    exit 0
fi
echo "make test: ${#failed[@]} of $number suites FAILED:"
for entry in "${failed[@]}"; do
    echo "  - $entry"
    log="$results/${entry%%.*}.log"
    if [ -f "$log" ]; then
        # Swift Testing's failure lines, then XCTest's; the test names are what to rerun.
        grep -aE "^✘ Test .* (failed|recorded an issue)|error: .*failed|Test Case .* failed" "$log" | sed 's/^/      /' | head -40
    fi
done
echo "The test clusters' server logs (what PostgreSQL saw): $results/server-logs/"
echo "Rerun one test with: swift test --skip-build --disable-xctest --filter <TestName>"
exit 1
