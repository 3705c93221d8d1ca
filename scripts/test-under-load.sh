#!/usr/bin/env bash
# Runs the README's test command (`make test`) while a load generator keeps every core busy:
# one spinning process per core (plus LOAD_EXTRA more, default 0), at the same priority as the
# tests. A suite that passes only on a quiet machine fails here.
#
#   scripts/test-under-load.sh            # one run
#   RUNS=10 scripts/test-under-load.sh    # ten, stopping at none; the summary says how many passed
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-1}"
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || nproc)
spinners=$((cores + ${LOAD_EXTRA:-0}))
mkdir -p .build/load-runs
pids=()
stop_load() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done; pids=(); }
# Ctrl-C or a kill stops the load and the runs (a trap that only stopped the load let the
# next run start).
trap stop_load EXIT
trap 'stop_load; exit 130' INT TERM

passed=0
for run in $(seq 1 "$runs"); do
    for _ in $(seq 1 "$spinners"); do
        ( while :; do :; done ) &
        pids+=($!)
    done
    log=".build/load-runs/run-$run.log"
    echo "== test-under-load: run $run of $runs, $spinners busy processes on $cores cores (load $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"
    start=$SECONDS
    make test 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    stop_load
    load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)
    if [ "$status" -eq 0 ]; then
        passed=$((passed + 1))
        echo "== test-under-load: run $run PASSED in $((SECONDS - start)) s (load at the end: $load)" | tee -a .build/load-runs/summary.txt
    else
        # The next run clears .build/test-results: keep what the server saw with this run's log.
        sleep 2 # each cluster's watchdog copies its log once the test process has ended
        rm -rf ".build/load-runs/run-$run-server-logs"
        cp -r .build/test-results/server-logs ".build/load-runs/run-$run-server-logs" 2>/dev/null
        echo "== test-under-load: run $run FAILED (exit $status) after $((SECONDS - start)) s (load at the end: $load); log: $log, server logs: .build/load-runs/run-$run-server-logs" | tee -a .build/load-runs/summary.txt
    fi
done
echo "== test-under-load: $passed of $runs runs passed"
[ "$passed" -eq "$runs" ]
