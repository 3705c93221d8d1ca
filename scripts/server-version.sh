#!/usr/bin/env bash
# Prints the version and folder of the PostgreSQL server the tests will start (BB_PG_BINDIR,
# else the newest /usr/lib/postgresql/*/bin, else PATH), as EmbeddedPostgres looks it up.
set -euo pipefail
bin=${BB_PG_BINDIR:-}
if [ -z "$bin" ]; then
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
fi
if [ -z "$bin" ]; then
    bin=$(dirname "$(command -v postgres 2>/dev/null || echo /nonexistent/postgres)")
fi
if [ -x "$bin/postgres" ]; then
    echo "$("$bin/postgres" --version) in $bin"
else
    echo "no PostgreSQL server found (install postgresql, or set BB_PG_BINDIR)"
fi
