#!/usr/bin/env bash
# Same machine, two versions of the library: this checkout's benchmark harness (Benchmarks/)
# built once with the library (Sources/) of BASE and once with this checkout's, run one after
# the other, ROUNDS times, on the groups given. Prints ours / C libpq per case for each build.
#
# Why: issue 32's goal 6 ("no figure of the round-trip or decode groups gets worse") compares a
# run with the previous one, as ours / C libpq of the same run. That ratio takes out the CPU's
# speed, not the cost of waking a thread, which ours pays and C does not: on another machine it
# can move by 2-3x with the same code. This script answers "did the code get worse?" on one
# machine, whatever the last run's was.
#
#   scripts/bench-ab.sh                                # BASE: the code of the last committed run
#   scripts/bench-ab.sh fb994a9                        # another base
#   scripts/bench-ab.sh fb994a9 roundtrips,decoding 3  # groups (bb-bench --only) and rounds
#
# BENCH_LIBPQ=18 as for `make bench`. Needs what `make bench` needs (run it once first); leaves
# BENCHMARKS.md and Benchmarks/results/ as they were, and Sources/ at this checkout's.
set -euo pipefail
cd "$(dirname "$0")/.."
base_ref="${1:-$(git log -1 --format=%H -- Benchmarks/results/latest.json)}"
groups="${2:-roundtrips,decoding}"
rounds="${3:-2}"
base=$(git rev-parse --verify --quiet "$base_ref^{commit}") || { echo "bench-ab: '$base_ref' is not a commit here" >&2; exit 2; }
if ! git diff --quiet HEAD -- Sources BENCHMARKS.md Benchmarks/results || [ -n "$(git status --porcelain -- Sources Benchmarks/results)" ]; then
    echo "bench-ab: Sources/, BENCHMARKS.md or Benchmarks/results/ has changes not committed; commit or stash them first (this script swaps Sources/ and restores the results)" >&2
    exit 2
fi
[ -x .build/bench-clibpq ] || { echo "bench-ab: .build/bench-clibpq is missing: run 'make bench' once first" >&2; exit 2; }
out=.build/bench-ab
mkdir -p "$out"
restore() {
    git restore --source=HEAD --worktree -- Sources && git clean -q -fd -- Sources
    git checkout -q HEAD -- BENCHMARKS.md Benchmarks/results
    git clean -q -f -- Benchmarks/results >/dev/null
}
trap restore EXIT

build() { # $1: label
    # SwiftPM keeps its build plan (the list of source files) across builds, and may not see
    # that the swap of Sources/ added or removed a file: on a failure the plan is forgotten and
    # the build tried once more, as the Makefile's BENCH_BUILD does.
    if ! swift build -c release --package-path Benchmarks >"$out/build-$1.log" 2>&1 && ! {
        rm -f Benchmarks/.build/release.yaml Benchmarks/.build/build.db Benchmarks/.build/*/release/description.json
        swift build -c release --package-path Benchmarks >>"$out/build-$1.log" 2>&1; }; then
        echo "bench-ab: the $1 build failed (a library too far from this harness?): see $out/build-$1.log" >&2
        exit 1
    fi
    cp Benchmarks/.build/release/bb-bench "$out/bb-bench-$1"
}
echo "== bench-ab: building the harness with the library of $(git rev-parse --short "$base") (base)"
git restore --source="$base" --worktree -- Sources
build base
restore
echo "== bench-ab: building it with this checkout's library ($(git rev-parse --short HEAD))"
build head

if [ "${BENCH_LIBPQ:-}" = 18 ]; then
    bin=$(scripts/pg18-bindir.sh) || exit 2
    export LD_LIBRARY_PATH="$bin/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for round in $(seq 1 "$rounds"); do
    for build in base head; do
        echo "== bench-ab: round $round of $rounds, $build"
        if ! BB_BENCH_CLIBPQ="$PWD/.build/bench-clibpq" "$out/bb-bench-$build" --only="$groups" >"$out/$build-$round.log" 2>&1; then
            echo "bench-ab: the $build run failed: see $out/$build-$round.log" >&2
            exit 1
        fi
        grep -E "^bb-bench: done" "$out/$build-$round.log" || true
        cp Benchmarks/results/latest.json "$out/$build-$round.json"
    done
done

python3 - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def ratios(path):
    result = {}
    for case in json.load(open(path)).get("results", []):
        ours, c = case.get("ours") or {}, case.get("c") or {}
        if ours.get("runs") and c.get("runs"):
            result[case["name"]] = statistics.median(ours["runs"]) / statistics.median(c["runs"])
    return result
runs = {b: [ratios(f"{out}/{b}-{r}.json") for r in range(1, rounds + 1)] for b in ("base", "head")}
names = [n for n in runs["head"][0] if all(n in r for b in runs for r in runs[b])]
print("\n| Case (ours / C libpq, each round) | base | this checkout | change of the medians |")
print("| --- | --- | --- | --- |")
worse = 0
for name in names:
    b = [r[name] for r in runs["base"]]; h = [r[name] for r in runs["head"]]
    change = statistics.median(h) / statistics.median(b) - 1
    worse += change > 0.10
    verdict = f"**{change:+.0%} (worse)**" if change > 0.10 else f"{change:+.0%}"
    print(f"| {name} | {', '.join(f'{x:.2f}×' for x in b)} | {', '.join(f'{x:.2f}×' for x in h)} | {verdict} |")
print(f"\n{worse} of {len(names)} cases more than 10% worse (the spread of two runs of the same code).")
EOF
