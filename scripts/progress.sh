#!/usr/bin/env bash
# Runs a long, quiet command (a build) with its output in a log file, and says every 30 s that
# it is still going and how far it got, so a terminal or a CI log never sits silent for
# minutes. Exits with the command's status.
#   scripts/progress.sh "building the reference service" .build/example-build.log swift build --package-path Examples/BabyBasicsService
set -uo pipefail
label="$1"; log="$2"; shift 2
mkdir -p "$(dirname "$log")"
start=$SECONDS
"$@" >"$log" 2>&1 &
child=$!
trap 'kill "$child" 2>/dev/null' INT TERM
next=30
while kill -0 "$child" 2>/dev/null; do
    sleep 1
    if (( SECONDS - start >= next )); then
        # The last step the build reported, e.g. "[312/790] Compiling NIOCore ByteBuffer.swift".
        step=$(grep -aE '^\[[0-9]+/[0-9]+\]' "$log" 2>/dev/null | tail -1 | cut -c1-100)
        echo "   ... still $label ($(( SECONDS - start )) s)${step:+: $step}"
        next=$(( next + 30 ))
    fi
done
wait "$child"
