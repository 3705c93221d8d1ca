#!/usr/bin/env bash
# Builds the libFuzzer targets (address sanitizer on) and runs each for SECONDS seconds
# (default 60), starting from its corpus in Fuzz/Corpus/<target> (seeds and every input that
# ever crashed it, so past crashes are replayed on every run). New interesting inputs go to
# Fuzz/Findings/<target>/corpus; a crash is kept in Fuzz/Findings/<target>/ and fails the run.
#   Fuzz/run.sh 5          # what make test does
#   Fuzz/run.sh 600        # what make fuzz does (FUZZ_SECONDS=600)
set -uo pipefail
cd "$(dirname "$0")"
seconds="${1:-60}"
targets=(FuzzDateTime FuzzNumeric FuzzArray FuzzScalars FuzzRangeComposite FuzzSQLScript FuzzEncoders)
log=.build/fuzz-build.log
mkdir -p .build
build() { ../scripts/progress.sh "building the fuzz targets (address sanitizer)" "$log" swift build -Xswiftc -sanitize=fuzzer,address; }
# Built once more when the first build fails, after forgetting what may be stale:
# - pins made before the main package gained a dependency leave its new modules unresolved
#   ("no such module"): resolve again;
# - a cached build plan can miss a source file added to or renamed in the main package (a path
#   dependency; seen with SwiftPM 6.3: "cannot find type ... in scope", "missing inputs"): plan
#   again. Compiled objects are kept.
if ! build; then
    if grep -q "no such module" "$log"; then rm -f Package.resolved; fi
    rm -f .build/debug.yaml .build/build.db .build/*/debug/description.json
    if ! build; then
        grep -E "error:" "$log" | head -20 >&2
        echo "fuzz: the fuzz targets did not build (full log: Fuzz/$log)" >&2
        exit 1
    fi
fi
failed=0
for target in "${targets[@]}"; do
    findings="Findings/$target"
    mkdir -p "$findings/corpus"
    output="$findings/last-run.log"
    if SWIFT_BACKTRACE=enable=no ".build/debug/$target" "$findings/corpus" "Corpus/$target" \
        -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$findings/" >"$output" 2>&1; then
        runs=$(grep -m1 "stat::number_of_executed_units" "$output" | awk '{print $2}')
        echo "fuzz: $target: no crash in ${seconds}s (${runs:-?} inputs)"
    else
        failed=1
        echo "fuzz: $target CRASHED; the input is in Fuzz/$findings/ (crash-*, oom-* or timeout-*)." >&2
        grep -E "Fatal error|ERROR: AddressSanitizer|SUMMARY" "$output" | head -5 >&2
        echo "  Fix the decoder, add the input to Fuzz/Corpus/$target/ and a regression test to Tests/PostgresTests/DecoderTrapTests.swift." >&2
    fi
done
exit $failed
