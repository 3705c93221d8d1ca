#!/usr/bin/env bash
# Prints the bin folder of a PostgreSQL 15 with Citus installed, building it when missing.
#
#   CITUS_SRC=~/src/citus scripts/citus-build.sh     # a checkout of github.com/citusdata/citus
#
# Nothing is installed into the system: Debian's PostgreSQL 15 packages (server, client,
# headers) are unpacked (dpkg -x) into a private tree, and Citus is built against those headers
# and installed into that tree (PostgreSQL's programs find their files relative to themselves).
# The tree lives in /var/tmp/babybasics/citus-<pg version>-<citus version>/ (a folder the
# server's account can enter when this runs as root), a cache shared by clones; deleting it is
# always safe.
#
# The build needs gcc, make and the headers PostgreSQL's own headers include (libkrb5-dev,
# libzstd-dev, liblz4-dev, libxml2-dev, libssl-dev): installed with apt-get when missing. Citus
# is built --without-libcurl (no anonymous statistics) and without LLVM bitcode.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "citus-build: $*" >&2; }

need_packages=()
for package in gcc make libkrb5-dev libzstd-dev liblz4-dev libxml2-dev libssl-dev; do
    dpkg -s "$package" >/dev/null 2>&1 || need_packages+=("$package")
done
if [ ${#need_packages[@]} -gt 0 ]; then
    say "installing the build's needs: ${need_packages[*]}"
    sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
    $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_packages[@]}" >&2
fi

pg_version=$(apt-cache policy postgresql-15 | awk '/Candidate:/ {print $2}')
[ -n "$pg_version" ] && [ "$pg_version" != "(none)" ] || { say "error: apt knows no postgresql-15 package (Debian 12's); run apt-get update"; exit 2; }

cache=/var/tmp/babybasics
mkdir -p "$cache"
if [ "$(id -u)" = 0 ]; then
    # In a world-writable /var/tmp, only a folder of root's that nobody else may write is safe.
    if [ -L "$cache" ] || [ "$(stat -c %u "$cache")" != 0 ] || [ -n "$(find "$cache" -maxdepth 0 -perm /022)" ]; then
        say "error: $cache is not root's own folder (a link, someone else's, or writable by others); look at it (ls -ld $cache) and delete it if you do not know it"
        exit 2
    fi
    chmod 0755 "$cache"
fi

if [ -z "${CITUS_SRC:-}" ]; then
    # Without a source folder, a tree built before is used as it is.
    found=$(ls -d "$cache"/citus-"$pg_version"-*/usr/lib/postgresql/15/bin 2>/dev/null | head -1 || true)
    if [ -n "$found" ] && [ -f "$found/../lib/citus.so" ]; then echo "$found"; exit 0; fi
    say "error: no Citus built yet and CITUS_SRC is not set"
    say "  set CITUS_SRC to a checkout of https://github.com/citusdata/citus (tested with v13.2.2):"
    say "    git clone --branch v13.2.2 https://github.com/citusdata/citus ~/citus && make citus-check CITUS_SRC=~/citus"
    exit 2
fi
[ -f "$CITUS_SRC/configure" ] || { say "error: $CITUS_SRC has no configure script: is it a Citus checkout?"; exit 2; }
citus_version=$(sed -n 's/^PACKAGE_VERSION=.\([^'"'"']*\).*/\1/p' "$CITUS_SRC/configure" | head -1)
tree="$cache/citus-$pg_version-${citus_version:-unknown}"
bin="$tree/usr/lib/postgresql/15/bin"
if [ -x "$bin/postgres" ] && [ -f "$tree/usr/lib/postgresql/15/lib/citus.so" ]; then echo "$bin"; exit 0; fi

work=$(mktemp -d "$cache/.citus-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "unpacking Debian's PostgreSQL $pg_version into $tree"
(cd "$work" && apt-get download postgresql-15 postgresql-client-15 postgresql-server-dev-15 libpq5 libpq-dev >/dev/null 2>"$work/download.log") \
    || { cat "$work/download.log" >&2; say "error: apt-get download failed: can this machine reach Debian's mirror?"; exit 2; }
mkdir -p "$work/root"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/root"; done
pg_config="$work/root/usr/lib/postgresql/15/bin/pg_config"

say "building Citus ${citus_version:-?} from $CITUS_SRC (about a minute on 2 cores)"
cp -a "$CITUS_SRC" "$work/src"
# PostgreSQL 15.20 exports have_createdb_privilege() itself; Citus 13.2 defines its own for 15.
compat="$work/src/src/include/pg_version_compat.h"
if grep -q "^have_createdb_privilege(void)" "$compat" && ! grep -q "PG_VERSION_NUM < 150020" "$compat"; then
    python3 - "$compat" <<'EOF'
import sys
path = sys.argv[1]
text = open(path).read()
start = text.index("static inline bool\nhave_createdb_privilege(void)")
end = text.index("return result;\n}\n", start) + len("return result;\n}\n")
text = text[:start] + "#if PG_VERSION_NUM < 150020 /* 15.20 exports its own */\n" + text[start:end] + "#endif\n" + text[end:]
open(path, "w").write(text)
EOF
fi
(
    cd "$work/src"
    PATH="$(dirname "$pg_config"):$PATH" ./configure PG_CONFIG="$pg_config" --without-libcurl >"$work/configure.log" 2>&1 \
        || { tail -30 "$work/configure.log" >&2; exit 1; }
    make -j"$(getconf _NPROCESSORS_ONLN)" with_llvm=no >"$work/make.log" 2>&1 || { grep -E "error|Error" "$work/make.log" | head -20 >&2; exit 1; }
    make install with_llvm=no >"$work/install.log" 2>&1 || { tail -20 "$work/install.log" >&2; exit 1; }
) || { say "error: the Citus build failed (above)"; exit 2; }
chmod -R a+rX "$work/root"
rm -rf "$tree"
mv -T "$work/root" "$tree"
say "built: $bin"
echo "$bin"
