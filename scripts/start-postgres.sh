#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on 127.0.0.1 for tests and benchmarks.
#
# Installs Debian's `postgresql` package when its binaries are missing (needs root
# and apt), creates a cluster in a fresh directory owned by the `postgres` user
# (trust auth, superuser `postgres`, socket in the same directory), starts it on
# a free port (or --port) and prints its SQLAlchemy URL, and only that, on stdout:
#
#   export SIMPLE_TEST_DATABASE_URL="$(scripts/start-postgres.sh --fast)"
#   ...
#   scripts/start-postgres.sh --stop DIR          # DIR is printed on stderr
#
# Options:
#   --port PORT   listen on PORT (default: a free port)
#   --dir DIR     put the cluster in DIR, which must be empty or absent (default: mktemp -d)
#   --fast        tests only: fsync, synchronous_commit and full_page_writes off. Never
#                 for benchmarks: their numbers must be those of a durable server.
#   --stop DIR    stop the server whose cluster is DIR (and leave DIR in place)
# Environment: PG_BIN overrides the directory of initdb/pg_ctl (default: the newest
# /usr/lib/postgresql/*/bin).
set -euo pipefail

port=""
dir=""
fast=0
stop_dir=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --port) port="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --fast) fast=1; shift ;;
        --stop) stop_dir="$2"; shift 2 ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) echo "start-postgres.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

find_bin() {
    if [[ -n "${PG_BIN:-}" ]]; then echo "$PG_BIN"; return; fi
    local found
    found="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
    echo "$found"
}

# Run a PostgreSQL binary as the cluster's owner: `postgres` when we are root
# (the server refuses to run as root), else ourselves.
as_owner() {
    if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

bin="$(find_bin)"
if [[ -n "$stop_dir" ]]; then
    as_owner "$bin/pg_ctl" -D "$stop_dir" -m fast -w stop >&2
    exit 0
fi

if [[ -z "$bin" || ! -x "$bin/initdb" ]]; then
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
        echo "start-postgres.sh: PostgreSQL is not installed and I cannot install it" \
             "(needs root and apt-get); install the 'postgresql' package" >&2
        exit 1
    fi
    echo "start-postgres.sh: installing Debian's postgresql package" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    bin="$(find_bin)"
fi

if [[ -z "$port" ]]; then
    port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
fi
if [[ -z "$dir" ]]; then
    dir="$(mktemp -d /tmp/simple-pg.XXXXXX)"
fi
mkdir -p "$dir"
if [[ "$(id -u)" == 0 ]]; then
    chown postgres: "$dir"
    if ! runuser -u postgres -- test -x "$dir"; then
        echo "start-postgres.sh: the postgres user cannot reach $dir (a parent directory is" \
             "closed to it, e.g. made by a bare mktemp -d); give --dir a directory under /tmp," \
             "e.g. --dir \"\$(mktemp -d /tmp/simple-pg.XXXXXX)\"" >&2
        exit 1
    fi
fi
chmod 700 "$dir"

initdb_log="$(mktemp)"
as_owner "$bin/initdb" -D "$dir" -A trust -U postgres -E UTF8 --locale=C.UTF-8 >"$initdb_log" 2>&1 \
    || { cat "$initdb_log" >&2; rm -f "$initdb_log"; exit 1; }
rm -f "$initdb_log"
options="-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200"
if [[ "$fast" == 1 ]]; then
    options="$options -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
fi
as_owner "$bin/pg_ctl" -D "$dir" -o "$options" -l "$dir/server.log" -w -t 60 start >&2 \
    || { cat "$dir/server.log" >&2; exit 1; }

echo "start-postgres.sh: PostgreSQL on 127.0.0.1:$port, cluster in $dir" \
     "(stop: scripts/start-postgres.sh --stop $dir)" >&2
echo "postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
