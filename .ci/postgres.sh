#!/usr/bin/env bash
# A throwaway PostgreSQL for the test suite, sourced by .ci/run: installs the
# server when the machine lacks it (Debian packages), starts one cluster as
# an unprivileged user (the server refuses root) on a free loopback port,
# exports MNEMO_TEST_PGPORT/MNEMO_TEST_PGHOST for the test kit (testkit/src/pg.rs),
# builds pgvector from Debian's source when the server lacks it (and then
# requires the tests to find it: MNEMO_TEST_REQUIRE_PGVECTOR), and stops and
# deletes the cluster when the calling shell exits.
# Without this the test kit starts a cluster per test binary itself.

pg_bin() {
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    if [ -n "$dir" ] && [ -x "$dir/initdb" ]; then
        echo "$dir"
    elif command -v pg_config >/dev/null && [ -x "$(pg_config --bindir)/initdb" ]; then
        pg_config --bindir
    fi
}

if [ -z "$(pg_bin)" ]; then
    echo "== installing PostgreSQL (not on this machine)"
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
fi
PG_BIN=$(pg_bin)
if [ -z "$PG_BIN" ]; then
    echo "PostgreSQL's server binaries (initdb, pg_ctl) are missing and could not be installed" >&2
    exit 1
fi

# pgvector, for recall's embeddings on Postgres: Debian 12 does not package
# it, so it is built from Debian's own source tarball (the trixie package's
# upstream source, checked by SHA-256) against the server's headers, once.
PGVECTOR_VERSION=0.8.0
PGVECTOR_SHA256=867a2c328d4928a5a9d6f052cd3bc78c7d60228a9b914ad32aa3db88e9de27b0
PG_CONFIG="$PG_BIN/pg_config"
[ -x "$PG_CONFIG" ] || PG_CONFIG=$(command -v pg_config || true)
if [ -z "$PG_CONFIG" ] || [ ! -f "$($PG_CONFIG --sharedir)/extension/vector.control" ]; then
    echo "== building pgvector $PGVECTOR_VERSION (not on this machine)"
    if [ "$(id -u)" = 0 ]; then sudo=""; else sudo="sudo"; fi
    major=$("$PG_BIN/postgres" --version | awk '{print $3}' | cut -d. -f1)
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "postgresql-server-dev-$major" make gcc curl >/dev/null
    PG_CONFIG="$PG_BIN/pg_config"
    [ -x "$PG_CONFIG" ] || PG_CONFIG=$(command -v pg_config)
    build=$(mktemp -d /tmp/mnemo-ci-pgvector.XXXXXX)
    curl -fsSL -o "$build/pgvector.tar.gz" \
        "http://deb.debian.org/debian/pool/main/p/pgvector/pgvector_$PGVECTOR_VERSION.orig.tar.gz"
    echo "$PGVECTOR_SHA256  $build/pgvector.tar.gz" | sha256sum -c --quiet -
    tar -xzf "$build/pgvector.tar.gz" -C "$build"
    make -s -C "$build/pgvector-$PGVECTOR_VERSION" PG_CONFIG="$PG_CONFIG" OPTFLAGS="" >/dev/null
    $sudo make -s -C "$build/pgvector-$PGVECTOR_VERSION" PG_CONFIG="$PG_CONFIG" install >/dev/null
    rm -rf "$build"
fi
# The suite's embeddings-on-Postgres tests must then find it.
export MNEMO_TEST_REQUIRE_PGVECTOR=1

PG_DATA=$(mktemp -d /tmp/mnemo-ci-pg.XXXXXX)
if [ "$(id -u)" = 0 ]; then
    PG_USER=postgres
    id "$PG_USER" >/dev/null 2>&1 || useradd --system --no-create-home "$PG_USER"
    chown "$PG_USER" "$PG_DATA"
    as_pg() { runuser -u "$PG_USER" -- "$@"; }
else
    as_pg() { "$@"; }
fi
PG_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

stop_postgres() {
    as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$PG_DATA"
}
trap stop_postgres EXIT

echo "== PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT (throwaway, for the tests)"
as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >/dev/null
as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" -w \
    -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $PG_DATA -c fsync=off -c max_connections=300" \
    start >/dev/null
export MNEMO_TEST_PGHOST=127.0.0.1
export MNEMO_TEST_PGPORT=$PG_PORT
